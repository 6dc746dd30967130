package scheduler

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestNamedActorsAndJobs(t *testing.T) {
	s := newStateWith(t, SimNode("a", 64, 1<<40, NVSwitchTopology(8, 12)))
	p := Planner{}
	mustApply(t, s, &SubmitJob{Spec: JobSpec{ID: "j1"}, At: 1})
	mk := func(id ActorID, name string, detached bool) error {
		c, err := p.CreateActor(s, ActorSpec{ID: id, Namespace: "ns", Name: name, JobID: "j1", Detached: detached, Request: Request{Resources: Resources{GPUs: 1}}}, 2)
		if err != nil {
			return err
		}
		return s.Apply(c)
	}
	if err := mk("a1", "planner", false); err != nil {
		t.Fatal(err)
	}
	if err := mk("a2", "planner", false); !errors.Is(err, ErrConflict) {
		t.Fatalf("duplicate name: %v", err)
	}
	if err := mk("a1", "other", false); !errors.Is(err, ErrConflict) {
		t.Fatalf("duplicate ID: %v", err)
	}
	if err := mk("keep", "keeper", true); err != nil {
		t.Fatal(err)
	}
	if got := s.ActorByName("ns", "planner"); got == nil || got.Spec.ID != "a1" {
		t.Fatalf("lookup: %+v", got)
	}
	if s.ActorByName("other-ns", "planner") != nil {
		t.Fatal("names leak across namespaces")
	}
	gc, err := p.CreateGroup(s, GroupSpec{ID: "g", JobID: "j1", Strategy: Pack, Bundles: gpuBundles(2, 1)}, 3)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, gc)
	if got := len(s.ActorsOn("a")); got != 2 {
		t.Fatalf("ActorsOn = %d, want 2", got)
	}
	mustApply(t, s, &JobFinished{Job: "j1", State: JobSucceeded, Message: "done", At: 9})
	if a := s.Actor("a1"); a.State != ActorDead || a.DeathCause != "job j1 finished" {
		t.Fatalf("job actor: %v %q", a.State, a.DeathCause)
	}
	if a := s.Actor("keep"); a.State == ActorDead {
		t.Fatal("detached actor died with its job")
	}
	if s.Group("g") != nil {
		t.Fatal("job's placement group survived the job")
	}
	if j := s.Job("j1"); j.State != JobSucceeded || j.FinishedAt != 9 {
		t.Fatalf("job %+v", j)
	}
	// The name is free again once its actor is dead.
	if err := mk("a3", "planner", false); err != nil {
		t.Fatalf("reuse name: %v", err)
	}
	if err := s.Apply(&JobFinished{Job: "j1", State: JobFailed, At: 10}); !errors.Is(err, ErrConflict) {
		t.Fatalf("finishing twice: %v", err)
	}
	checkInvariants(t, s)
}

