package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"troupe/internal/testnet"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/scheduler"
)

// Multi-process tests: the test binary re-executes itself in node mode
// (nodeEnv holds the node's spec), one process per node on its own
// loopback address 127.0.0.x, so kill -9 is a real crash.

const nodeEnv = "TROUPE_CLUSTER_TEST_NODE"

// profileEnv, when set to a directory, makes every node process write a CPU
// profile there (<node ID>.cpu, stopped at a clean exit, then <node ID>.heap) so the server side
// of a benchmark can be profiled: the test binary's own -cpuprofile only
// sees the clients.
const profileEnv = "TROUPE_CLUSTER_TEST_CPUPROFILE"

// procSpec is what a node process runs.
type procSpec struct {
	ID     string   `json:"id"`
	Role   Role     `json:"role"`
	Dir    string   `json:"dir"`
	Bind   string   `json:"bind"`
	Gossip int      `json:"gossip"`
	Raft   int      `json:"raft"`
	Join   []string `json:"join"`
	Expect int      `json:"expect"`
	Token  string   `json:"token"`
	LAN    bool     `json:"lan,omitempty"` // LANTiming() (the default of troupe start) instead of FastTiming()
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeEnv); spec != "" {
		os.Exit(runNodeProcess(spec))
	}
	os.Exit(m.Run())
}

