package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"troupe/actors"
	"troupe/internal/testnet"
	"troupe/runtime"
	"troupe/runtime/cluster"
	"troupe/runtime/worker"
	"troupe/scheduler"
)

// TestMain turns the test binary into a worker process when a cluster node
// starts it as one (the multi-node test's actors run in workers).
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(worker.EnvVar); ok {
		if _, err := runtime.Init(context.Background()); !errors.Is(err, runtime.ErrWorkerDone) {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startNode starts one node of a loopback cluster with two simulated GPUs
// and the custom resource label (a per-node tag to place actors with).
func startNode(t testing.TB, id string, role cluster.Role, tok, label string, join []string) *cluster.Node {
	t.Helper()
	cfg := cluster.Config{NodeID: id, Role: role, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", testnet.Port(t, "127.0.0.1")), GossipPort: testnet.Port(t, "127.0.0.1"), RaftPort: testnet.Port(t, "127.0.0.1"),
		Token: tok, Join: join, Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), JoinTimeout: 20 * time.Second,
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 4 << 30, GPUs: 2, Custom: scheduler.CustomResources{label: 1}},
		GPUs:      []scheduler.GPUInfo{{Index: 0, UUID: id + "-gpu0", Model: "simulated"}, {Index: 1, UUID: id + "-gpu1", Model: "simulated"}},
		Labels:    map[string]string{"troupe.gpus": "simulated"},
	}
	n, err := cluster.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start node %s: %v", id, err)
	}
	t.Cleanup(func() { n.Shutdown() })
	return n
}

// TestPoliciesOnTwoNodes: on a two-node loopback cluster, the per-role
// policy actors are placed on different nodes (each role's spawn options
// ask for its node's resource and one GPU), their worker processes report
// the placement, and a JoyAgents-R1 step (update graph over both policy
// actors and the memory actor, environments in host actors) runs across
// the nodes.
func TestPoliciesOnTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-node cluster with worker processes")
	}
	ctx, rt := startTwoNodes(t, "agent-two-nodes", 2*time.Minute)
	pc := tinyConfig()
	pc.MaxNewTokens = 2
	team, err := SpawnTeam(ctx, rt, TeamConfig{Roles: []string{"planner", "tool"}, PerRole: true, Policy: pc,
		SpawnOptions: []actors.Option{actors.GPUs(1)},
		RoleOptions: map[string][]actors.Option{
			"planner": {actors.Resources(map[string]float64{"node-a": 0.5})},
			"tool":    {actors.Resources(map[string]float64{"node-b": 0.5})},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer team.Kill(context.Background())
	pl, err := team.Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pl["planner"].Node != "head" || pl["tool"].Node != "w1" || len(pl["planner"].GPUs) != 1 || len(pl["tool"].GPUs) != 1 {
		t.Fatalf("placements %+v", pl)
	}
	ja, err := SpawnJoyAgents(ctx, rt, team, JoyConfig{Config: joyConfig(), Env: "planpath", EnvConfig: joyEnv, EnvActors: 2,
		MemoryOptions: []actors.Option{actors.Resources(map[string]float64{"node-b": 0.5})}})
	if err != nil {
		t.Fatal(err)
	}
	defer ja.Kill(context.Background())
	w0, _ := team.Weights(ctx)
	st, err := ja.Trainer.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w1, _ := team.Weights(ctx)
	if st.Groups == 0 || len(st.Updates) == 0 {
		t.Fatalf("step %+v", st)
	}
	for name := range st.Updates {
		if w1[name].Steps != w0[name].Steps+1 {
			t.Fatalf("%s trained %d -> %d steps", name, w0[name].Steps, w1[name].Steps)
		}
	}
}

// startTwoNodes starts a head (node-a) and a worker node (node-b) with
// worker processes, connects a driver to the head and waits until both
// nodes are alive. The context ends after d; everything stops with the test.
func startTwoNodes(t *testing.T, tok string, d time.Duration) (context.Context, runtime.Runtime) {
	t.Helper()
	head := startNode(t, "head", cluster.RoleHead, tok, "node-a", nil)
	startNode(t, "w1", cluster.RoleWorker, tok, "node-b", []string{head.Addr()})
	t.Setenv("TROUPE_TOKEN", tok)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	rt, err := runtime.Init(ctx, runtime.Address(head.Addr()))
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
		if err == nil && alive == 2 {
			return ctx, rt
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never had two live nodes: %+v %v", st.Nodes, err)
		}
	}
}
