package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"troupe/cmd/internal/cli"
	"troupe/runtime/cluster"
	"troupe/scheduler"
)

const listHelp = `Lists one kind of the cluster's entities, as 'ray list' does:

  actors    actors and their state, node, GPUs, job and restarts
  groups    placement groups and where their bundles are reserved
  nodes     nodes: role, state (alive, suspect, draining, dead, drained),
            resources used and total, labels
  jobs      drivers, submitted or started by hand
  objects   results of 256 KiB or more held in worker processes' object
            stores (objects a driver put with actors.Put are not listed)

--filter KEY=VALUE (or KEY!=VALUE; repeatable, all must hold) keeps the
entries whose field KEY, as --json names it, has that value (ignoring
case): --filter state=ALIVE, --filter node!=w1, --filter labels.zone=a
(a dotted key reaches into a map), --filter gpus=3 (any element of a
list). Actors dead for longer than --dead-retention (default 5m, as Ray
keeps dead actors for 5 minutes) are left out unless --all.
--detail ID shows every field of one entry: its ID, a unique start of
it, or (actors, groups, jobs) its name.

Examples:
  troupe list actors --filter state=ALIVE --filter class=Policy
  troupe list nodes --json
  troupe list actors --detail 3f2a
`

func runList(ctx context.Context, args []string) error {
	fs := newFlagSet("list", "actors|groups|nodes|jobs|objects [flags]", listHelp)
	cf := addClusterFlags(fs)
	var filters filterFlags
	fs.Var(&filters, "filter", "keep entries whose field KEY is (=) or is not (!=) VALUE (repeatable)")
	limit := fs.Int("limit", cluster.DefaultListLimit, fmt.Sprintf("list at most this many entries (at most %d)", cluster.MaxListLimit))
	asJSON := fs.Bool("json", false, "print JSON for scripts (an array; one object with --detail)")
	detail := fs.String("detail", "", "show every field of the entry with this ID (or unique ID prefix, or name)")
	all := fs.Bool("all", false, "list actors that died longer than --dead-retention ago too")
	retention := fs.Duration("dead-retention", cluster.DefaultDeadRetention, "how long a dead actor stays in the listing")
	kind, help, err := parseOneArg(fs, args, "KIND (actors, groups, nodes, jobs or objects)")
	if help || err != nil {
		return err
	}
	kind = normalizeKind(kind)
	if !validKind(kind) {
		fmt.Fprintf(fs.Output(), "troupe list: unknown kind %q: want one of %s\n", kind, strings.Join(cluster.ListKinds, ", "))
		return cli.ErrUsage
	}
	if *limit <= 0 || *limit > cluster.MaxListLimit {
		return fmt.Errorf("--limit %d: want 1..%d", *limit, cluster.MaxListLimit)
	}
	if *retention <= 0 {
		return fmt.Errorf("--dead-retention %v: want a positive duration (--all lists every dead actor)", *retention)
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := c.List(lctx, &cluster.ListRequest{Kind: kind, Filters: filters, Limit: *limit, All: *all, DeadRetention: *retention, ID: *detail})
	if err != nil {
		return err
	}
	return printList(os.Stdout, os.Stderr, kind, resp, listOptions{json: *asJSON, detail: *detail != "", retention: *retention, now: time.Now()})
}

// normalizeKind accepts singular forms and "placement-groups".
func normalizeKind(k string) string {
	k = strings.ToLower(k)
	switch k {
	case "actor", "group", "node", "job", "object":
		return k + "s"
	case "pgs", "pg", "placement-groups", "placement_groups", "placementgroups":
		return cluster.ListGroups
	}
	return k
}

func validKind(k string) bool {
	for _, x := range cluster.ListKinds {
		if k == x {
			return true
		}
	}
	return false
}

// filterFlags collects repeated --filter flags.
type filterFlags []cluster.Filter

func (f *filterFlags) String() string {
	var s []string
	for _, x := range *f {
		s = append(s, x.String())
	}
	return strings.Join(s, ",")
}

func (f *filterFlags) Set(s string) error {
	x, err := cluster.ParseFilter(s)
	if err != nil {
		return err
	}
	*f = append(*f, x)
	return nil
}

type listOptions struct {
	json, detail bool
	retention    time.Duration
	now          time.Time
}

// printList prints a listing as a table (or JSON, or one entry's detail)
// to w, and notes about what was left out to notes.
func printList(w, notes io.Writer, kind string, resp *cluster.ListResponse, o listOptions) error {
	items := listItems(kind, resp)
	if o.json {
		if o.detail && len(items) == 1 {
			return writeJSON(w, items[0])
		}
		arr := reflect.MakeSlice(reflect.SliceOf(listElem(kind)), 0, len(items))
		for _, it := range items {
			arr = reflect.Append(arr, reflect.ValueOf(it))
		}
		return writeJSON(w, arr.Interface())
	}
	if o.detail {
		for _, it := range items {
			printDetail(w, it, "", o.now)
		}
		return nil
	}
	switch kind {
	case cluster.ListActors:
		renderActorList(w, resp.Actors, o.now)
	case cluster.ListGroups:
		renderGroups(w, resp.Groups)
	case cluster.ListNodes:
		renderNodes(w, resp.Nodes)
	case cluster.ListJobs:
		renderJobs(w, resp.Jobs, o.now)
	case cluster.ListObjects:
		renderObjects(w, resp.Objects, o.now)
	}
	if len(items) < resp.Total {
		fmt.Fprintf(notes, "(%d of %d shown; --limit N shows more, --filter KEY=VALUE fewer)\n", len(items), resp.Total)
	}
	if resp.Hidden > 0 {
		fmt.Fprintf(notes, "(%d actors that died more than %v ago not shown; --all shows them)\n", resp.Hidden, o.retention)
	}
	for _, p := range resp.Partial {
		fmt.Fprintf(notes, "warning: %s\n", p)
	}
	return nil
}

func listItems(kind string, r *cluster.ListResponse) []any {
	var out []any
	add := func(v any) {
		s := reflect.ValueOf(v)
		for i := 0; i < s.Len(); i++ {
			out = append(out, s.Index(i).Interface())
		}
	}
	switch kind {
	case cluster.ListActors:
		add(r.Actors)
	case cluster.ListGroups:
		add(r.Groups)
	case cluster.ListNodes:
		add(r.Nodes)
	case cluster.ListJobs:
		add(r.Jobs)
	case cluster.ListObjects:
		add(r.Objects)
	}
	return out
}

func listElem(kind string) reflect.Type {
	switch kind {
	case cluster.ListActors:
		return reflect.TypeFor[cluster.ActorView]()
	case cluster.ListGroups:
		return reflect.TypeFor[cluster.GroupView]()
	case cluster.ListNodes:
		return reflect.TypeFor[cluster.NodeView]()
	case cluster.ListJobs:
		return reflect.TypeFor[cluster.JobView]()
	}
	return reflect.TypeFor[cluster.ObjectView]()
}

// age formats how long ago a Unix-nanosecond time was ("-" for none).
func age(ns int64, now time.Time) string {
	if ns == 0 {
		return "-"
	}
	d := now.Sub(time.Unix(0, ns))
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func renderActorList(w io.Writer, list []cluster.ActorView, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no actors")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTOR\tNAME\tCLASS\tSTATE\tNODE\tGPUS\tJOB\tRESTARTS\tAGE\tINFO")
	for _, a := range list {
		name := a.Name
		if a.Namespace != "" {
			name = a.Namespace + "/" + name
		}
		gpus := "-"
		if len(a.GPUs) > 0 {
			gpus = fmt.Sprint(a.GPUs)
		}
		info := a.Death
		if a.Pending != "" {
			info = a.Pending
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", a.ID, dash(name), dash(a.Class), a.State, dash(a.Node), gpus, dash(a.Job),
			a.Restarts, age(a.CreatedAt, now), trunc(info, 80))
	}
	tw.Flush()
}

func renderGroups(w io.Writer, list []cluster.GroupView) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no placement groups")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tNAME\tSTRATEGY\tSTATE\tJOB\tBUNDLES")
	for _, g := range list {
		b := make([]string, len(g.Bundles))
		for i, x := range g.Bundles {
			if x == "" {
				x = "waiting"
			}
			b[i] = fmt.Sprintf("%d:%s", i, x)
		}
		state := g.State
		if g.Pending != "" {
			state += " (" + g.Pending + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, dash(g.Name), g.Strategy, state, dash(g.Job), strings.Join(b, "; "))
	}
	tw.Flush()
}