// runNodeProcess is main() of a node process.
func runNodeProcess(specJSON string) int {
	var ps procSpec
	if err := json.Unmarshal([]byte(specJSON), &ps); err != nil {
		fmt.Fprintln(os.Stderr, "bad node spec:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	stopProfile := func() {}
	if dir := os.Getenv(profileEnv); dir != "" {
		f, err := os.Create(filepath.Join(dir, ps.ID+".cpu"))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			var once sync.Once
			stopProfile = func() {
				once.Do(func() {
					pprof.StopCPUProfile()
					f.Close()
					if h, err := os.Create(filepath.Join(dir, ps.ID+".heap")); err == nil { // the live heap at the end
						runtime.GC()
						pprof.WriteHeapProfile(h)
						h.Close()
					}
				})
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	timing := FastTiming()
	if ps.LAN {
		timing = LANTiming()
	}
	n, err := Start(ctx, Config{NodeID: ps.ID, Role: ps.Role, DataDir: ps.Dir, BindAddr: ps.Bind, GossipPort: ps.Gossip, RaftPort: ps.Raft,
		Join: ps.Join, BootstrapExpect: ps.Expect, Token: ps.Token, Timing: timing, Logger: log, JoinTimeout: 10 * time.Second,
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 4 << 30}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start failed:", err)
		return 3
	}
	select {
	case <-ctx.Done():
		stopProfile() // before draining: kill waits only briefly
		n.Drain(context.Background(), "signal")
	case <-n.StopRequested():
	}
	stopProfile()
	n.Shutdown()
	return 0
}

// proc is a running node process.
type proc struct {
	spec procSpec
	cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
	err  error
}

func (p *proc) addr() string { return p.spec.Bind }

type lockedBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// spawn starts a node process; t.Cleanup kills it.
func spawn(t testing.TB, ps procSpec) *proc {
	t.Helper()
	b, _ := json.Marshal(ps)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test binary
	p := &proc{spec: ps, cmd: cmd, log: new(bytes.Buffer), mu: new(sync.Mutex), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = lockedBuf{p.mu, p.log}, lockedBuf{p.mu, p.log}
	if dir := os.Getenv(profileEnv); dir != "" { // keep the whole log beside the profile
		if f, err := os.Create(filepath.Join(dir, ps.ID+".log")); err == nil {
			t.Cleanup(func() { f.Close() })
			cmd.Stderr = io.MultiWriter(cmd.Stderr, f)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("---- log of %s ----\n%s", ps.ID, lastLines(p.log.String(), 40))
			p.mu.Unlock()
		}
	})
	return p
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	if os.Getenv(profileEnv) != "" { // let it write its profile first
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(5 * time.Second):
		}
	}
	p.cmd.Process.Kill()
	<-p.done
}

// loopPort returns a port free on ip.
func loopPort(t testing.TB, ip string) int {
	t.Helper()
	return testnet.Port(t, ip)
}

func newSpec(t testing.TB, id, ip string, role Role, token string, dir string) procSpec {
	if dir == "" {
		dir = filepath.Join(t.TempDir(), id)
	}
	return procSpec{ID: id, Role: role, Dir: dir, Bind: fmt.Sprintf("%s:%d", ip, loopPort(t, ip)), Gossip: loopPort(t, ip), Raft: loopPort(t, ip), Token: token}
}

// statusFrom asks one node.
func statusFrom(addr, token string) (*ClusterStatus, error) {
	c, err := NewClient(addr, token)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Status(ctx)
}

func multiAddr(ps ...*proc) string {
	var a []string
	for _, p := range ps {
		a = append(a, p.addr())
	}
	return strings.Join(a, ",")
}

// TestMultiProcessCluster runs the fault scenarios of the cluster issue on
// one cluster of real processes: three servers formed with
// --bootstrap-expect plus a worker; kill the worker; kill the leader;
// restart a server from its data dir; intruders with a wrong token.
func TestMultiProcessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster: skipped in -short")
	}
	const tok = "multi-process-token"
	var servers []*proc
	var specs []procSpec
	for i := 0; i < 3; i++ {
		s := newSpec(t, fmt.Sprintf("srv%d", i+1), fmt.Sprintf("127.0.0.%d", 11+i), RoleServer, tok, "")
		s.Expect = 3
		if i > 0 {
			s.Join = []string{specs[0].Bind}
		}
		specs = append(specs, s)
		servers = append(servers, spawn(t, s))
	}
	ws := newSpec(t, "wrk1", "127.0.0.21", RoleWorker, tok, "")
	ws.Join = []string{specs[1].Bind}
	worker := spawn(t, ws)
	all := multiAddr(servers...)
	client, err := NewClient(all, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	var st *ClusterStatus
	waitFor(t, "3 voters, a leader and 4 alive nodes", 20*time.Second, func() bool {
		st, err = statusFrom(all, tok)
		if err != nil || st.Leader == "" || len(st.Servers) != 3 {
			return false
		}
		alive := 0
		for _, n := range st.Nodes {
			if n.State == "alive" {
				alive++
			}
		}
		return alive == 4
	})

	// Committed state to keep through the faults.
	var specsA []scheduler.ActorSpec
	for i := 0; i < 20; i++ {
		specsA = append(specsA, scheduler.ActorSpec{ID: scheduler.ActorID(fmt.Sprintf("a%02d", i)), Name: fmt.Sprintf("n%02d", i), Class: "C",
			Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 100}, Affinity: &scheduler.Affinity{Node: "srv1", Soft: true}}})
	}
	specsA[0].Request.Affinity = &scheduler.Affinity{Node: "wrk1"} // lives on the worker
	specsA[0].MaxRestarts = 1
	res, err := client.CreateActors(ctx, specsA)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Placement == nil {
			t.Fatalf("actor %d: %+v", i, r)
		}
	}
	if res[0].Placement.Node != "wrk1" {
		t.Fatalf("a00 placed on %s, want wrk1", res[0].Placement.Node)
	}

	t.Run("kill worker", func(t *testing.T) {
		start := time.Now()
		worker.kill()
		// Bound: generous for -race on a loaded 2-core machine (memberlist
		// stretches its probes when the local node is slow); typical:
		// detection (< 1.2 s) then suspect for suspectGrace (400 ms).
		waitFor(t, "worker marked dead", 25*time.Second, func() bool {
			st, err := statusFrom(all, tok)
			return err == nil && nodeState(st, "wrk1") == "dead"
		})
		t.Logf("worker marked dead %v after kill -9 (memberlist probe %v, suspicion mult %d)", time.Since(start).Round(time.Millisecond), FastTiming().ProbeInterval, FastTiming().SuspicionMult)
		st, _ := statusFrom(all, tok)
		for _, a := range st.Actors {
			if a.ID == "a00" && (a.Node == "wrk1" || a.Restarts != 1) {
				t.Errorf("actor of the dead worker: %+v, want restarted off wrk1", a)
			}
		}
	})

	var leaderIdx int
	t.Run("kill leader", func(t *testing.T) {
		st, err := statusFrom(all, tok)
		if err != nil {
			t.Fatal(err)
		}
		old := st.Leader
		for i, s := range servers {
			if s.spec.ID == old {
				leaderIdx = i
			}
		}
		var survivors []*proc
		for i, s := range servers {
			if i != leaderIdx {
				survivors = append(survivors, s)
			}
		}
		surv := multiAddr(survivors...)
		before := st.AppliedIndex
		// The leader has saved its peers (for the restart below).
		waitFor(t, "the leader's peers file", 5*time.Second, func() bool {
			b, _ := os.ReadFile(filepath.Join(servers[leaderIdx].spec.Dir, peersFile))
			return strings.Count(string(b), "\n") >= 2
		})
		start := time.Now()
		servers[leaderIdx].kill()
		var newLeader string
		var elected time.Duration
		polls := 0
		for time.Since(start) < 5*time.Second {
			st, err := statusFrom(surv, tok)
			if err != nil {
				t.Fatalf("status failed during failover: %v", err) // status must work throughout
			}
			polls++
			if st.Leader != "" && st.Leader != old {
				newLeader, elected = st.Leader, time.Since(start)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if newLeader == "" {
			t.Fatal("no new leader within 5 s")
		}
		t.Logf("new leader %s elected %v after kill -9 of %s (%d status polls, all answered)", newLeader, elected.Round(time.Millisecond), old, polls)
		if elected > 2*time.Second {
			t.Errorf("new leader after %v, want ≤ 2 s", elected)
		}
		// A write commits through the survivors, and nothing committed was lost.
		sc, _ := NewClient(surv, tok)
		defer sc.Close()
		r, err := sc.CreateActors(ctx, []scheduler.ActorSpec{{ID: "after-failover", Class: "C"}})
		if err != nil {
			t.Fatalf("write after failover: %v", err)
		}
		if r[0].Err != nil || r[0].Index <= before {
			t.Errorf("write after failover: %+v (index before the kill %d)", r[0], before)
		}
		st, err = statusFrom(surv, tok)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, a := range st.Actors {
			have[a.ID] = true
		}
		for _, s := range specsA {
			if !have[string(s.ID)] {
				t.Errorf("committed actor %s lost in failover", s.ID)
			}
		}
	})

	parent := t
	t.Run("restart server with its data dir", func(t *testing.T) {
		sp := servers[leaderIdx].spec
		sp.Join = nil          // no --join: it finds the cluster through the peers saved in its data dir
		p := spawn(parent, sp) // same ID, data dir and ports; lives until the end of the whole test
		servers[leaderIdx] = p
		var want uint64
		sawCatchingUp := false
		waitFor(t, "the restarted server to catch up", 15*time.Second, func() bool {
			cl, err := statusFrom(all, tok)
			if err != nil || cl.Leader == "" {
				return false
			}
			want = cl.AppliedIndex
			own, err := statusFrom(p.addr(), tok)
			// Honest status: while it trails what the leader had applied
			// before this poll, it says it is catching up.
			if err == nil && own.ReportedBy == sp.ID && own.AppliedIndex < want && !own.CatchingUp {
				t.Errorf("restarted server reports applied index %d (leader had %d) without saying it is catching up", own.AppliedIndex, want)
			}
			if err == nil && own.CatchingUp {
				sawCatchingUp = true
			}
			return err == nil && own.ReportedBy == sp.ID && !own.CatchingUp && own.AppliedIndex >= want && len(own.Actors) == len(specsA)+1 &&
				nodeState(own, sp.ID) == "alive" && own.GossipAlive == 3 // rejoined gossip: the three servers
		})
		t.Logf("restarted server said it was catching up before it had: %v", sawCatchingUp)
		own, _ := statusFrom(p.addr(), tok)
		if len(own.Servers) != 3 {
			t.Errorf("restarted server sees %d raft servers, want 3", len(own.Servers))
		}
	})

	t.Run("wrong token", func(t *testing.T) {
		// gRPC: refused.
		_, err := statusFrom(servers[0].addr(), "not-the-token")
		if status.Code(errors.Unwrap(err)) != codes.Unauthenticated && !strings.Contains(fmt.Sprint(err), "Unauthenticated") {
			t.Errorf("status with wrong token: %v", err)
		}
		// Join: the node process fails to start.
		bad := newSpec(t, "intruder", "127.0.0.31", RoleWorker, "not-the-token", "")
		bad.Join = []string{servers[0].addr()}
		p := spawn(t, bad)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Fatal("node with a wrong token still running")
		}
		p.mu.Lock()
		out := p.log.String()
		p.mu.Unlock()
		if p.err == nil || !strings.Contains(out, "invalid cluster token") {
			t.Errorf("intruder exit %v, log:\n%s", p.err, lastLines(out, 5))
		}
		// Gossip: a memberlist with another key cannot join.
		c := memberlist.DefaultLANConfig()
		c.Name, c.BindAddr, c.BindPort, c.AdvertisePort = "intruder-gossip", "127.0.0.32", loopPort(t, "127.0.0.32"), 0
		c.SecretKey = gossipKey("not-the-token")
		c.LogOutput = ioDiscard{}
		ml, err := memberlist.Create(c)
		if err != nil {
			t.Fatal(err)
		}
		defer ml.Shutdown()
		if n, err := ml.Join([]string{fmt.Sprintf("127.0.0.11:%d", specs[0].Gossip)}); err == nil || n != 0 {
			t.Errorf("gossip join with a wrong key: %d joined, err %v", n, err)
		}
		// Raft: the handshake fails.
		sl := &authStreamLayer{key: raftKey("not-the-token")}
		if conn, err := sl.Dial(rAddr(specs[1]), time.Second); err == nil {
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, rerr := conn.Read(make([]byte, 1)); rerr == nil {
				t.Error("raft connection with a wrong token stayed open and answered")
			}
			conn.Close()
		}
		// The cluster did not register any intruder.
		st, err := statusFrom(all, tok)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range st.Nodes {
			if strings.HasPrefix(n.ID, "intruder") {
				t.Errorf("intruder registered: %+v", n)
			}
		}
	})
}

func rAddr(s procSpec) raft.ServerAddress {
	return raft.ServerAddress(fmt.Sprintf("%s:%d", hostOf(s.Bind), s.Raft))
}
