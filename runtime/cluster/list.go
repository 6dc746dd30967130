package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/transport"
	"troupe/scheduler"

	"troupe/runtime/api"
)

// Listing, as `ray list` does it: one call lists one kind of the cluster's
// entities (actors, placement groups, nodes, jobs, objects), filtered and
// cut to a limit on the server, so a cluster with many actors ships only
// what is shown. A filter is key=value or key!=value on the fields of the
// kind's JSON form (the keys `troupe list KIND --json` prints; a dotted
// key reaches into a map, labels.zone=a). Actors dead for longer than a
// retention window leave the default listing, so it does not grow without
// bound; All lists them too (the state machine forgets the oldest beyond
// scheduler.MaxDeadActors either way).

// StateServiceName is the gRPC name of the listing service every node
// serves.
const StateServiceName = "troupe.State"

// Listable kinds.
const (
	ListActors  = "actors"
	ListGroups  = "groups"
	ListNodes   = "nodes"
	ListJobs    = "jobs"
	ListObjects = "objects"
)

// ListKinds are the kinds List accepts, in the order help texts show them.
var ListKinds = []string{ListActors, ListGroups, ListNodes, ListJobs, ListObjects}

const (
	// DefaultListLimit is how many entries a listing returns unless asked
	// (Ray's default too).
	DefaultListLimit = 100
	// MaxListLimit bounds one answer, so it fits one message.
	MaxListLimit = 20000
	// DefaultDeadRetention is how long a dead actor stays in the default
	// listing: Ray keeps dead actors in its actor table for 5 minutes
	// (gcs_actor_table_min_duration_ms) before it may drop them.
	DefaultDeadRetention = 5 * time.Minute
)

// Errors of listing.
var (
	// ErrBadFilter: a filter is malformed or names no field of the kind.
	ErrBadFilter = api.ErrBadFilter
	// ErrUnknownKind: List was asked for a kind it does not know.
	ErrUnknownKind = api.ErrUnknownKind
)

// Filter keeps the entries whose field Key equals Value (Op "=") or does
// not (Op "!="). Values compare as text, ignoring case; a list field
// matches when any element does; a field an entry does not have is "".
type Filter struct {
	Key   string `msgpack:"k"`
	Op    string `msgpack:"op"`
	Value string `msgpack:"v"`
}

// String formats the filter as ParseFilter reads it.
func (f Filter) String() string { return f.Key + f.Op + f.Value }

// ParseFilter reads "key=value" or "key!=value".
func ParseFilter(s string) (Filter, error) {
	if k, v, ok := strings.Cut(s, "!="); ok {
		return checkFilter(Filter{Key: strings.TrimSpace(k), Op: "!=", Value: strings.TrimSpace(v)}, s)
	}
	if k, v, ok := strings.Cut(s, "="); ok {
		return checkFilter(Filter{Key: strings.TrimSpace(k), Op: "=", Value: strings.TrimSpace(v)}, s)
	}
	return Filter{}, fmt.Errorf("%w %q: want key=value or key!=value", ErrBadFilter, s)
}

func checkFilter(f Filter, s string) (Filter, error) {
	if f.Key == "" {
		return Filter{}, fmt.Errorf("%w %q: no key before %s", ErrBadFilter, s, f.Op)
	}
	return f, nil
}

// ListRequest asks for one kind of entity.
type ListRequest struct {
	Kind    string   `msgpack:"kind"`
	Filters []Filter `msgpack:"filters,omitempty"`
	// Limit bounds the entries returned (0: DefaultListLimit; at most
	// MaxListLimit).
	Limit int `msgpack:"limit,omitempty"`
	// All lists actors dead for longer than DeadRetention too.
	All bool `msgpack:"all,omitempty"`
	// DeadRetention is how long a dead actor stays listed without All
	// (0: DefaultDeadRetention).
	DeadRetention time.Duration `msgpack:"retention,omitempty"`
	// ID, when set, asks for the one entry with this ID (or the only one
	// whose ID starts with it), dead or alive; filters do not apply.
	ID   string `msgpack:"id,omitempty"`
	Hops int    `msgpack:"hops,omitempty"`
}

// ListResponse carries the entries of the asked kind, in a stable order:
// actors and groups by creation, nodes by ID, jobs by submission, objects
// by node and ID.
type ListResponse struct {
	ReportedBy string       `msgpack:"by" json:"reported_by"`
	Actors     []ActorView  `msgpack:"actors,omitempty" json:"actors,omitempty"`
	Groups     []GroupView  `msgpack:"groups,omitempty" json:"placement_groups,omitempty"`
	Nodes      []NodeView   `msgpack:"nodes,omitempty" json:"nodes,omitempty"`
	Jobs       []JobView    `msgpack:"jobs,omitempty" json:"jobs,omitempty"`
	Objects    []ObjectView `msgpack:"objects,omitempty" json:"objects,omitempty"`
	// Total is how many entries matched before the limit.
	Total int `msgpack:"total" json:"total"`
	// Hidden counts dead actors left out because they died longer than
	// the retention window ago (they match the filters).
	Hidden int `msgpack:"hidden,omitempty" json:"hidden,omitempty"`
	// Partial names the nodes whose objects could not be listed, and why.
	Partial []string `msgpack:"partial,omitempty" json:"partial,omitempty"`
}

