package scheduler

import (
	"reflect"
	"strings"
	"testing"
)

func TestNodeDiedReschedules(t *testing.T) {
	topo := IslandsTopology(2, 4, 2, ScoreCrossCPU)
	s := newStateWith(t, SimNode("a", 64, 1<<40, topo), SimNode("b", 64, 1<<40, topo), SimNode("c", 64, 1<<40, topo), SimNode("d", 64, 1<<40, topo))
	p := Planner{}
	create := func(spec ActorSpec) {
		t.Helper()
		c, err := p.CreateActor(s, spec, 2)
		if err != nil || c.Placement == nil {
			t.Fatalf("create %s: %v %+v", spec.ID, err, c)
		}
		mustApply(t, s, c, &ActorStarted{Actor: spec.ID, At: 3})
	}
	aff := func(n NodeID) *Affinity { return &Affinity{Node: n, Soft: true} }
	create(ActorSpec{ID: "x", MaxRestarts: 1, Request: Request{Resources: Resources{GPUs: 2}, Affinity: aff("a")}})
	create(ActorSpec{ID: "y", MaxRestarts: 0, Name: "why", Request: Request{Resources: Resources{GPUs: 1}, Affinity: aff("a")}})
	create(ActorSpec{ID: "z", MaxRestarts: -1, Request: Request{Resources: Resources{GPUs: 1}, Affinity: aff("b")}})
	gc, err := p.CreateGroup(s, GroupSpec{ID: "pg", Strategy: StrictSpread, Bundles: gpuBundles(4, 2)}, 4)
	if err != nil || gc.Bundles == nil {
		t.Fatalf("group: %v %+v", err, gc)
	}
	mustApply(t, s, gc)
	onA := -1
	for i, b := range s.Group("pg").Bundles {
		if b.Node == "a" {
			onA = i
		}
	}
	if onA < 0 {
		t.Fatal("no bundle on a")
	}
	// A fifth node joins: the only place STRICT_SPREAD can move a's bundle to.
	mustApply(t, s, &RegisterNode{Node: SimNode("e", 64, 1<<40, topo), At: 5})
	create(ActorSpec{ID: "w", MaxRestarts: 2, Request: Request{Resources: Resources{GPUs: 1}, Group: "pg", Bundle: onA}})

	cmds, waiting, err := p.NodeDied(s, "a", "node a lost", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(waiting) != 0 {
		t.Fatalf("waiting: %+v", waiting)
	}
	again, _, _ := p.NodeDied(s.Clone(), "a", "node a lost", 10)
	if !reflect.DeepEqual(cmds, again) {
		t.Fatal("rescheduling is not a pure function of the state")
	}
	var kinds []CommandType
	for _, c := range cmds {
		kinds = append(kinds, c.Type())
	}
	want := []CommandType{CmdUpdateNodeState, CmdPlaceBundles, CmdPlaceActor, CmdPlaceActor}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("commands %v, want %v", kinds, want)
	}
	bt, err := NewBatch(cmds...)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, bt)
	checkInvariants(t, s)

	if y := s.Actor("y"); y.State != ActorDead || y.DeathCause != "node a lost" || s.ActorByName("", "why") != nil {
		t.Fatalf("y: %v %q; its name must be released", y.State, y.DeathCause)
	}
	x := s.Actor("x")
	if x.State != ActorRestarting || x.Restarts != 1 || x.Node == "" || x.Node == "a" || len(x.GPUs) != 2 {
		t.Fatalf("x: %v restarts=%d on %q %v", x.State, x.Restarts, x.Node, x.GPUs)
	}
	g := s.Group("pg")
	nb := g.Bundles[onA]
	if g.State != GroupCreated || nb.Node != "e" {
		t.Fatalf("group %v, bundle %d on %q", g.State, onA, nb.Node)
	}
	seen := map[NodeID]bool{}
	for _, b := range g.Bundles {
		if seen[b.Node] {
			t.Fatalf("STRICT_SPREAD broken after rescheduling: two bundles on %s", b.Node)
		}
		seen[b.Node] = true
	}
	w := s.Actor("w")
	if w.Node != nb.Node || w.Bundle != onA || w.Restarts != 1 {
		t.Fatalf("w on %q bundle %d restarts %d, want %s bundle %d", w.Node, w.Bundle, w.Restarts, nb.Node, onA)
	}
	if z := s.Actor("z"); z.State != ActorAlive || z.Node != "b" {
		t.Fatalf("z disturbed: %v on %s", z.State, z.Node)
	}
	// The dead node holds nothing, and comes back entirely free.
	n := s.Node("a")
	if n.State != NodeDead || n.Free.GPUs != 8 || n.wholeFree() != 8 {
		t.Fatalf("dead node a: %v free %v", n.State, n.Free)
	}
	mustApply(t, s, &UpdateNodeState{Node: "a", State: NodeAlive, At: 11})
	if pl, err := p.Place(s, Request{Resources: Resources{GPUs: 8}}); err != nil || pl.Node != "a" {
		t.Fatalf("revived node: %v %v", pl, err)
	}
	// A stale report about x's first incarnation is refused.
	if err := s.Apply(&ActorDied{Actor: "x", Incarnation: 0, Cause: "late", At: 12}); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("stale ActorDied: %v", err)
	}
}

func TestPendingActorPlacedWhenRoomFrees(t *testing.T) {
	s := newStateWith(t, SimNode("a", 64, 1<<40, NVSwitchTopology(8, 12)))
	p := Planner{}
	big, err := p.CreateActor(s, ActorSpec{ID: "big", Request: Request{Resources: Resources{GPUs: 8}}}, 1)
	if err != nil || big.Placement == nil {
		t.Fatal(err)
	}
	mustApply(t, s, big)
	wait, err := p.CreateActor(s, ActorSpec{ID: "wait", Request: Request{Resources: Resources{GPUs: 4}}}, 2)
	if err != nil || wait.Placement != nil || !strings.Contains(wait.PendingReason, "no node has 4 free GPUs; best: a with 0") {
		t.Fatalf("want pending with reason, got %v %+v", err, wait)
	}
	mustApply(t, s, wait)
	if cmds, waiting := p.PlanPending(s, 3); len(cmds) != 0 || len(waiting) != 1 || waiting[0].Actor != "wait" {
		t.Fatalf("plan while full: %v %v", cmds, waiting)
	}
	mustApply(t, s, &KillActor{Actor: "big", At: 4})
	cmds, waiting := p.PlanPending(s, 5)
	if len(cmds) != 1 || len(waiting) != 0 {
		t.Fatalf("plan after release: %v %v", cmds, waiting)
	}
	mustApply(t, s, cmds...)
	if a := s.Actor("wait"); a.Node != "a" || !reflect.DeepEqual(GPUIndices(a.GPUs), []int{0, 1, 2, 3}) || a.PendingReason != "" {
		t.Fatalf("wait placed %q %v %q", a.Node, a.GPUs, a.PendingReason)
	}
}
