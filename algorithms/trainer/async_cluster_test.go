package trainer

import (
	"context"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime/cluster"
)

// TestRolloutWorkerLostOnCluster: on a two-node loopback cluster (actors in
// worker processes), one rollout worker's actor is killed after step 2; the
// learner trains on through the last step with every environment, and the
// step walls around the kill (the stall) are logged.
func TestRolloutWorkerLostOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster with worker processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const tok = "trainer-rollout-lost"
	head := startNode(t, "head", cluster.RoleHead, tok, nil, 0)
	startNode(t, "w1", cluster.RoleWorker, tok, []string{head.Addr()}, 0)
	rt := clusterDriver(t, ctx, tok, head.Addr(), 2)
	o := asyncOptions(2, 1)
	o.Steps, o.Model.GPUsPerPolicy = 6, 0
	tr, err := New(ctx, rt, o)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	var walls []float64
	for s := 1; s <= o.Steps; s++ {
		if s == 3 {
			a := tr.algo.(*asyncATGRPO)
			pl, _ := a.lanes[0].team.Placements(ctx)
			if err := actors.Kill(ctx, a.lanes[0].team.Handles["planner"]); err != nil {
				t.Fatal(err)
			}
			t.Logf("killed rollout worker 0's planner (node %s) before step 3", pl["planner"].Node)
		}
		r, err := tr.Step(ctx, s)
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		checkStep(t, r, 1)
		walls = append(walls, r.StepWall)
	}
	a := tr.algo.(*asyncATGRPO)
	a.mu.Lock()
	alive := a.alive
	a.mu.Unlock()
	if alive != 1 {
		t.Fatalf("%d rollout workers alive after the kill, want 1", alive)
	}
	t.Logf("step walls (s), the kill before step 3: %.3f", walls)
}
