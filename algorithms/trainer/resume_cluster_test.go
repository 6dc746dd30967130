package trainer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/internal/testnet"
	"troupe/runtime"
	"troupe/runtime/cluster"
	"troupe/scheduler"
)

// startNode starts one node of a loopback cluster; its actors run in
// worker processes of the test binary (TestMain).
// gpus > 0 gives it that many simulated GPUs.
func startNode(t *testing.T, id string, role cluster.Role, tok string, join []string, gpus int) *cluster.Node {
	t.Helper()
	cfg := cluster.Config{NodeID: id, Role: role, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", testnet.Port(t, "127.0.0.1")), GossipPort: testnet.Port(t, "127.0.0.1"), RaftPort: testnet.Port(t, "127.0.0.1"),
		Token: tok, Join: join, Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), JoinTimeout: 20 * time.Second,
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 4 << 30, GPUs: float64(gpus)},
	}
	for i := range gpus {
		cfg.GPUs = append(cfg.GPUs, scheduler.GPUInfo{Index: i, UUID: fmt.Sprintf("%s-gpu%d", id, i), Model: "simulated"})
		cfg.Labels = map[string]string{"troupe.gpus": "simulated"}
	}
	n, err := cluster.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start node %s: %v", id, err)
	}
	t.Cleanup(func() { n.Shutdown() })
	return n
}

// TestRecoverLearnerOnCluster: on a two-node loopback cluster, the worker
// process hosting a policy actor (a learner) is SIGKILLed mid-run; the
// cluster restarts the actor in a new worker process, and the run restores
// its last checkpoint, replays the steps since and ends with the metrics
// (less timing) and final policies of a run that lost nothing.
func TestRecoverLearnerOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster with worker processes")
	}
	o := resumeOptions("atgrpo")
	o.CkptEvery, o.Recover, o.Model.GPUsPerPolicy = 2, true, 0
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	ref := o
	ref.OutDir = filepath.Join(t.TempDir(), "ref")
	c := startChild(t, ref) // the same run on an embedded cluster
	c.wait(t)

	const tok = "trainer-recover"
	head := startNode(t, "head", cluster.RoleHead, tok, nil, 0)
	startNode(t, "w1", cluster.RoleWorker, tok, []string{head.Addr()}, 0)
	rt := clusterDriver(t, ctx, tok, head.Addr(), 2)

	run := o
	run.OutDir = filepath.Join(t.TempDir(), "run")
	tr, err := New(ctx, rt, run)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	h := tr.Team().Handles["tool"]
	pid, err := actors.Call(ctx, h, (*agent.Policy).Pid, struct{}{}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := tr.Team().Placements(ctx)
	var killed sync.WaitGroup
	var killErr error
	w := &crashWriter{at: 2, crash: func() {
		killed.Go(func() { killErr = syscall.Kill(pid, syscall.SIGKILL) })
	}}
	tr.o.Log = w
	t0 := time.Now()
	if _, err := tr.Run(ctx); err != nil {
		t.Fatalf("%v\n%s", err, w.buf.String())
	}
	killed.Wait()
	if killErr != nil {
		t.Fatalf("kill the worker %d of policy tool on node %s: %v", pid, pl["tool"].Node, killErr)
	}
	log := w.buf.String()
	if !strings.Contains(log, "restored step 2 from") {
		t.Fatalf("no recovery from step 2 logged:\n%s", log)
	}
	after, err := tr.Team().Placements(ctx)
	if err != nil || after["tool"].Restarts != 1 {
		t.Fatalf("the tool policy's restarts after its worker was killed: %+v %v", after["tool"], err)
	}
	pid2, _ := actors.Call(ctx, h, (*agent.Policy).Pid, struct{}{}).Get(ctx)
	if pid2 == pid {
		t.Fatalf("the tool policy still runs in the killed process %d", pid)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "recover:") {
			t.Logf("worker %d (policy tool, node %s) killed after step 2; %s; run %.1fs", pid, pl["tool"].Node, line, time.Since(t0).Seconds())
		}
	}
	tr.Close(context.Background())
	sameRun(t, ref.OutDir, run.OutDir, []string{"planner", "tool"})
}

