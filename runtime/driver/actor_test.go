package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime/cluster"
	rcollective "troupe/runtime/collective"
	"troupe/runtime/worker"
	"troupe/scheduler"
)

// rcounter is the actor the remote tests run in worker processes (this
// test binary, started by the node in worker mode).
type rcounter struct{ n int }

type rcounterCfg struct{ Start int }

func (c *rcounter) Add(ctx context.Context, d int) (int, error) { c.n += d; return c.n, nil }

// Exe is the worker's executable: the uploaded, content-addressed copy.
func (c *rcounter) Exe(ctx context.Context, _ int) (string, error) { return os.Executable() }

func (c *rcounter) Pid(ctx context.Context, _ int) (int, error) { return os.Getpid(), nil }

// Sleep blocks until its context ends or ms pass: a call in flight.
func (c *rcounter) Sleep(ctx context.Context, ms int) (int, error) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(ms) * time.Millisecond):
	}
	return ms, nil
}

// sleepArg asks SleepSignal to sleep Ms, first telling the test it began
// by connecting to the Unix socket at Signal.
type sleepArg struct {
	Ms     int
	Signal string
}

// SleepSignal is Sleep that signals its start, so a test knows the call is
// in flight in the worker process without sleeping to guess. A retry of
// the call finds the test no longer listening and just sleeps.
func (c *rcounter) SleepSignal(ctx context.Context, a sleepArg) (int, error) {
	signalStarted(a.Signal)
	return c.Sleep(ctx, a.Ms)
}

// callInFlight calls SleepSignal(ms) on h and returns once the actor has
// begun it: the started-signal for tests that kill a worker or a node
// with a call in flight.
func callInFlight(t *testing.T, ctx context.Context, h actors.Handle[rcounter], ms int) *actors.Future[int] {
	t.Helper()
	path, wait := startedSignal(t, ctx)
	f := actors.Call(ctx, h, (*rcounter).SleepSignal, sleepArg{Ms: ms, Signal: path})
	wait(1)
	return f
}

// startedSignal listens on a fresh Unix socket for actors (in worker
// processes) to say they began a call; wait(n) returns once n did, and
// stops listening.
func startedSignal(t *testing.T, ctx context.Context) (path string, wait func(n int)) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "started")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if dl, ok := ctx.Deadline(); ok {
		ln.(*net.UnixListener).SetDeadline(dl)
	}
	return path, func(n int) {
		t.Helper()
		defer ln.Close()
		for i := 0; i < n; i++ {
			conn, err := ln.Accept()
			if err != nil {
				t.Fatalf("%d of %d actors began the call in flight: %v", i, n, err)
			}
			conn.Close()
		}
	}
}

// signalStarted tells the test listening at path (startedSignal) that a
// call began; a retry of the call finds nobody listening, which is fine.
func signalStarted(path string) {
	if conn, err := net.Dial("unix", path); err == nil {
		conn.Close()
	}
}

// Boom crashes the actor (like its process dying).
func (c *rcounter) Boom(ctx context.Context, _ int) (int, error) { panic(actors.Crash("boom")) }

func (c *rcounter) Whoami(ctx context.Context, _ int) (actors.ActorInfo, error) {
	info, _ := actors.Self(ctx)
	return info, nil
}

func init() {
	actors.MustRegister("RCounter", func(ctx context.Context, c rcounterCfg) (*rcounter, error) {
		if c.Start < 0 {
			return nil, fmt.Errorf("negative start %d", c.Start)
		}
		return &rcounter{n: c.Start}, nil
	})
}