func renderNodes(w io.Writer, list []cluster.NodeView) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no nodes")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATE\tADDRESS\tCPU\tMEMORY\tGPU\tLABELS\tCAUSE")
	for _, n := range list {
		gpu := fmt.Sprintf("%g/%g", n.Used.GPUs, n.Total.GPUs)
		if n.Labels["troupe.gpus"] == "simulated" {
			gpu += " (sim)"
		}
		var labels []string
		for k, v := range n.Labels {
			if !strings.HasPrefix(k, "troupe.") {
				labels = append(labels, k+"="+v)
			}
		}
		sort.Strings(labels)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, dash(n.Role), n.State, n.Address, fmtCPU(n.Used, n.Total), fmtMem(n.Used, n.Total), gpu,
			dash(strings.Join(labels, ",")), trunc(dash(n.Cause), 60))
	}
	tw.Flush()
}

func renderObjects(w io.Writer, list []cluster.ObjectView, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no objects")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OBJECT\tSIZE\tNODE\tJOB\tACTOR\tREFS\tAGE")
	for _, o := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", o.ID, fmtBytes(o.Size), o.Node, dash(o.Job), dash(o.Actor), o.Refs, age(o.CreatedAt, now))
	}
	tw.Flush()
}

// printDetail prints every set field of a view, one per line, in the
// order of the struct, under the names --json uses; times as dates.
func printDetail(w io.Writer, v any, indent string, now time.Time) {
	rv := reflect.ValueOf(v)
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fv := rv.Field(i)
		if strings.Contains(opts, "omitempty") && fv.IsZero() {
			continue
		}
		fmt.Fprintf(w, "%s%s: %s\n", indent, name, detailValue(name, fv, now))
	}
	fmt.Fprintln(w)
}

func detailValue(name string, v reflect.Value, now time.Time) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "-"
		}
		v = v.Elem()
	}
	if r, ok := v.Interface().(scheduler.Resources); ok {
		return r.String()
	}
	switch v.Kind() {
	case reflect.Int64:
		if strings.HasSuffix(name, "_at") && v.Int() > 0 {
			t := time.Unix(0, v.Int())
			return t.Format(time.RFC3339) + " (" + age(v.Int(), now) + " ago)"
		}
		if name == "size_bytes" {
			return fmtBytes(v.Int()) + " (" + strconv.FormatInt(v.Int(), 10) + ")"
		}
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			keys = append(keys, fmt.Sprint(k.Interface()))
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%v", k, v.MapIndex(reflect.ValueOf(k)).Interface())
		}
		return strings.Join(parts, " ")
	case reflect.Slice:
		if v.Type().Elem() == reflect.TypeFor[scheduler.Resources]() {
			parts := make([]string, v.Len())
			for i := range parts {
				parts[i] = fmt.Sprintf("%d: %s", i, v.Index(i).Interface().(scheduler.Resources).String())
			}
			return "[" + strings.Join(parts, "; ") + "]"
		}
	}
	return fmt.Sprint(v.Interface())
}