// listServer is what the State service's handlers call.
type listServer interface {
	list(ctx context.Context, r *ListRequest) (*ListResponse, error)
	nodeObjects(ctx context.Context, r *NodeObjectsRequest) (*NodeObjectsResponse, error)
}

var listDesc = grpc.ServiceDesc{
	ServiceName: StateServiceName,
	HandlerType: (*listServer)(nil),
	Methods: []grpc.MethodDesc{
		transport.UnaryMethod(StateServiceName, "List", listServer.list),
		transport.UnaryMethod(StateServiceName, "NodeObjects", listServer.nodeObjects),
	},
	Metadata: "troupe/runtime/cluster/list.go",
}

// listImpl is a node's State service.
type listImpl struct{ n *Node }

func (l *listImpl) node() *Node { return l.n }

// List lists one kind of the cluster's entities (see ListRequest).
func (c *Client) List(ctx context.Context, r *ListRequest) (*ListResponse, error) {
	out := new(ListResponse)
	if err := c.InvokeService(ctx, StateServiceName, "List", r, out); err != nil {
		return nil, err
	}
	return out, nil
}

// List answers r from this node (a worker forwards to a server).
func (n *Node) List(ctx context.Context, r *ListRequest) (*ListResponse, error) {
	return n.list.list(ctx, r)
}

func (l *listImpl) list(ctx context.Context, r *ListRequest) (*ListResponse, error) {
	n := l.node()
	proto, ok := listProto[r.Kind]
	if !ok {
		return nil, transport.Status(codes.InvalidArgument, fmt.Errorf("list: %w %q (want one of %s)", ErrUnknownKind, r.Kind, strings.Join(ListKinds, ", ")))
	}
	for _, f := range r.Filters {
		if err := checkKey(proto, f); err != nil {
			return nil, transport.Status(codes.InvalidArgument, err)
		}
	}
	if n.raft == nil { // a worker keeps no state: a server answers
		if r.Hops >= maxHops {
			return nil, status.Error(codes.Unavailable, "no server reachable")
		}
		addr := n.anyServer()
		if addr == "" {
			return nil, status.Error(codes.Unavailable, "this worker knows no live server")
		}
		cc, err := n.peers.get(addr)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "dial server %s: %v", addr, err)
		}
		fwd := *r
		fwd.Hops++
		out := new(ListResponse)
		return out, cc.Invoke(ctx, "/"+StateServiceName+"/List", &fwd, out)
	}
	limit := r.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	retention := r.DeadRetention
	if retention <= 0 {
		retention = DefaultDeadRetention
	}
	out := &ListResponse{ReportedBy: n.cfg.NodeID}
	var items []any
	if r.Kind == ListObjects {
		objs, partial := n.clusterObjects(ctx)
		out.Partial = partial
		for i := range objs {
			items = append(items, objs[i])
		}
	} else {
		now := time.Now().UnixNano()
		n.fsm.Read(func(s *scheduler.State) {
			switch r.Kind {
			case ListActors:
				for _, a := range s.Actors() {
					if r.ID == "" && !r.All && a.State == scheduler.ActorDead && now-a.UpdatedAt > int64(retention) {
						items = append(items, hiddenActor{actorView(a)})
						continue
					}
					items = append(items, actorView(a))
				}
			case ListGroups:
				for _, g := range s.Groups() {
					items = append(items, groupView(g))
				}
			case ListNodes:
				for _, nd := range s.Nodes() {
					items = append(items, nodeView(nd))
				}
			case ListJobs:
				for _, j := range s.Jobs() {
					items = append(items, jobView(j))
				}
			}
		})
	}
	if r.ID != "" {
		it, err := findByID(r.Kind, items, r.ID)
		if err != nil {
			return nil, err
		}
		out.Total = 1
		appendItem(out, it)
		return out, nil
	}
	sortItems(r.Kind, items)
	for _, it := range items {
		match, err := matchAll(it, r.Filters)
		if err != nil {
			return nil, transport.Status(codes.InvalidArgument, err)
		}
		if !match {
			continue
		}
		if _, hidden := it.(hiddenActor); hidden {
			out.Hidden++
			continue
		}
		out.Total++
		if out.Total <= limit {
			appendItem(out, it)
		}
	}
	return out, nil
}

// hiddenActor is a dead actor past the retention window: it is counted
// when it matches the filters, not listed.
type hiddenActor struct{ ActorView }

// listProto holds a value of each kind's view, for its JSON keys.
var listProto = map[string]reflect.Type{
	ListActors:  reflect.TypeFor[ActorView](),
	ListGroups:  reflect.TypeFor[GroupView](),
	ListNodes:   reflect.TypeFor[NodeView](),
	ListJobs:    reflect.TypeFor[JobView](),
	ListObjects: reflect.TypeFor[ObjectView](),
}

