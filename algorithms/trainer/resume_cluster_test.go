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
func startNode(t *testing.T, id string, role cluster.Role, tok string, join []string) *cluster.Node {
	t.Helper()
	cfg := cluster.Config{NodeID: id, Role: role, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", testnet.Port(t, "127.0.0.1")), GossipPort: testnet.Port(t, "127.0.0.1"), RaftPort: testnet.Port(t, "127.0.0.1"),
		Token: tok, Join: join, Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), JoinTimeout: 20 * time.Second,
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 4 << 30},
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
	head := startNode(t, "head", cluster.RoleHead, tok, nil)
	startNode(t, "w1", cluster.RoleWorker, tok, []string{head.Addr()})
	t.Setenv("TROUPE_TOKEN", tok)
	rt, err := runtime.Init(ctx, runtime.Address(head.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := rt.Status(ctx)
		alive := 0
		for _, nd := range st.Nodes {
			if nd.State == "alive" {
				alive++
			}
		}
		if err == nil && alive == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never had two live nodes: %+v %v", st.Nodes, err)
		}
	}

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
