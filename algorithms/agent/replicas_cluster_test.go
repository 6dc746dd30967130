package agent

import (
	"context"
	"math"
	"testing"
	"time"

	"troupe/actors"
)

// TestReplicasOnCluster: on a two-node loopback cluster, two replicas of a
// policy run on different nodes, in different worker processes, and their
// collective group connects them through the network transport
// (runtime/collective); they train as the embedded cluster's one actor
// does, to float tolerance.
func TestReplicasOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster with worker processes")
	}
	ctx, rt := startTwoNodes(t, "agent-replicas", 3*time.Minute)
	// One GPU of each node taken: a packed group of two one-GPU bundles
	// no longer fits on one node, so the replicas land on both, in
	// different worker processes.
	for _, label := range []string{"node-a", "node-b"} {
		h, err := actors.Spawn[Policy](ctx, rt, TypeName, tinyConfig(), actors.GPUs(1), actors.Resources(map[string]float64{label: 0.5}))
		if err != nil {
			t.Fatal(err)
		}
		defer actors.Kill(context.Background(), h)
	}
	pc := tinyConfig()
	pc.MaxNewTokens, pc.MiniBatch = 2, 4
	tc := TeamConfig{Roles: []string{"planner", "tool"}, Policy: pc}
	one := runReplicatedTeam(t, initRT(t), tc, 1)
	tc.SpawnOptions = []actors.Option{actors.GPUs(1)}
	two := runReplicatedTeam(t, rt, tc, 2)
	a, b := two.where["shared"], two.where["shared-r1"]
	if a.Node == b.Node || two.pids["shared"] == two.pids["shared-r1"] || a.PlacementGroup == "" || a.PlacementGroup != b.PlacementGroup {
		t.Fatalf("replicas on nodes %s and %s, processes %d and %d, placement groups %q and %q: want two nodes' processes, one group",
			a.Node, b.Node, two.pids["shared"], two.pids["shared-r1"], a.PlacementGroup, b.PlacementGroup)
	}
	for i := range one.steps {
		if !closeStats(one.steps[i], two.steps[i]) {
			t.Fatalf("step %d: one actor %+v\n2 replicas on the cluster %+v", i, one.steps[i], two.steps[i])
		}
	}
	for name, w := range one.w {
		if v := two.w[name]; w.Steps != v.Steps || math.Abs(w.Norm-v.Norm) > 1e-4*w.Norm {
			t.Fatalf("%s: one actor %+v, 2 replicas on the cluster %+v", name, w, v)
		}
	}
}