// TestMain turns the test binary into a worker when a node starts it as
// one: it serves the registered types, as runtime.Init does in a worker.
func TestMain(m *testing.M) {
	if env, ok := os.LookupEnv(worker.EnvVar); ok {
		if err := worker.ServeProcess(context.Background(), env, os.Getenv(worker.HostEnvVar), worker.Options{NoCollectiveUnix: os.Getenv(rcollective.UnixEnv) == "0"}); err != nil {
			fmt.Fprintf(os.Stderr, "troupe worker: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(nodeProcEnv); spec != "" {
		os.Exit(runNodeProc(spec))
	}
	os.Exit(m.Run())
}

// connect is what runtime.Init does with an address: the driver of a
// cluster, with the token from TROUPE_TOKEN (each test sets it).
func connect(ctx context.Context, addr string) (*Driver, error) {
	return Connect(ctx, Config{Address: addr, Token: os.Getenv("TROUPE_TOKEN")})
}

// nodeProcEnv makes the test binary a worker node process:
// "id,bind,gossipPort,token,join". nodeDirEnv names its data directory,
// inside the test's own temporary directory, so a node killed with -9
// leaves nothing behind.
const (
	nodeProcEnv = "TROUPE_RUNTIME_TEST_NODE"
	nodeDirEnv  = "TROUPE_RUNTIME_TEST_NODE_DIR"
)

// nodeProcCmd is the command that runs this test binary as a worker node
// (runNodeProc) with the given spec.
func nodeProcCmd(t testing.TB, spec string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeProcEnv+"="+spec, nodeDirEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	return cmd
}

// runNodeProc runs a worker node with the "special" resource until killed.
func runNodeProc(spec string) int {
	f := strings.Split(spec, ",")
	if len(f) != 5 {
		fmt.Fprintln(os.Stderr, "bad node spec", spec)
		return 2
	}
	gossip, err := strconv.Atoi(f[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad gossip port", f[2])
		return 2
	}
	dir := os.Getenv(nodeDirEnv)
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "troupe-node-"); err != nil {
			return 2
		}
		defer os.RemoveAll(dir)
	}
	n, err := cluster.Start(context.Background(), cluster.Config{NodeID: f[0], Role: cluster.RoleWorker, DataDir: dir, BindAddr: f[1], GossipPort: gossip,
		Token: f[3], Join: []string{f[4]}, Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(discard{}, nil)),
		Resources: scheduler.Resources{MilliCPU: 2000, MemoryBytes: 1 << 30, Custom: scheduler.CustomResources{"special": 1}}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "node start:", err)
		return 3
	}
	<-n.StopRequested()
	n.Shutdown()
	return 0
}

func startHead(t *testing.T, tok string) *cluster.Node { return startHeadB(t, tok) }

