package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/policy"
	"troupe/gpu"
	"troupe/gpu/busy"
	"troupe/internal/testnet"
	"troupe/runtime/cluster"
	"troupe/runtime/gpuagent"
	"troupe/scheduler"
)

// gpuCluster is a head and a worker node in this process on loopback,
// each sampling its own simulated GPUs (head: pcie-4, worker: 2 GPUs),
// with actors placed on GPUs of both.
type gpuCluster struct {
	token          string
	head, worker   *cluster.Node
	headA, workerA *gpuagent.Agent
	planner        *agent.Policy // see train
}

const gpuClusterToken = "gpus-cluster-test-token"

func startGPUCluster(t *testing.T) *gpuCluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := testnet.Ports(t, "127.0.0.1", 6)
	c := &gpuCluster{token: gpuClusterToken}
	start := func(id string, role cluster.Role, port int, profile string, join []string) (*cluster.Node, *gpuagent.Agent) {
		gpus, topo, _, err := gpuagent.NodeGPUs("", profile)
		if err != nil {
			t.Fatal(err)
		}
		cfg := cluster.Config{NodeID: id, Role: role, DataDir: t.TempDir(), BindAddr: fmt.Sprintf("127.0.0.1:%d", port),
			GossipPort: port + 1, RaftPort: port + 2, Token: c.token, Timing: cluster.FastTiming(), Join: join,
			Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 8 << 30}, GPUs: gpus, Topology: topo,
			Labels: map[string]string{"troupe.gpus": "simulated"}, Logger: log}
		n, err := cluster.Start(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Shutdown() })
		// A long interval: the test takes the samples it checks itself.
		a, err := gpuagent.Start(ctx, gpuagent.Options{Node: id, Simulate: profile, Interval: time.Hour, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		n.ServeGPUs(a.Sampler(), a.Profile())
		return n, a
	}
	c.head, c.headA = start("head-1", cluster.RoleHead, p, "pcie-4", nil)
	c.worker, c.workerA = start("worker-1", cluster.RoleWorker, p+3, "2", []string{c.head.Addr()})

	client, err := cluster.NewClient(c.head.Addr(), c.token)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitUntil(t, "both nodes registered", func() bool {
		st, err := client.Status(ctx)
		return err == nil && len(st.Nodes) == 2
	})
	// Placement records (no launch: nothing runs them), pinned by affinity.
	specs := []scheduler.ActorSpec{
		{ID: "a-planner", Name: "planner", Class: "Policy", JobID: "job-7", Request: scheduler.Request{
			Resources: scheduler.Resources{GPUs: 1}, Affinity: &scheduler.Affinity{Node: "worker-1"}}},
		{ID: "a-critic", Name: "critic", Class: "Policy", JobID: "job-7", Request: scheduler.Request{
			Resources: scheduler.Resources{GPUs: 0.5}, Affinity: &scheduler.Affinity{Node: "head-1"}}},
	}
	res, err := client.CreateActors(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create: %v", r.Err)
		}
	}
	waitUntil(t, "actors placed", func() bool {
		st, err := client.Status(ctx)
		if err != nil {
			return false
		}
		placed := 0
		for _, a := range st.Actors {
			if len(a.GPUs) > 0 {
				placed++
			}
		}
		return placed == 2
	})
	return c
}

// work makes the actor on the worker's GPU 0 busy (its backend's busy time
// in this process's meter) and takes one sample on each node.
func (c *gpuCluster) work(t *testing.T) {
	busy.ProcessMeter().Counter(busy.Key{Node: "worker-1", GPU: 0, Actor: "planner"}).AddBusy(time.Hour)
	time.Sleep(150 * time.Millisecond) // at least one simulated utilization window
	c.headA.Sampler().SampleOnce()
	c.workerA.Sampler().SampleOnce()
}