// jsonKeys maps the JSON names of t's fields to whether the field is a
// map (then key.sub is allowed).
func jsonKeys(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type.Kind() == reflect.Map
	}
	return out
}

func checkKey(t reflect.Type, f Filter) error {
	keys := jsonKeys(t)
	top, sub, dotted := strings.Cut(f.Key, ".")
	isMap, ok := keys[top]
	if ok && (!dotted || isMap || sub != "") {
		return nil
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	return fmt.Errorf("%w %s: no field %q (fields: %s)", ErrBadFilter, f, f.Key, strings.Join(names, ", "))
}

// matchAll reports whether v passes every filter.
func matchAll(v any, fs []Filter) (bool, error) {
	if len(fs) == 0 {
		return true, nil
	}
	if h, ok := v.(hiddenActor); ok {
		v = h.ActorView
	}
	b, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return false, err
	}
	for _, f := range fs {
		eq := fieldEquals(lookupKey(m, f.Key), f.Value)
		if eq != (f.Op == "=") {
			return false, nil
		}
	}
	return true, nil
}

func lookupKey(m map[string]any, key string) any {
	var cur any = m
	for _, part := range strings.Split(key, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[part]
	}
	return cur
}

// fieldEquals compares a decoded JSON value with a filter's text.
func fieldEquals(v any, want string) bool {
	switch x := v.(type) {
	case nil:
		return want == ""
	case string:
		return strings.EqualFold(x, want)
	case bool:
		return strings.EqualFold(strconv.FormatBool(x), want)
	case float64:
		if f, err := strconv.ParseFloat(want, 64); err == nil {
			return f == x
		}
		return false
	case []any:
		for _, e := range x {
			if fieldEquals(e, want) {
				return true
			}
		}
		return len(x) == 0 && want == ""
	}
	return false // an object: filter on one of its keys instead
}

// idOf returns an entry's ID.
func idOf(v any) string {
	switch x := v.(type) {
	case ActorView:
		return x.ID
	case hiddenActor:
		return x.ID
	case GroupView:
		return x.ID
	case NodeView:
		return x.ID
	case JobView:
		return x.ID
	case ObjectView:
		return x.ID
	}
	return ""
}

// findByID returns the entry with that ID, or the only one whose ID (or,
// for actors and groups, name) starts with it.
func findByID(kind string, items []any, id string) (any, error) {
	var prefixed []any
	for _, it := range items {
		iid := idOf(it)
		if iid == id {
			return it, nil
		}
		if strings.HasPrefix(iid, id) {
			prefixed = append(prefixed, it)
		}
	}
	if len(prefixed) == 0 {
		for _, it := range items {
			if nameOf(it) == id {
				prefixed = append(prefixed, it)
			}
		}
	}
	switch len(prefixed) {
	case 1:
		return prefixed[0], nil
	case 0:
		return nil, status.Errorf(codes.NotFound, "no %s %q (troupe list %s --all lists them)", singular(kind), id, kind)
	}
	var ids []string
	for _, it := range prefixed {
		ids = append(ids, idOf(it))
	}
	sort.Strings(ids)
	if len(ids) > 5 {
		ids = append(ids[:5], "...")
	}
	return nil, status.Errorf(codes.InvalidArgument, "%q matches %d %s (%s): give more of the ID", id, len(prefixed), kind, strings.Join(ids, ", "))
}

func nameOf(v any) string {
	switch x := v.(type) {
	case ActorView:
		return x.Name
	case hiddenActor:
		return x.Name
	case GroupView:
		return x.Name
	case JobView:
		return x.Name
	}
	return ""
}

func singular(kind string) string {
	if kind == ListGroups {
		return "placement group"
	}
	return strings.TrimSuffix(kind, "s")
}

func sortItems(kind string, items []any) {
	created := func(v any) int64 {
		switch x := v.(type) {
		case ActorView:
			return x.CreatedAt
		case hiddenActor:
			return x.CreatedAt
		case GroupView:
			return x.CreatedAt
		case JobView:
			return x.SubmittedAt
		}
		return 0
	}
	sort.SliceStable(items, func(i, j int) bool {
		if kind == ListObjects {
			a, b := items[i].(ObjectView), items[j].(ObjectView)
			if a.Node != b.Node {
				return a.Node < b.Node
			}
			return a.ID < b.ID
		}
		if ci, cj := created(items[i]), created(items[j]); ci != cj {
			return ci < cj
		}
		return idOf(items[i]) < idOf(items[j])
	})
}

func appendItem(out *ListResponse, v any) {
	switch x := v.(type) {
	case ActorView:
		out.Actors = append(out.Actors, x)
	case hiddenActor:
		out.Actors = append(out.Actors, x.ActorView)
	case GroupView:
		out.Groups = append(out.Groups, x)
	case NodeView:
		out.Nodes = append(out.Nodes, x)
	case JobView:
		out.Jobs = append(out.Jobs, x)
	case ObjectView:
		out.Objects = append(out.Objects, x)
	}
}