// clusterDriver connects a driver to the cluster at addr and waits until
// it has n live nodes.
func clusterDriver(t *testing.T, ctx context.Context, tok, addr string, n int) runtime.Runtime {
	t.Helper()
	t.Setenv("TROUPE_TOKEN", tok)
	rt, err := runtime.Init(ctx, runtime.Address(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := rt.Status(ctx)
		alive := 0
		for _, nd := range st.Nodes {
			if nd.State == "alive" {
				alive++
			}
		}
		if err == nil && alive == n {
			return rt
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never had %d live nodes: %+v %v", n, st.Nodes, err)
		}
	}
}

// TestRecoverLearnerNodeLost: on a three-node loopback cluster whose two
// worker nodes have (simulated) GPUs, the policy actors (the learners) are
// placed on the workers; the node hosting the tool policy shuts down
// mid-run, the cluster restarts its actors on the other worker, and the
// run (Recover) restores its last checkpoint, replays the steps since and
// ends as the same run on an embedded cluster that lost nothing.
func TestRecoverLearnerNodeLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster with worker processes")
	}
	o := resumeOptions("atgrpo")
	o.CkptEvery, o.Recover, o.Model.GPUsPerPolicy = 2, true, 1
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ref := o
	ref.OutDir, ref.Model.GPUsPerPolicy = filepath.Join(t.TempDir(), "ref"), 0
	c := startChild(t, ref)
	c.wait(t)

	const tok = "trainer-node-lost"
	head := startNode(t, "head", cluster.RoleHead, tok, nil, 0)
	nodes := map[string]*cluster.Node{
		"w1": startNode(t, "w1", cluster.RoleWorker, tok, []string{head.Addr()}, 2),
		"w2": startNode(t, "w2", cluster.RoleWorker, tok, []string{head.Addr()}, 2),
	}
	rt := clusterDriver(t, ctx, tok, head.Addr(), 3)
	run := o
	run.OutDir = filepath.Join(t.TempDir(), "run")
	tr, err := New(ctx, rt, run)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	pl, err := tr.Team().Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := nodes[pl["tool"].Node]
	if lost == nil {
		t.Fatalf("the tool policy is on node %q, not a worker", pl["tool"].Node)
	}
	var shut sync.WaitGroup
	w := &crashWriter{at: 2, crash: func() { shut.Go(func() { lost.Shutdown() }) }}
	tr.o.Log = w
	t0 := time.Now()
	if _, err := tr.Run(ctx); err != nil {
		t.Fatalf("%v\n%s", err, w.buf.String())
	}
	shut.Wait()
	log := w.buf.String()
	if !strings.Contains(log, "restored step 2 from") {
		t.Fatalf("no recovery from step 2 logged:\n%s", log)
	}
	after, err := tr.Team().Placements(ctx)
	if err != nil || after["tool"].Restarts < 1 || after["tool"].Node == pl["tool"].Node {
		t.Fatalf("the tool policy after node %s was lost: %+v %v", pl["tool"].Node, after["tool"], err)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.HasPrefix(line, "recover:") {
			t.Logf("node %s (policy tool; planner on %s) shut down after step 2; %s; now on %s; run %.1fs", pl["tool"].Node, pl["planner"].Node, line, after["tool"].Node, time.Since(t0).Seconds())
		}
	}
	tr.Close(context.Background())
	sameRun(t, ref.OutDir, run.OutDir, []string{"planner", "tool"})
}

// TestResumeAfterKillOnCluster: the exact-resume test with the driver on a
// two-node loopback cluster (the policy actors in the nodes' worker
// processes): the driver is SIGKILLed after a checkpoint, its job ends and
// its actors go; a new driver resumes and ends as an uninterrupted run.
func TestResumeAfterKillOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster, worker processes and drivers")
	}
	o := resumeOptions("atgrpo")
	o.Model.GPUsPerPolicy = 0
	ref := o
	ref.OutDir = filepath.Join(t.TempDir(), "ref")
	c := startChild(t, ref)
	c.wait(t)

	const tok = "trainer-driver-kill"
	head := startNode(t, "head", cluster.RoleHead, tok, nil, 0)
	startNode(t, "w1", cluster.RoleWorker, tok, []string{head.Addr()}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	clusterDriver(t, ctx, tok, head.Addr(), 2)
	env := []string{"TROUPE_ADDRESS=" + head.Addr(), "TROUPE_TOKEN=" + tok}
	run := o
	run.OutDir = filepath.Join(t.TempDir(), "run")
	startChild(t, run, env...).killAfter(t, 4)
	// The killed driver's job, and its actors, live until its lease runs
	// out; the new driver waits for their names (when it starts sooner).
	res := run
	res.Resume = run.OutDir
	c = startChild(t, res, env...)
	c.wait(t)
	if !strings.Contains(c.output(), "resume: from ") {
		t.Fatalf("no resume:\n%s", c.output())
	}
	for _, line := range strings.Split(c.output(), "\n") {
		if strings.HasPrefix(line, "resume:") {
			t.Logf("driver on a cluster killed after step 4; %s", line)
		}
	}
	sameRun(t, ref.OutDir, run.OutDir, []string{"planner", "tool"})
}
