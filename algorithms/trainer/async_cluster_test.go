package trainer

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/trainer/checkpoint"
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

// TestAsyncKillsOnCluster: on a three-node loopback cluster with the
// learners on the head and one rollout worker on each worker node (actors
// in worker processes, Recover on), kill -9 of the process hosting
// rollout worker 0 after step 2 does not stop the learner (the worker's
// actors restart and it goes on; its chunk is sampled again), and kill -9
// of the process hosting the learners after step 5 restores the last
// checkpoint and replays the steps since. Every step is recorded once, no
// optimiser step is lost or repeated, and the wall between consecutive
// steps around each kill (the stall) is logged.
func TestAsyncKillsOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster with worker processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const tok = "trainer-async-kills"
	head := startNode(t, "head", cluster.RoleHead, tok, nil, 0)
	startNode(t, "w1", cluster.RoleWorker, tok, []string{head.Addr()}, 0)
	startNode(t, "w2", cluster.RoleWorker, tok, []string{head.Addr()}, 0)
	rt := clusterDriver(t, ctx, tok, head.Addr(), 3)
	o := asyncResumeOptions(1)
	o.CkptEvery, o.Recover, o.Model.GPUsPerPolicy = 1, true, 0
	o.Async.LearnerNode, o.Async.WorkerNodes = "head", []string{"w1", "w2"}
	o.OutDir = filepath.Join(t.TempDir(), "run")
	tr, err := New(ctx, rt, o)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	a := tr.algo.(*asyncATGRPO)
	pid := func(h actors.Handle[agent.Policy]) int {
		p, err := actors.Call(ctx, h, (*agent.Policy).Pid, struct{}{}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := tr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	lpl, _ := tr.Team().Placements(ctx)
	wpl, _ := a.lanes[0].team.Placements(ctx)
	learner, worker := pid(tr.Team().Handles["tool"]), pid(a.lanes[0].team.Handles["tool"])
	if lpl["tool"].Node != "head" || wpl["tool"].Node != "w1" || learner == worker {
		t.Fatalf("learner on %s (pid %d), rollout worker 0 on %s (pid %d); want head and w1", lpl["tool"].Node, learner, wpl["tool"].Node, worker)
	}
	var killed sync.WaitGroup
	var kerr [2]error
	w := &crashWriter{at: 2, crash: func() {
		killed.Go(func() { kerr[0] = syscall.Kill(worker, syscall.SIGKILL) })
	}}
	w2 := &crashWriter{at: 5, crash: func() {
		killed.Go(func() { kerr[1] = syscall.Kill(learner, syscall.SIGKILL) })
	}}
	tr.o.Log = io.MultiWriter(w, w2)
	if _, err := tr.Run(ctx); err != nil {
		t.Fatalf("%v\n%s", err, w.buf.String())
	}
	killed.Wait()
	if kerr[0] != nil || kerr[1] != nil {
		t.Fatalf("kill -9: %v", kerr)
	}
	log := w.buf.String()
	if !strings.Contains(log, "rollout worker 0 restarted") && !strings.Contains(log, "rollout worker 0 lost") {
		t.Fatalf("rollout worker 0's loss not seen:\n%s", log)
	}
	if !strings.Contains(log, "recover: step ") {
		t.Fatalf("no recovery of the learner:\n%s", log)
	}
	var recs []map[string]any
	for _, m := range readMetricsRaw(t, o.OutDir) {
		if m["kind"] == "step" {
			recs = append(recs, m)
		}
	}
	var gaps []string
	for i := 1; i < len(recs); i++ {
		gaps = append(gaps, fmt.Sprintf("%.0f→%.0f %.2fs", recs[i-1]["step"], recs[i]["step"], recs[i]["elapsed_s"].(float64)-recs[i-1]["elapsed_s"].(float64)))
	}
	t.Logf("rollout worker 0's process (w1, pid %d) killed after step 2, the learners' (head, pid %d) after step 5; time between step records: %s", worker, learner, strings.Join(gaps, ", "))
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "recover:") || strings.HasPrefix(line, "rollout worker") {
			t.Log(line)
		}
	}
	kept, err := os.ReadFile(filepath.Join(o.OutDir, "checkpoints", checkpoint.Name(2), metricsFile))
	if err != nil {
		t.Fatal(err)
	}
	tr.Close(context.Background())
	checkAsyncResumed(t, o.OutDir, o.Steps, kept)
}