func startHeadB(t testing.TB, tok string) *cluster.Node {
	t.Helper()
	n, err := cluster.Start(context.Background(), cluster.Config{NodeID: "head", Role: cluster.RoleHead, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), RaftPort: freeTCPPort(t), Token: tok,
		Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(discard{}, nil)),
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// connectDriver connects a driver with token tok to the cluster at addr
// and waits for its k live nodes. Its context ends after timeout. The
// caller defers done, which shuts the driver down.
func connectDriver(t *testing.T, tok, addr string, k int, timeout time.Duration) (ctx context.Context, rt *Driver, done func()) {
	t.Helper()
	t.Setenv("TROUPE_TOKEN", tok)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	rt, err := connect(ctx, addr)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done = func() {
		rt.Shutdown(context.Background())
		cancel()
	}
	waitNodes(t, rt, k)
	return ctx, rt, done
}

// waitNodes waits until the cluster has k live registered nodes.
func waitNodes(t *testing.T, rt *Driver, k int) { waitNodesB(t, rt, k) }

func waitNodesB(t testing.TB, rt *Driver, k int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := rt.Status(context.Background())
		live := 0
		for _, nd := range st.Nodes {
			if nd.State == "alive" {
				live++
			}
		}
		if err == nil && live >= k {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never had %d live nodes: %+v %v", k, st.Nodes, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestRemoteActors: a driver spawns an actor on a cluster; the node runs it
// in a worker process (this binary re-executed), calls go straight to it,
// a second driver finds it by name; kill -9 of the worker fails the call in
// flight with ErrActorRestarted and the actor is restarted in a new worker;
// once restarts are exhausted every caller gets an *ActorDiedError naming
// the signal and the node. No worker process survives the node's shutdown.
func TestRemoteActors(t *testing.T) {
	const tok = "remote-actors-token"
	n := startHead(t, tok)
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, 50*time.Second)
	defer done()

	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: 10}, actors.Name("ctr"), actors.MaxRestarts(1), actors.CPUs(1))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := actors.Call(ctx, h, (*rcounter).Add, 5).Get(ctx); err != nil || v != 15 {
		t.Fatalf("Add = %v, %v; want 15", v, err)
	}
	pid1, err := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
	if err != nil || pid1 == os.Getpid() || !alive(pid1) {
		t.Fatalf("worker pid = %d (driver %d), %v", pid1, os.Getpid(), err)
	}
	if exe, err := actors.Call(ctx, h, (*rcounter).Exe, 0).Get(ctx); err != nil || !strings.Contains(exe, "/binaries/") {
		t.Errorf("worker executable = %q, %v; want the uploaded copy in the node's binaries dir", exe, err)
	}
	info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || info.Node != "head" || info.Name != "ctr" || info.Restarts != 0 {
		t.Errorf("Self in the worker = %+v, %v", info, err)
	}

	// A second driver finds the named actor and calls the same instance.
	rt2, err := connect(ctx, n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Shutdown(ctx)
	h2, err := actors.GetActor[rcounter](ctx, rt2, "ctr")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := actors.Call(ctx, h2, (*rcounter).Add, 1).Get(ctx); err != nil || v != 16 {
		t.Fatalf("second driver's Add = %v, %v; want 16", v, err)
	}
	st, err := rt.Status(ctx)
	if err != nil || len(st.Actors) != 1 || st.Actors[0].State != "ALIVE" || st.Actors[0].Node != "head" {
		t.Errorf("status = %+v, %v", st.Actors, err)
	}

	// kill -9 with a call in flight: it fails saying the actor restarted.
	inflight := callInFlight(t, ctx, h, 30000)
	if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := inflight.Get(ctx); !errors.Is(err, actors.ErrActorRestarted) {
		t.Fatalf("in-flight call across kill -9: %v, want ErrActorRestarted", err)
	}
	// Later calls reach the new incarnation (constructor re-run).
	if v, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); err != nil || v != 11 {
		t.Fatalf("Add after restart = %v, %v; want 11", v, err)
	}
	pid2, err := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
	if err != nil || pid2 == pid1 {
		t.Fatalf("restarted worker pid = %d (old %d), %v", pid2, pid1, err)
	}
	if v, err := actors.Call(ctx, h2, (*rcounter).Add, 1).Get(ctx); err != nil && !errors.Is(err, actors.ErrActorRestarted) || err == nil && v != 12 {
		t.Errorf("second driver after restart: %v, %v", v, err)
	}

	// Restarts exhausted: the in-flight call and later ones die.
	inflight = callInFlight(t, ctx, h, 30000)
	if err := syscall.Kill(pid2, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var de *actors.ActorDiedError
	if _, err := inflight.Get(ctx); !errors.As(err, &de) || !strings.Contains(de.Cause, "signal 9") || !strings.Contains(de.Error(), "head") {
		t.Fatalf("in-flight call after the last kill: %v, want ActorDiedError naming signal 9 and node head", err)
	}
	if _, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); !errors.As(err, &de) {
		t.Errorf("call on the dead actor: %v, want ActorDiedError", err)
	}
	if _, err := actors.GetActor[rcounter](ctx, rt2, "ctr"); !errors.Is(err, actors.ErrNotFound) {
		t.Errorf("dead named actor: %v, want ErrNotFound", err)
	}

	// A failing constructor fails the spawn with its message.
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: -1}); !errors.As(err, &de) || !strings.Contains(err.Error(), "negative start") {
		t.Errorf("failing constructor: %v", err)
	}
	// Kill through the control plane.
	h3, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: 1})
	if err != nil {
		t.Fatal(err)
	}
	pid3, err := actors.Call(ctx, h3, (*rcounter).Pid, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := actors.Kill(ctx, h3); err != nil {
		t.Fatal(err)
	}
	if _, err := actors.Call(ctx, h3, (*rcounter).Add, 1).Get(ctx); !errors.As(err, &de) {
		t.Errorf("call after Kill: %v, want ActorDiedError", err)
	}

	// The driver's shutdown finishes its job: its actors die and the idle
	// worker process exits.
	h4, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: 1})
	if err != nil {
		t.Fatal(err)
	}
	pid4, err := actors.Call(ctx, h4, (*rcounter).Pid, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = rt2.Status(ctx)
	found := false
	for _, a := range st.Actors {
		if a.ID == h4.Ref().ID() {
			found = true
			if a.State != "DEAD" || !strings.Contains(a.Death, "finished") {
				t.Errorf("actor of the finished job: %+v", a)
			}
		}
	}
	if !found {
		t.Errorf("actor of the finished job missing from status (%v)", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid4) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(pid4) {
		t.Errorf("worker %d of the finished job still running", pid4)
	}
	rt2.Shutdown(ctx)
	n.Shutdown()
	for _, pid := range []int{pid1, pid2, pid3} {
		deadline := time.Now().Add(5 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("worker process %d outlived its node", pid)
		}
	}
}

// TestRemoteActorNodeLost: an actor placed on a worker node (found through
// the NodeActors forwarding path, the node holds no raft state) is
// re-placed on another node when its node goes away, and the call in
// flight fails saying the actor restarted.
func TestRemoteActorNodeLost(t *testing.T) {
	const tok = "node-lost-token"
	head := startHead(t, tok)
	defer head.Shutdown()
	startWorker := func(id string) *cluster.Node {
		w, err := cluster.Start(context.Background(), cluster.Config{NodeID: id, Role: cluster.RoleWorker, DataDir: t.TempDir(),
			BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), Token: tok, Join: []string{head.Addr()},
			Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(discard{}, nil)),
			Resources: scheduler.Resources{MilliCPU: 2000, MemoryBytes: 1 << 30, Custom: scheduler.CustomResources{"special": 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w1, w2 := startWorker("w1"), startWorker("w2")
	defer w1.Shutdown()
	defer w2.Shutdown()
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 3, 50*time.Second)
	defer done()
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: 1}, actors.Resources(map[string]float64{"special": 1}), actors.MaxRestarts(2))
	if err != nil {
		t.Fatal(err)
	}
	info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || (info.Node != "w1" && info.Node != "w2") {
		t.Fatalf("placed on %q, %v; want a node with the special resource", info.Node, err)
	}
	lost, other := w1, "w2"
	if info.Node == "w2" {
		lost, other = w2, "w1"
	}
	inflight := callInFlight(t, ctx, h, 30000)
	lost.Shutdown()
	if _, err := inflight.Get(ctx); !errors.Is(err, actors.ErrActorRestarted) {
		t.Fatalf("in-flight call when its node went away: %v, want ErrActorRestarted", err)
	}
	info, err = actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || info.Node != other || info.Restarts != 1 {
		t.Fatalf("after losing the node: %+v, %v; want restart 1 on %s", info, err, other)
	}
}

// TestRemoteTaskRetries: with MaxTaskRetries a call lost to a kill -9 of
// the worker is sent again to the restarted actor and succeeds.
func TestRemoteTaskRetries(t *testing.T) {
	const tok = "retries-token"
	n := startHead(t, tok)
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, 50*time.Second)
	defer done()
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.MaxRestarts(2), actors.MaxTaskRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inflight := callInFlight(t, ctx, h, 200)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if v, err := inflight.Get(ctx); err != nil || v != 200 {
		t.Fatalf("retried call = %v, %v; want 200", v, err)
	}
	if info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx); err != nil || info.Restarts != 1 {
		t.Errorf("after the retry: %+v, %v; want restart 1", info, err)
	}
}

