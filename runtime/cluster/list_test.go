package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/scheduler"
)

func TestParseFilter(t *testing.T) {
	for in, want := range map[string]Filter{
		"state=ALIVE":        {"state", "=", "ALIVE"},
		"node!=w1":           {"node", "!=", "w1"},
		" labels.zone = a ":  {"labels.zone", "=", "a"},
		"name=":              {"name", "=", ""},
		"pending_reason=a=b": {"pending_reason", "=", "a=b"},
	} {
		got, err := ParseFilter(in)
		if err != nil || got != want {
			t.Errorf("ParseFilter(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"state", "=x", "!=x"} {
		if _, err := ParseFilter(bad); !errors.Is(err, ErrBadFilter) {
			t.Errorf("ParseFilter(%q): %v, want ErrBadFilter", bad, err)
		}
	}
}

// TestList: every kind lists through any node (a worker forwards);
// filters match JSON fields (dotted into maps, any element of a list,
// ignoring case) and refuse unknown keys; the limit cuts the listing and
// Total counts all matches; dead actors past the retention window leave
// the listing unless All; one entry is found by ID, unique prefix or name.
func TestList(t *testing.T) {
	const tok = "list-token"
	hc := testConfig(t, "head", RoleHead, tok)
	hc.Labels = map[string]string{"zone": "a"}
	head := startNode(t, hc)
	wc := testConfig(t, "w1", RoleWorker, tok)
	wc.Join = []string{head.Addr()}
	wc.Labels = map[string]string{"zone": "b"}
	wc.Resources.Custom = map[string]float64{"tpu": 1}
	w1 := startNode(t, wc)
	waitFor(t, "both nodes registered", 10*time.Second, func() bool { return len(head.Status().Nodes) == 2 })
	c := NewClientMust(t, w1.Addr(), tok) // through the worker: forwarded
	ctx := context.Background()
	list := func(r ListRequest) *ListResponse {
		t.Helper()
		resp, err := c.List(ctx, &r)
		if err != nil {
			t.Fatalf("list %+v: %v", r, err)
		}
		return resp
	}

	// Actors with a garbled launch record die when their node tries to
	// start them; one without any is a placement record left PENDING.
	bad := []byte{0xc1}
	specs := []scheduler.ActorSpec{
		{ID: "actor-a1", Name: "learner", Class: "Learner", JobID: "job-1", Args: bad, Request: scheduler.Request{Resources: scheduler.Resources{Custom: map[string]float64{"tpu": 1}}}},
		{ID: "actor-a2", Class: "Env", JobID: "job-1", Args: bad, Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 100}}},
		{ID: "actor-b3", Class: "Env", JobID: "job-2", Args: bad, Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 100}}},
		{ID: "actor-b4", Class: "Env", JobID: "job-2", Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 100}}},
	}
	if _, err := c.CreateActors(ctx, specs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three actors dead", 10*time.Second, func() bool {
		return list(ListRequest{Kind: ListActors, Filters: []Filter{{"state", "=", "dead"}}}).Total == 3
	})
	all := list(ListRequest{Kind: ListActors})
	if all.Total != 4 || len(all.Actors) != 4 || all.Hidden != 0 {
		t.Fatalf("all actors: total %d, %d listed, %d hidden", all.Total, len(all.Actors), all.Hidden)
	}
	if a := all.Actors[0]; a.ID != "actor-a1" || a.Job != "job-1" || a.CreatedAt == 0 || a.UpdatedAt < a.CreatedAt {
		t.Errorf("first actor (by creation) %+v", a)
	}
	for _, tc := range []struct {
		filters []Filter
		want    int
	}{
		{[]Filter{{"class", "=", "env"}}, 3},
		{[]Filter{{"class", "=", "Env"}, {"job", "!=", "job-1"}}, 2},
		{[]Filter{{"state", "=", "PENDING"}}, 1},
		{[]Filter{{"name", "=", ""}}, 3},
		{[]Filter{{"resources.Custom.tpu", "=", "1"}}, 1},
	} {
		if got := list(ListRequest{Kind: ListActors, Filters: tc.filters}).Total; got != tc.want {
			t.Errorf("filters %v: %d actors, want %d", tc.filters, got, tc.want)
		}
	}
	if r := list(ListRequest{Kind: ListActors, Limit: 2}); r.Total != 4 || len(r.Actors) != 2 {
		t.Errorf("limit 2: %d listed of %d", len(r.Actors), r.Total)
	}
	// Retention: with a window of 1 ns every dead actor is past it.
	r := list(ListRequest{Kind: ListActors, DeadRetention: time.Nanosecond})
	if r.Total != 1 || r.Hidden != 3 || r.Actors[0].ID != "actor-b4" {
		t.Errorf("retention 1ns: %+v, want the pending actor listed and 3 hidden", r)
	}
	if r := list(ListRequest{Kind: ListActors, DeadRetention: time.Nanosecond, All: true}); r.Total != 4 || r.Hidden != 0 {
		t.Errorf("retention 1ns with All: total %d hidden %d", r.Total, r.Hidden)
	}
	// Detail by ID, prefix, or name; dead ones too.
	for _, id := range []string{"actor-a1", "actor-a", "learner"} {
		r, err := c.List(ctx, &ListRequest{Kind: ListActors, ID: id, DeadRetention: time.Nanosecond})
		if id == "actor-a" {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "matches 2 actors") {
				t.Errorf("ambiguous prefix: %v", err)
			}
			continue
		}
		if err != nil || len(r.Actors) != 1 || r.Actors[0].ID != "actor-a1" || r.Actors[0].Death == "" {
			t.Errorf("detail %q: %+v %v", id, r, err)
		}
	}
	if _, err := c.List(ctx, &ListRequest{Kind: ListActors, ID: "nobody"}); status.Code(err) != codes.NotFound {
		t.Errorf("detail of an unknown actor: %v", err)
	}

	// Nodes, with a filter into their labels.
	nodes := list(ListRequest{Kind: ListNodes, Filters: []Filter{{"labels.zone", "=", "b"}}})
	if nodes.Total != 1 || nodes.Nodes[0].ID != "w1" || nodes.Nodes[0].State != "alive" {
		t.Errorf("nodes in zone b: %+v", nodes.Nodes)
	}
	// Jobs and groups (none of either yet).
	if r := list(ListRequest{Kind: ListJobs}); r.Total != 0 {
		t.Errorf("jobs: %+v", r)
	}
	if _, err := c.CommitPlacementGroups(ctx, []scheduler.GroupSpec{{ID: "pg-1", Name: "trainers", Strategy: scheduler.Pack,
		Bundles: []scheduler.Resources{{MilliCPU: 100}, {MilliCPU: 100}}}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the group", 5*time.Second, func() bool {
		g := list(ListRequest{Kind: ListGroups, Filters: []Filter{{"state", "=", "created"}}})
		return g.Total == 1 && g.Groups[0].Name == "trainers" && len(g.Groups[0].BundleResources) == 2
	})
	// Objects: no worker processes run, so none.
	if r := list(ListRequest{Kind: ListObjects}); r.Total != 0 || len(r.Partial) != 0 {
		t.Errorf("objects: %+v", r)
	}

	// Bad requests say what is wrong.
	_, err := c.List(ctx, &ListRequest{Kind: ListActors, Filters: []Filter{{"colour", "=", "red"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `no field "colour"`) || !strings.Contains(err.Error(), "state") {
		t.Errorf("unknown filter key: %v", err)
	}
	if _, err := c.List(ctx, &ListRequest{Kind: "tasks"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "actors, groups, nodes, jobs, objects") {
		t.Errorf("unknown kind: %v", err)
	}
}