// train runs real training steps of a policy actor placed, like the
// cluster's planner, on the worker's simulated GPU 0 (in this process, so
// its metered backend counts into the worker's sampler) for at least one
// utilization window, then takes one sample on each node. The dashboard's
// utilization for that GPU then comes from a policy's actual work.
func (c *gpuCluster) train(t *testing.T) {
	t.Helper()
	if c.planner == nil {
		ctx := actors.WithSelf(context.Background(), &actors.ActorInfo{ID: "a-planner", Name: "planner", Node: "worker-1", GPUs: []int{0}, SimulatedGPUs: true})
		p, err := agent.NewPolicy(ctx, agent.Config{Name: "planner", Model: policy.Config{Layers: 2, Heads: 4, Width: 64, Context: 64}, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if ws, _ := p.Weights(ctx, struct{}{}); !strings.HasPrefix(ws.Backend, "cpu metered as simulated GPU 0") {
			t.Fatalf("planner backend %q, want the CPU metered as simulated GPU 0", ws.Backend)
		}
		c.planner = p
	}
	req := agent.SFTRequest{Examples: []agent.Example{{Prompt: "p a01 g22", Answer: "R"}, {Prompt: "p a11 g22", Answer: "D"}}, Epochs: 1, BatchSize: 2}
	for start := time.Now(); time.Since(start) < 150*time.Millisecond; {
		if _, err := c.planner.SFT(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	c.headA.Sampler().SampleOnce()
	c.workerA.Sampler().SampleOnce()
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestGPUsClusterView(t *testing.T) {
	c := startGPUCluster(t)
	c.work(t)
	env := func(out *syncBuffer) gpusEnv {
		return gpusEnv{stdout: out, stderr: out, hostname: "cli", now: time.Now,
			getenv: func(k string) string {
				return map[string]string{"TROUPE_ADDRESS": c.worker.Addr(), "TROUPE_TOKEN": c.token}[k]
			}}
	}
	t.Setenv("TROUPE_TOKEN", c.token)

	// --once through the worker (it forwards to a server) via TROUPE_ADDRESS.
	var out syncBuffer
	if err := runGPUs(context.Background(), []string{"--once"}, env(&out)); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"2 node(s), 6 GPU(s), 1 busy", "via head-1", "SIMULATED GPUs on head-1 (pcie-4), worker-1 (2)",
		"NODE head-1 (" + c.head.Addr() + ") — 4 GPU(s), SIMULATED pcie-4", "NODE worker-1 (" + c.worker.Addr() + ") — 2 GPU(s)",
		"planner (job-7) using 100%", "critic (job-7) 50%", "[sim]"} {
		if !strings.Contains(s, want) {
			t.Errorf("cluster view lacks %q", want)
		}
	}
	if n := strings.Count(s, "[||||||||||||||||||||]  100%"); n != 1 {
		t.Errorf("%d GPUs at 100%%, want 1 (the planner's)", n)
	}
	if t.Failed() {
		t.Logf("output:\n%s", s)
	}

	// --json with --address.
	out = syncBuffer{}
	if err := runGPUs(context.Background(), []string{"--json", "--address", c.head.Addr()}, env(&out)); err != nil {
		t.Fatal(err)
	}
	var v cluster.ClusterGPUs
	if err := json.Unmarshal([]byte(out.String()), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if len(v.Nodes) != 2 || len(v.Nodes[0].Devices) != 4 || len(v.Nodes[1].Devices) != 2 || !v.Nodes[1].Simulated {
		t.Fatalf("JSON view: %+v", v.Nodes)
	}
	w := v.Nodes[1].Samples[0]
	if *w.SMUtil != 100 || len(w.Actors) != 1 || w.Actors[0].Actor != "planner" || w.Actors[0].Job != "job-7" {
		t.Errorf("worker GPU 0: %d%%, actors %+v", *w.SMUtil, w.Actors)
	}

	// Live: two frames redrawn in place, then Ctrl-C.
	out = syncBuffer{}
	tick := make(chan time.Time)
	e := env(&out)
	e.ticker = func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- runGPUs(ctx, []string{"--interval", "250ms"}, e) }()
	tick <- time.Now()
	tick <- time.Now() // the second frame is drawn once this is received
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Count(s, "\x1b[H\x1b[2J") < 2 || !strings.Contains(s, "NODE worker-1") ||
		!strings.Contains(s, "refreshing every 250ms") {
		t.Errorf("live cluster view:\n%s", s)
	}
}

func TestGPUsClusterErrors(t *testing.T) {
	var out bytes.Buffer
	env := loadedEnv(&out, &testClock{}, map[string]string{})
	t.Setenv("TROUPE_TOKEN", "")
	err := runGPUs(context.Background(), []string{"--once", "--address", "127.0.0.1:1"}, env)
	if err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("no token: err = %v", err)
	}
	err = runGPUs(context.Background(), []string{"--once", "--address", "127.0.0.1:1", "--token", "x"}, env)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("unreachable cluster: err = %v, want it named", err)
	}
	err = runGPUs(context.Background(), []string{"--once", "--address", "127.0.0.1:1", "--simulate-gpus", "pcie-4"}, env)
	if err == nil || !strings.Contains(err.Error(), "--simulate-gpus") {
		t.Errorf("--simulate-gpus with --address: err = %v", err)
	}
}

// TestGPUsClusterGolden renders a fixed cluster view: two simulated nodes
// with seeded load and actors, and one unreachable node.
func TestGPUsClusterGolden(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	view := &cluster.ClusterGPUs{ReportedBy: "head-1", Time: at.Add(time.Second)}
	for _, n := range []struct{ id, addr, profile string }{{"head-1", "10.0.0.1:7370", "2x4-nvlink"}, {"worker-1", "10.0.0.2:7370", "pcie-4"}} {
		clk := &testClock{t: at}
		var sink bytes.Buffer
		env := loadedEnv(&sink, clk, nil)
		inv, err := gpu.Open(gpu.Options{Simulate: n.profile, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		attr := gpu.NewAttribution()
		if err := env.prepare(inv, attr); err != nil {
			t.Fatal(err)
		}
		samples := gpu.NewSampler(inv, gpu.SamplerConfig{History: 1, Attribution: attr}).SampleOnce()
		view.Nodes = append(view.Nodes, cluster.NodeGPUs{Node: n.id, Address: n.addr, Profile: n.profile, Simulated: true,
			IntervalMillis: 1000, Devices: inv.Devices(), Samples: samples})
		inv.Close()
	}
	view.Nodes = append(view.Nodes, cluster.NodeGPUs{Node: "worker-2", Address: "10.0.0.3:7370",
		Error: "node worker-2 at 10.0.0.3:7370: context deadline exceeded"})
	golden(t, "cluster.txt", []byte(renderClusterGPUs(view)))
	var b bytes.Buffer
	if err := writeJSON(&b, jsonGPUView(view)); err != nil {
		t.Fatal(err)
	}
	golden(t, "cluster.json", b.Bytes())
	if strings.Contains(b.String(), "null") {
		t.Errorf("--json prints null for a node without GPUs:\n%s", b.String())
	}
}

// An explicit --simulate-gpus shows this machine even with TROUPE_ADDRESS
// set (a driver's environment); --address with it is a contradiction.
func TestGPUsSimulateBeatsEnvAddress(t *testing.T) {
	var out bytes.Buffer
	env := loadedEnv(&out, &testClock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}, map[string]string{"TROUPE_ADDRESS": "127.0.0.1:1"})
	if err := runGPUs(context.Background(), []string{"--once", "--simulate-gpus", "pcie-4"}, env); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SIMULATED GPUs (profile pcie-4)") {
		t.Errorf("not the local view:\n%s", out.String())
	}
}
