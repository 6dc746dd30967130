package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"
	"troupe/internal/testnet"

	"troupe/scheduler"
)

// freePort returns a TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	return testnet.Port(t, "127.0.0.1")
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() && os.Getenv("TROUPE_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(ioDiscard{}, nil))
}

type ioDiscard struct{}

func (ioDiscard) Write(p []byte) (int, error) { return len(p), nil }

// testConfig returns a config for an in-process node on fresh ports.
func testConfig(t testing.TB, id string, role Role, token string) Config {
	return Config{NodeID: id, Role: role, DataDir: t.TempDir(), BindAddr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		GossipPort: freePort(t), RaftPort: freePort(t), Token: token, Timing: FastTiming(), Logger: testLogger(t),
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 8 << 30}, JoinTimeout: 5 * time.Second}
}

func startNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	t.Cleanup(func() { n.Shutdown() })
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func nodeState(st *ClusterStatus, id string) string {
	for _, nd := range st.Nodes {
		if nd.ID == id {
			return nd.State
		}
	}
	return ""
}

// TestInProcessCluster: a head, two servers and a worker in one process:
// raft forms with three voters, every node registers, writes from a
// worker are forwarded to the leader, and placements commit.
func TestInProcessCluster(t *testing.T) {
	const tok = "in-process-token"
	head := startNode(t, testConfig(t, "head", RoleHead, tok))
	var servers []*Node
	for _, id := range []string{"s1", "s2"} {
		c := testConfig(t, id, RoleServer, tok)
		c.Join = []string{head.Addr()}
		servers = append(servers, startNode(t, c))
	}
	wc := testConfig(t, "w1", RoleWorker, tok)
	wc.Join = []string{servers[0].Addr()}
	wc.Resources.Custom = map[string]float64{"tpu": 2}
	worker := startNode(t, wc)

	waitFor(t, "3 voters and 4 alive nodes", 10*time.Second, func() bool {
		st := head.Status()
		alive := 0
		for _, nd := range st.Nodes {
			if nd.State == "alive" {
				alive++
			}
		}
		return len(st.Servers) == 3 && alive == 4
	})
	cl, err := NewClient(worker.Addr(), tok)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	res, err := cl.CreateActors(ctx, []scheduler.ActorSpec{
		{ID: "a1", Name: "tpu-user", Class: "T", Request: scheduler.Request{Resources: scheduler.Resources{Custom: map[string]float64{"tpu": 1}}}},
		{ID: "a2", Class: "T", Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 1000}}},
		{ID: "a3", Class: "T", Request: scheduler.Request{Resources: scheduler.Resources{GPUs: 1}}},
	})
	if err != nil {
		t.Fatalf("create actors via worker: %v", err)
	}
	if res[0].Placement == nil || res[0].Placement.Node != "w1" {
		t.Errorf("tpu actor placed at %+v, want w1", res[0].Placement)
	}
	if res[1].Placement == nil || res[1].Err != nil {
		t.Errorf("cpu actor: %+v", res[1])
	}
	if !errors.Is(res[2].Err.AsError(), scheduler.ErrInfeasible) {
		t.Errorf("gpu actor on a GPU-less cluster: %+v, want infeasible", res[2].Err)
	}
	av, err := cl.GetActor(ctx, "", "tpu-user")
	if err != nil || av.Node != "w1" {
		t.Fatalf("get named actor: %+v %v", av, err)
	}
	// Every server converges on the same state.
	for _, s := range append(servers, head) {
		waitFor(t, "replication to "+s.ID(), 5*time.Second, func() bool { return len(s.Status().Actors) == 2 })
	}
	// Stop the worker: draining, then drained (not dead: it left on purpose)
	// once it left gossip.
	if _, err := NewClientMust(t, worker.Addr(), tok).Stop(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	worker.Shutdown()
	waitFor(t, "worker drained after leaving", 5*time.Second, func() bool { return nodeState(head.Status(), "w1") == NodeDrained })
	st := head.Status()
	for _, a := range st.Actors {
		if a.ID == "a1" && a.State != "DEAD" && a.State != "RESTARTING" && a.State != "PENDING" {
			t.Errorf("actor on the stopped worker is %s", a.State)
		}
	}
}

