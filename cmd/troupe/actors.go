package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"troupe/runtime/cluster"
)

func init() {
	register(command{name: "actors", summary: "list the cluster's actors", run: runActors})
}

func runActors(ctx context.Context, args []string) error {
	fs := newFlagSet("actors", "[--address HOST:PORT] [--state STATE] [--json]", "")
	addr := fs.String("address", "", "gRPC address(es) of cluster nodes (default: TROUPE_ADDRESS or "+defaultClusterAddress+")")
	token := fs.String("token", "", "cluster token (default: TROUPE_TOKEN, or --data-dir's token file)")
	dataDir := fs.String("data-dir", "", "read the token from this node data dir")
	state := fs.String("state", "", "only actors in this state (PENDING, ALIVE, RESTARTING, DEAD)")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	st, err := fetchStatus(ctx, *addr, *token, *dataDir)
	if err != nil {
		return err
	}
	list := filterActors(st.Actors, *state)
	if *asJSON {
		if list == nil {
			list = []cluster.ActorView{}
		}
		return writeJSON(os.Stdout, list)
	}
	renderActors(os.Stdout, list)
	if st.ActorsOmitted > 0 {
		fmt.Printf("(%d more actors not listed; see troupe status for counts by state)\n", st.ActorsOmitted)
	}
	return nil
}

func filterActors(in []cluster.ActorView, state string) []cluster.ActorView {
	if state == "" {
		return in
	}
	var out []cluster.ActorView
	for _, a := range in {
		if strings.EqualFold(a.State, state) {
			out = append(out, a)
		}
	}
	return out
}

func renderActors(w io.Writer, list []cluster.ActorView) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no actors")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTOR\tNAME\tCLASS\tSTATE\tNODE\tGPUS\tRESOURCES\tRESTARTS\tINFO")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", a.ID, dash(name), dash(a.Class), a.State, dash(a.Node), gpus, a.Resources.String(), a.Restarts, info)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