func TestRestartBookkeeping(t *testing.T) {
	s := newStateWith(t, SimNode("a", 64, 1<<40, NVSwitchTopology(8, 12)))
	p := Planner{}
	c, err := p.CreateActor(s, ActorSpec{ID: "r", MaxRestarts: 2, Request: Request{Resources: Resources{GPUs: 2}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, c)
	for inc := 0; inc < 3; inc++ {
		a := s.Actor("r")
		if a.Node == "" {
			cmds, _ := p.PlanPending(s, int64(10*inc))
			mustApply(t, s, cmds...)
		}
		mustApply(t, s, &ActorStarted{Actor: "r", Incarnation: inc, At: int64(10*inc + 1)})
		mustApply(t, s, &ActorDied{Actor: "r", Incarnation: inc, Cause: "segfault", At: int64(10*inc + 2)})
	}
	a := s.Actor("r")
	if a.State != ActorDead || a.Restarts != 2 || a.DeathCause != "segfault" || a.Node != "" {
		t.Fatalf("after 3 deaths with MaxRestarts 2: %v restarts=%d %q on %q", a.State, a.Restarts, a.DeathCause, a.Node)
	}
	if n := s.Node("a"); n.Free.GPUs != 8 {
		t.Fatalf("GPUs not released: %v", n.Free)
	}
	if err := s.Apply(&KillActor{Actor: "r"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("kill dead actor: %v", err)
	}
}

func TestRegisterNodeRules(t *testing.T) {
	s := newStateWith(t, SimNode("a", 8, 1<<30, NVSwitchTopology(2, 1)))
	occupy(t, s, "a", 0)
	changed := SimNode("a", 16, 1<<30, NVSwitchTopology(2, 1))
	if err := s.Apply(&RegisterNode{Node: changed}); !errors.Is(err, ErrConflict) {
		t.Fatalf("re-register with other resources while busy: %v", err)
	}
	same := SimNode("a", 8, 1<<30, NVSwitchTopology(2, 1))
	same.Address = "10.0.0.9:7000"
	mustApply(t, s, &RegisterNode{Node: same})
	if n := s.Node("a"); n.Address != "10.0.0.9:7000" || n.GPUs[0].Free != 0 {
		t.Fatalf("refresh lost allocations or address: %+v", n)
	}
	bad := []NodeInfo{
		{},
		{ID: "x", GPUs: []GPUInfo{{Index: 1}, {Index: 0}}},
		{ID: "x", GPUs: []GPUInfo{{Index: 0}}, Topology: [][]int{{0, 1}}},
		{ID: "x", GPUs: []GPUInfo{{Index: 0}, {Index: 1}}, Topology: [][]int{{0, 1}, {2, 0}}},
		{ID: "x", Resources: Resources{MilliCPU: -1}},
		{ID: "x", Resources: Resources{Custom: CustomResources{"t": 0.00001}}},
	}
	for i, ni := range bad {
		if err := s.Apply(&RegisterNode{Node: ni}); !errors.Is(err, ErrInvalid) {
			t.Errorf("bad node %d: %v", i, err)
		}
	}
}

func TestDeadActorsArePrunedDeterministically(t *testing.T) {
	s := newStateWith(t, SimNode("a", 64, 1<<40, nil))
	var restored *State
	for i := 0; i < MaxDeadActors+50; i++ {
		spec := ActorSpec{ID: ActorID(fmt.Sprintf("a%06d", i)), Request: Request{Resources: Resources{MilliCPU: 1}}}
		cmds := []Command{&CreateActor{Spec: spec, Placement: &Placement{Node: "a", Bundle: AnyBundle}}, &KillActor{Actor: spec.ID}}
		mustApply(t, s, cmds...)
		if restored != nil {
			mustApply(t, restored, cmds...)
		}
		if i == MaxDeadActors-20 {
			restored = NewState()
			if err := restored.UnmarshalBinary(snapshotBytes(t, s)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := len(s.Actors()); n != MaxDeadActors {
		t.Fatalf("%d actors remembered, want %d", n, MaxDeadActors)
	}
	if s.Actor("a000049") != nil || s.Actor("a000050") == nil {
		t.Fatal("pruned the wrong actors: the oldest deaths go first")
	}
	if !bytes.Equal(snapshotBytes(t, s), snapshotBytes(t, restored)) {
		t.Fatal("a state restored mid-way prunes differently")
	}
}

func TestCloneIsDeepAndEqual(t *testing.T) {
	_, s := randomLog(t, 31, 300)
	before := snapshotBytes(t, s)
	c := s.Clone()
	if !bytes.Equal(before, snapshotBytes(t, c)) {
		t.Fatal("clone differs from the original")
	}
	// Wreck the clone: the original must not change.
	for _, n := range c.Nodes() {
		mustApply(t, c, &UpdateNodeState{Node: n.ID, State: NodeDead, At: 99})
	}
	for _, g := range c.Groups() {
		mustApply(t, c, &RemovePlacementGroup{Group: g.Spec.ID})
	}
	if !bytes.Equal(before, snapshotBytes(t, s)) {
		t.Fatal("changing the clone changed the original")
	}
	checkInvariants(t, s)
}