func NewClientMust(t testing.TB, addr, tok string) *Client {
	c, err := NewClient(addr, tok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestNoLeaderBoundedRetry: with its quorum gone, a server retries a write
// for ApplyTimeout and then fails with ErrNoLeader (never sooner), while
// Status keeps answering from its own state.
func TestNoLeaderBoundedRetry(t *testing.T) {
	const tok = "t"
	head := startNode(t, testConfig(t, "head", RoleHead, tok))
	c := testConfig(t, "s1", RoleServer, tok)
	c.Join = []string{head.Addr()}
	c.ApplyTimeout = 700 * time.Millisecond
	s1 := startNode(t, c)
	waitFor(t, "two voters, both registered", 10*time.Second, func() bool {
		st := s1.Status()
		return len(st.Servers) == 2 && st.Leader != "" && len(st.Nodes) == 2
	})
	head.Shutdown() // s1 alone is not a quorum of two
	waitFor(t, "s1 to lose the leader", 5*time.Second, func() bool { return s1.Status().Leader == "" })
	start := time.Now()
	_, err := s1.applyCommand(context.Background(), &scheduler.UpdateNodeState{Node: "s1", State: scheduler.NodeDraining, At: 1})
	took := time.Since(start)
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("write without quorum: %v, want ErrNoLeader", err)
	}
	if took < c.ApplyTimeout {
		t.Errorf("ErrNoLeader after %v, before the %v retry bound", took, c.ApplyTimeout)
	}
	if st := s1.Status(); len(st.Nodes) != 2 {
		t.Errorf("status without a leader: %+v", st)
	}
}

// TestCreateActorsIdempotent: resending a create whose first attempt
// committed (as a retry after a lost reply does) reports the committed
// placement instead of failing on the taken ID; a different spec under the
// same ID is still refused.
func TestCreateActorsIdempotent(t *testing.T) {
	head := startNode(t, testConfig(t, "head", RoleHead, "t"))
	waitFor(t, "head registered", 10*time.Second, func() bool { return len(head.Status().Nodes) == 1 })
	ctx := context.Background()
	spec := scheduler.ActorSpec{ID: "x", Class: "C", Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 500, Custom: nil}}}
	first, err := head.CreateActors(ctx, []scheduler.ActorSpec{spec})
	if err != nil || first[0].Err != nil || first[0].Placement == nil {
		t.Fatalf("first: %+v %v", first, err)
	}
	again, err := head.CreateActors(ctx, []scheduler.ActorSpec{spec})
	if err != nil || again[0].Err != nil || again[0].Placement == nil || again[0].Placement.Node != first[0].Placement.Node {
		t.Fatalf("retry: %+v %v", again, err)
	}
	other := spec
	other.Class = "D"
	res, err := head.CreateActors(ctx, []scheduler.ActorSpec{other})
	if err != nil || !errors.Is(res[0].Err.AsError(), scheduler.ErrConflict) {
		t.Fatalf("different spec, same ID: %+v %v", res, err)
	}
	st := head.Status()
	if len(st.Actors) != 1 || st.Nodes[0].Used.MilliCPU != 500 {
		t.Fatalf("after retry: %d actors, %d milli-CPU used", len(st.Actors), st.Nodes[0].Used.MilliCPU)
	}
}

// TestStartPortErrors: a taken port is reported as the port the user
// chose, with the flag that picks another; an unreachable join address
// fails after JoinTimeout naming the address.
func TestStartPortErrors(t *testing.T) {
	const tok = "ports"
	head := startNode(t, testConfig(t, "head", RoleHead, tok))
	// Another server on the head's gRPC port (its raft port is taken too):
	// the gRPC port is the one named.
	c := testConfig(t, "s2", RoleHead, tok)
	c.BindAddr = head.Addr()
	_, err := Start(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "gRPC port: "+head.Addr()+" is already in use") || !strings.Contains(err.Error(), "--bind") {
		t.Errorf("second node on the head's gRPC port: %v", err)
	}
	// A raft port taken by something else.
	c = testConfig(t, "s3", RoleHead, tok)
	l, lerr := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.RaftPort))
	if lerr != nil {
		t.Fatal(lerr)
	}
	defer l.Close()
	if _, err := Start(context.Background(), c); err == nil || !strings.Contains(err.Error(), "raft port") || !strings.Contains(err.Error(), "--raft-port") {
		t.Errorf("raft port taken: %v", err)
	}
	// Nobody at the join address.
	c = testConfig(t, "w", RoleWorker, tok)
	c.Join = []string{fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	c.JoinTimeout = 700 * time.Millisecond
	begin := time.Now()
	_, err = Start(context.Background(), c)
	if !errors.Is(err, ErrJoin) || !strings.Contains(err.Error(), c.Join[0]) || !strings.Contains(err.Error(), "700ms") {
		t.Errorf("unreachable join address: %v", err)
	}
	if took := time.Since(begin); took < c.JoinTimeout || took > 10*time.Second {
		t.Errorf("gave up after %v with a %v join timeout", took, c.JoinTimeout)
	}
}
