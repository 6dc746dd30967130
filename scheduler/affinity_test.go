package scheduler

import (
	"errors"
	"strings"
	"testing"
)

// TestHardAffinityDeadOrUnknownNode: hard affinity to a node that is not
// in the cluster or dead fails at once; to a suspect node it waits with a
// reason naming the node, and fails (KillActor from PlanPending, naming the
// node) once the node is declared dead; an actor placed with hard affinity
// whose node dies is not restarted elsewhere but fails the same way.
func TestHardAffinityDeadOrUnknownNode(t *testing.T) {
	topo := NVSwitchTopology(4, 12)
	s := newStateWith(t, SimNode("a", 8, 1<<36, topo), SimNode("b", 8, 1<<36, topo))
	p := Planner{}
	hard := func(id ActorID, node NodeID) ActorSpec {
		return ActorSpec{ID: id, MaxRestarts: -1, Request: Request{Resources: Resources{GPUs: 1}, Affinity: &Affinity{Node: node}}}
	}
	if _, err := p.CreateActor(s, hard("x", "nowhere"), 1); !errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), "node nowhere, which is not in the cluster") {
		t.Fatalf("unknown node: %v", err)
	}

	// Suspect: pending, naming the node.
	mustApply(t, s, &UpdateNodeState{Node: "b", State: NodeSuspect, At: 2})
	c, err := p.CreateActor(s, hard("waits", "b"), 3)
	if err != nil || c.Placement != nil || !strings.Contains(c.PendingReason, "hard affinity to node b, which is suspect") {
		t.Fatalf("suspect node: %v %+v", err, c)
	}
	mustApply(t, s, c)
	// Placed on a, which will die.
	c, err = p.CreateActor(s, hard("placed", "a"), 3)
	if err != nil || c.Placement == nil || c.Placement.Node != "a" {
		t.Fatalf("hard affinity to a: %v %+v", err, c)
	}
	mustApply(t, s, c)
	// A soft-affinity actor on a is re-placed on b (alive again by then).
	mustApply(t, s, &CreateActor{Spec: ActorSpec{ID: "soft", MaxRestarts: -1, Request: Request{Resources: Resources{GPUs: 1}, Affinity: &Affinity{Node: "a", Soft: true}}},
		Placement: &Placement{Node: "a", GPUs: []GPUAlloc{{Index: 1, Fraction: 1}}, Bundle: AnyBundle}, At: 3})

	// While b is only suspect, PlanPending keeps the actor waiting.
	cmds, waiting := p.PlanPending(s, 4)
	if len(cmds) != 0 || len(waiting) != 1 || waiting[0].Actor != "waits" || !errors.Is(waiting[0].Err, ErrPending) {
		t.Fatalf("PlanPending with b suspect: %+v %+v", cmds, waiting)
	}

	// b dies: the waiting actor fails, naming b.
	mustApply(t, s, &UpdateNodeState{Node: "b", State: NodeDead, At: 5})
	if _, err := p.CreateActor(s, hard("late", "b"), 5); !errors.Is(err, ErrInfeasible) || !strings.Contains(err.Error(), "node b, which is dead") {
		t.Fatalf("dead node: %v", err)
	}
	cmds, waiting = p.PlanPending(s, 6)
	if len(waiting) != 0 || len(cmds) != 1 {
		t.Fatalf("PlanPending after b died: %+v %+v", cmds, waiting)
	}
	mustApply(t, s, cmds...)
	if a := s.Actor("waits"); a.State != ActorDead || !strings.Contains(a.DeathCause, "hard affinity to node b, which is dead") {
		t.Fatalf("waiting actor after b died: %v %q", a.State, a.DeathCause)
	}

	// b comes back, a dies: the hard-affinity actor on a fails, the soft one moves to b.
	mustApply(t, s, &RegisterNode{Node: SimNode("b", 8, 1<<36, topo), At: 7})
	cmds, waiting, err = p.NodeDied(s, "a", "gossip: dead", 8)
	if err != nil || len(waiting) != 0 {
		t.Fatalf("node a died: %v %+v", err, waiting)
	}
	mustApply(t, s, cmds...)
	if a := s.Actor("placed"); a.State != ActorDead || !strings.Contains(a.DeathCause, "hard affinity to node a, which is dead") {
		t.Fatalf("hard-affinity actor after a died: %v %q", a.State, a.DeathCause)
	}
	if a := s.Actor("soft"); a.Node != "b" || a.State != ActorRestarting {
		t.Fatalf("soft-affinity actor after a died: %v on %q", a.State, a.Node)
	}
	checkInvariants(t, s)
}

// TestActorOfRemovedGroupFails: an actor waiting for a bundle fails when
// its group is removed (RemovePlacementGroup kills the group's actors).
func TestActorOfRemovedGroupFails(t *testing.T) {
	s := newStateWith(t, SimNode("a", 8, 1<<36, NVSwitchTopology(2, 12)))
	p := Planner{}
	gc, err := p.CreateGroup(s, GroupSpec{ID: "pg", Strategy: Pack, Bundles: []Resources{{GPUs: 1}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, gc)
	for _, id := range []ActorID{"in", "waits"} {
		c, err := p.CreateActor(s, ActorSpec{ID: id, Request: Request{Resources: Resources{GPUs: 1}, Group: "pg", Bundle: 0}}, 2)
		if err != nil {
			t.Fatal(err)
		}
		mustApply(t, s, c)
	}
	if a := s.Actor("waits"); a.Node != "" || !strings.Contains(a.PendingReason, "bundle 0 of placement group pg lacks") {
		t.Fatalf("second actor in a full bundle: %q on %q", a.PendingReason, a.Node)
	}
	mustApply(t, s, &RemovePlacementGroup{Group: "pg", At: 3})
	for _, id := range []ActorID{"in", "waits"} {
		if a := s.Actor(id); a.State != ActorDead || !strings.Contains(a.DeathCause, "placement group pg removed") {
			t.Fatalf("actor %s after removal: %v %q", id, a.State, a.DeathCause)
		}
	}
	if cmds, waiting := p.PlanPending(s, 4); len(cmds)+len(waiting) != 0 {
		t.Fatalf("nothing should wait: %+v %+v", cmds, waiting)
	}
}