// TestRemoteActorCrash: actors.Crash in a remote actor is a death the
// cluster restarts (in the same worker process) within MaxRestarts; the
// crashing call fails with ErrActorRestarted, then with ActorDiedError.
func TestRemoteActorCrash(t *testing.T) {
	const tok = "crash-token"
	n := startHead(t, tok)
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, 50*time.Second)
	defer done()
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: 5}, actors.MaxRestarts(1))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
	if _, err := actors.Call(ctx, h, (*rcounter).Boom, 0).Get(ctx); !errors.Is(err, actors.ErrActorRestarted) {
		t.Fatalf("crash: %v, want ErrActorRestarted", err)
	}
	info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || info.Restarts != 1 {
		t.Fatalf("after crash: %+v, %v", info, err)
	}
	if p2, _ := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx); p2 != pid {
		t.Errorf("restart moved to process %d from %d; the worker process should be reused", p2, pid)
	}
	var de *actors.ActorDiedError
	if _, err := actors.Call(ctx, h, (*rcounter).Boom, 0).Get(ctx); !errors.As(err, &de) || !strings.Contains(de.Cause, "boom") {
		t.Fatalf("second crash: %v, want ActorDiedError with the cause", err)
	}
}

// TestRemoteActorNodeKilled: kill -9 of a whole node process (a separate
// process whose worker process hosts the actor) with a call in flight: the
// call fails saying the actor restarted, the actor is re-placed on the
// other node, and once restarts are exhausted callers get an
// *ActorDiedError saying the node was lost. The killed node's worker
// process exits by itself.
func TestRemoteActorNodeKilled(t *testing.T) {
	const tok = "node-killed-token"
	head := startHead(t, tok)
	defer head.Shutdown()
	startNodeProc := func(id string) *exec.Cmd {
		cmd := nodeProcCmd(t, fmt.Sprintf("%s,127.0.0.1:%d,%d,%s,%s", id, freeTCPPort(t), freeTCPPort(t), tok, head.Addr()))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	procs := map[string]*exec.Cmd{"p1": startNodeProc("p1"), "p2": startNodeProc("p2")}
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 3, 50*time.Second)
	defer done()
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.Resources(map[string]float64{"special": 1}), actors.MaxRestarts(1))
	if err != nil {
		t.Fatal(err)
	}
	info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || procs[info.Node] == nil {
		t.Fatalf("placed on %q, %v", info.Node, err)
	}
	wpid, _ := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
	inflight := callInFlight(t, ctx, h, 30000)
	procs[info.Node].Process.Kill()
	if _, err := inflight.Get(ctx); !errors.Is(err, actors.ErrActorRestarted) {
		t.Fatalf("in-flight call when its node was killed: %v, want ErrActorRestarted", err)
	}
	info2, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || info2.Node == info.Node || procs[info2.Node] == nil || info2.Restarts != 1 {
		t.Fatalf("after the node kill: %+v, %v; want restart 1 on the other node", info2, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(wpid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(wpid) {
		t.Errorf("worker %d of the killed node still running", wpid)
	}
	// The last node with the resource goes too: no restarts left.
	inflight = callInFlight(t, ctx, h, 30000)
	procs[info2.Node].Process.Kill()
	var de *actors.ActorDiedError
	if _, err := inflight.Get(ctx); !errors.As(err, &de) || !strings.Contains(de.Error(), info2.Node) {
		t.Fatalf("after the second node kill: %v, want ActorDiedError naming node %s", err, info2.Node)
	}
	t.Logf("death: %v", de)
}

// TestRemoteKillsAtRandom: four callers keep calling while the actor's
// worker is killed -9 three times at (seeded) random moments: every call
// ends, each either succeeding or failing with ErrActorRestarted, and the
// actor serves again after each restart.
func TestRemoteKillsAtRandom(t *testing.T) {
	const tok = "random-kills-token"
	n := startHead(t, tok)
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, 50*time.Second)
	defer done()
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.MaxRestarts(5))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 2))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, restarted atomic.Int64
	errs := make(chan error, 4)
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := actors.Call(ctx, h, (*rcounter).Sleep, 1).Get(ctx)
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, actors.ErrActorRestarted):
					restarted.Add(1)
				default:
					errs <- err
					return
				}
			}
		}()
	}
	for k := 0; k < 3; k++ {
		time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
		pid, err := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
		if errors.Is(err, actors.ErrActorRestarted) { // sent just before the last restart was noticed
			pid, err = actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
		}
		if err != nil {
			t.Fatalf("kill %d: pid: %v", k, err)
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("call failed with an unexpected error: %v", err)
	}
	info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || info.Restarts != 3 {
		t.Errorf("after 3 kills: %+v, %v; want 3 restarts", info, err)
	}
	t.Logf("%d calls succeeded, %d failed as restarted", ok.Load(), restarted.Load())
	if ok.Load() == 0 || restarted.Load() == 0 {
		t.Errorf("want both successes and restarted calls, got %d and %d", ok.Load(), restarted.Load())
	}
}

// TestRemoteSpawnWaits: a spawn that does not fit yet waits; when its
// context ends it fails and the waiting actor is removed, not left behind.
func TestRemoteSpawnWaits(t *testing.T) {
	const tok = "spawn-waits-token"
	n := startHead(t, tok)
	defer n.Shutdown()
	t.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := connect(ctx, n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	waitNodes(t, rt, 1)
	big, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.CPUs(3))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := actors.Spawn[rcounter](sctx, rt, "RCounter", rcounterCfg{}, actors.CPUs(2)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("spawn that cannot fit yet: %v, want it to wait until its deadline", err)
	}
	st, err := rt.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Actors {
		if a.ID != big.ID() && a.State != "DEAD" {
			t.Errorf("abandoned spawn left behind: %+v", a)
		}
	}
}
