package scheduler

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func snapshotBytes(t testing.TB, s *State) []byte {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gpuBundles(n int, gpus float64) []Resources {
	out := make([]Resources, n)
	for i := range out {
		out[i] = Resources{MilliCPU: 1000, GPUs: gpus}
	}
	return out
}

type wantBundle struct {
	node NodeID
	gpus []int
}

func TestGroupStrategies(t *testing.T) {
	islands := IslandsTopology(2, 4, 2, ScoreCrossCPU)
	cases := []struct {
		name     string
		nodes    int
		used     map[NodeID][]int
		strategy Strategy
		bundles  []Resources
		want     []wantBundle
		wantErr  error
	}{
		{"strict-pack-one-island", 2, nil, StrictPack, gpuBundles(2, 2), []wantBundle{{"n0", []int{0, 1}}, {"n0", []int{2, 3}}}, nil},
		{"strict-pack-avoids-broken-island", 1, map[NodeID][]int{"n0": {1}}, StrictPack, gpuBundles(2, 2), []wantBundle{{"n0", []int{4, 5}}, {"n0", []int{6, 7}}}, nil},
		{"strict-pack-best-fit-node", 2, map[NodeID][]int{"n1": {0, 1, 2, 3}}, StrictPack, gpuBundles(2, 2), []wantBundle{{"n1", []int{4, 5}}, {"n1", []int{6, 7}}}, nil},
		{"strict-pack-too-big", 2, nil, StrictPack, gpuBundles(3, 4), nil, ErrInfeasible},
		{"strict-pack-busy", 2, map[NodeID][]int{"n0": {0}, "n1": {0}}, StrictPack, gpuBundles(2, 4), nil, ErrPending},
		{"pack-overflows-to-second-node", 2, nil, Pack, gpuBundles(3, 4), []wantBundle{{"n0", []int{0, 1, 2, 3}}, {"n0", []int{4, 5, 6, 7}}, {"n1", []int{0, 1, 2, 3}}}, nil},
		{"spread", 3, nil, Spread, gpuBundles(3, 1), []wantBundle{{"n0", []int{0}}, {"n1", []int{0}}, {"n2", []int{0}}}, nil},
		{"spread-reuses-when-short", 2, nil, Spread, gpuBundles(3, 1), []wantBundle{{"n0", []int{0}}, {"n1", []int{0}}, {"n0", []int{1}}}, nil},
		{"strict-spread", 3, nil, StrictSpread, gpuBundles(3, 2), []wantBundle{{"n0", []int{0, 1}}, {"n1", []int{0, 1}}, {"n2", []int{0, 1}}}, nil},
		{"strict-spread-too-many", 2, nil, StrictSpread, gpuBundles(3, 1), nil, ErrInfeasible},
		{"strict-spread-busy", 3, map[NodeID][]int{"n2": {0, 1, 2, 3, 4, 5, 6}}, StrictSpread, gpuBundles(3, 2), nil, ErrPending},
		{"fractions-share-a-gpu", 1, nil, StrictPack, gpuBundles(2, 0.5), []wantBundle{{"n0", []int{0}}, {"n0", []int{0}}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []NodeInfo
			for i := 0; i < tc.nodes; i++ {
				nodes = append(nodes, SimNode(NodeID("n"+string(rune('0'+i))), 64, 1<<40, islands))
			}
			s := newStateWith(t, nodes...)
			for id, idx := range tc.used {
				occupy(t, s, id, idx...)
			}
			before := snapshotBytes(t, s)
			spec := GroupSpec{ID: "pg", Strategy: tc.strategy, Bundles: tc.bundles}
			c, err := Planner{}.CreateGroup(s, spec, 5)
			if tc.wantErr != nil {
				if err == nil && c.Bundles == nil && errors.Is(tc.wantErr, ErrPending) {
					t.Logf("pending: %s", c.PendingReason)
					mustApply(t, s, c)
					if g := s.Group("pg"); g.State != GroupPending || g.Bundles[0].Node != "" {
						t.Fatalf("pending group state %v", g.State)
					}
					return
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v (cmd %+v), want %v", err, c, tc.wantErr)
				}
				if !bytes.Equal(before, snapshotBytes(t, s)) {
					t.Fatal("failed planning changed the state")
				}
				return
			}
			if err != nil || c.Bundles == nil {
				t.Fatalf("create group: %v %+v", err, c)
			}
			mustApply(t, s, c)
			g := s.Group("pg")
			if g.State != GroupCreated {
				t.Fatalf("group state %v", g.State)
			}
			for i, w := range tc.want {
				b := g.Bundles[i]
				if b.Index != i || b.Node != w.node || !reflect.DeepEqual(GPUIndices(b.GPUs), w.gpus) {
					t.Errorf("bundle %d on %s %v, want %s %v", i, b.Node, GPUIndices(b.GPUs), w.node, w.gpus)
				}
			}
			checkInvariants(t, s)
			mustApply(t, s, &RemovePlacementGroup{Group: "pg", At: 6})
			if !bytes.Equal(before, snapshotBytes(t, s)) {
				t.Fatal("removing the group did not restore the exact free state")
			}
		})
	}
}

func TestActorsInBundles(t *testing.T) {
	s := newStateWith(t, SimNode("n0", 64, 1<<40, IslandsTopology(2, 4, 2, ScoreCrossCPU)))
	occupy(t, s, "n0", 1)
	before := snapshotBytes(t, s)
	p := Planner{}
	gc, err := p.CreateGroup(s, GroupSpec{ID: "pg", Strategy: StrictPack, Bundles: []Resources{{MilliCPU: 4000, GPUs: 4}, {MilliCPU: 1000, GPUs: 0.5}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, gc)
	g := s.Group("pg")
	if got := GPUIndices(g.Bundles[0].GPUs); !reflect.DeepEqual(got, []int{4, 5, 6, 7}) {
		t.Fatalf("bundle 0 GPUs %v, want the intact island [4 5 6 7]", got)
	}
	nodeFree := s.Node("n0").Free.Clone()
	// Two 2-GPU actors in bundle 0, one fractional in bundle 1.
	for i, want := range [][]int{{4, 5}, {6, 7}} {
		spec := ActorSpec{ID: ActorID("a" + string(rune('0'+i))), Request: Request{Resources: Resources{MilliCPU: 1000, GPUs: 2}, Group: "pg", Bundle: 0}}
		c, err := p.CreateActor(s, spec, 2)
		if err != nil || c.Placement == nil {
			t.Fatalf("actor %d: %v %+v", i, err, c)
		}
		if got := GPUIndices(c.Placement.GPUs); c.Placement.Bundle != 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("actor %d placed %v, want bundle 0 %v", i, c.Placement, want)
		}
		mustApply(t, s, c)
	}
	c, err := p.CreateActor(s, ActorSpec{ID: "frac", Request: Request{Resources: Resources{GPUs: 0.25}, Group: "pg", Bundle: AnyBundle}}, 3)
	if err != nil || c.Placement == nil || c.Placement.Bundle != 1 {
		t.Fatalf("fractional actor: %v %+v", err, c)
	}
	mustApply(t, s, c)
	if !reflect.DeepEqual(s.Node("n0").Free, nodeFree) {
		t.Fatal("actors in bundles changed the node's free resources")
	}
	// Bundle 0 is full now; an actor bigger than any bundle is infeasible.
	c, err = p.CreateActor(s, ActorSpec{ID: "wait", Request: Request{Resources: Resources{GPUs: 1}, Group: "pg", Bundle: 0}}, 4)
	if err != nil || c.Placement != nil || c.PendingReason == "" {
		t.Fatalf("full bundle: %v %+v, want pending", err, c)
	}
	if _, err = p.CreateActor(s, ActorSpec{ID: "big", Request: Request{Resources: Resources{GPUs: 8}, Group: "pg", Bundle: AnyBundle}}, 4); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("too big for every bundle: %v", err)
	}
	// A placement outside the bundle's devices is refused.
	err = s.Apply(&CreateActor{Spec: ActorSpec{ID: "bad", Request: Request{Resources: Resources{GPUs: 1}, Group: "pg", Bundle: 0}}, Placement: &Placement{Node: "n0", GPUs: []GPUAlloc{{Index: 0, Fraction: 1}}, Bundle: 0}})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("placement outside the bundle: %v", err)
	}
	checkInvariants(t, s)
	// Removing the group kills its actors and frees everything exactly.
	mustApply(t, s, &RemovePlacementGroup{Group: "pg", At: 9})
	for _, id := range []ActorID{"a0", "a1", "frac"} {
		if a := s.Actor(id); a.State != ActorDead || a.Node != "" {
			t.Fatalf("actor %s after group removal: %v on %q", id, a.State, a.Node)
		}
	}
	after := NewState()
	if err := after.UnmarshalBinary(snapshotBytes(t, s)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Node("n0"), mustDecodeNode(t, before, "n0")) {
		t.Fatal("node free state not restored exactly")
	}
}

func mustDecodeNode(t *testing.T, snap []byte, id NodeID) *Node {
	s := NewState()
	if err := s.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	return s.Node(id)
}
