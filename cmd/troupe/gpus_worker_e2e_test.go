package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/policy"
	"troupe/internal/testnet"
	"troupe/runtime"
	"troupe/runtime/cluster"
	"troupe/runtime/gpuagent"
	"troupe/runtime/worker"
	"troupe/scheduler"
)

// The GPU worker test runs this test binary as a driver (child process)
// that spawns a policy actor on a simulated GPU; the node (this process)
// runs the actor in a worker process started from the same binary, whose
// backend's busy time reaches the node through its ledger.

const gpuDriverEnv = "TROUPE_TEST_GPU_DRIVER"

func TestGPUsDriverHelperProcess(t *testing.T) {
	_, isWorker := os.LookupEnv(worker.EnvVar)
	if !isWorker && os.Getenv(gpuDriverEnv) == "" {
		t.Skip("helper process for TestGPUsFollowWorkerProcesses")
	}
	os.Exit(gpuDriver())
}

// gpuDriver spawns the policy on one GPU and keeps it sampling until
// killed (a worker process serves the actor in Init and exits there).
func gpuDriver() int {
	ctx := context.Background()
	rt, err := runtime.Init(ctx)
	if errors.Is(err, runtime.ErrWorkerDone) {
		return 0 // this process was a worker
	}
	if err != nil {
		fmt.Println("init:", err)
		return 10
	}
	h, err := actors.Spawn[agent.Policy](ctx, rt, agent.TypeName, agent.Config{Name: "shared",
		Model: policy.Config{Layers: 1, Heads: 2, Width: 32, Context: 64}, MaxNewTokens: 8}, actors.GPUs(1), actors.Name("gpu-planner"))
	if err != nil {
		fmt.Println("spawn:", err)
		return 11
	}
	fmt.Println("spawned")
	for k := int64(0); ; k++ {
		req := agent.SampleRequest{Prompts: []string{"p a01 g22", "t a00 g11"}, K: 8, Seed: k}
		if _, err := actors.Call(ctx, h, (*agent.Policy).Sample, req).Get(ctx); err != nil {
			fmt.Println("call:", err)
			return 12
		}
	}
}

// syncWriter collects a child's output.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string { w.mu.Lock(); defer w.mu.Unlock(); return w.b.String() }

// TestGPUsFollowWorkerProcesses: a policy actor working in a worker
// process makes its simulated GPU busy, attributed to it, with the memory
// its backend allocated, as the cluster GPU view shows.
func TestGPUsFollowWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process GPU test: skipped in -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const tok = "gpus-worker-test-token"
	p := testnet.Ports(t, "127.0.0.1", 3)
	gpus, topo, _, err := gpuagent.NodeGPUs("", "pcie-4")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := cluster.Start(ctx, cluster.Config{NodeID: "gpu-head", Role: cluster.RoleHead, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", p), GossipPort: p + 1, RaftPort: p + 2, Token: tok, Timing: cluster.FastTiming(),
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 8 << 30}, GPUs: gpus, Topology: topo, Logger: log,
		Labels: map[string]string{"troupe.gpus": "simulated"}}) // as troupe start --simulate-gpus labels it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Shutdown() })
	a, err := gpuagent.Start(ctx, gpuagent.Options{Node: n.ID(), Simulate: "pcie-4", Interval: 200 * time.Millisecond, Ledgers: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	n.ServeGPUs(a.Sampler(), a.Profile())

	driver := exec.Command(os.Args[0], "-test.run=^TestGPUsDriverHelperProcess$")
	driver.Env = append(os.Environ(), gpuDriverEnv+"=1", "TROUPE_ADDRESS="+n.Addr(), "TROUPE_TOKEN="+tok)
	var out syncWriter
	driver.Stdout, driver.Stderr = &out, &out
	if err := driver.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { driver.Wait(); close(exited) }()
	t.Cleanup(func() {
		driver.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("driver output:\n%s", out.String())
		}
	})

	client, err := cluster.NewClient(n.Addr(), tok)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	deadline := time.Now().Add(90 * time.Second)
	for {
		view, err := client.ClusterGPUs(ctx, false)
		if err == nil && len(view.Nodes) == 1 {
			for _, s := range view.Nodes[0].Samples {
				if len(s.Actors) == 1 && s.Actors[0].Actor == "gpu-planner" && s.SMUtil != nil && *s.SMUtil > 0 &&
					s.Actors[0].SMUtil != nil && *s.Actors[0].SMUtil > 0 && s.MemoryUsed != nil && *s.MemoryUsed > 0 {
					t.Logf("GPU %d: %d%% SM, %d bytes, %s using %d%% (worker pid %d)", s.Index, *s.SMUtil, *s.MemoryUsed,
						s.Actors[0].Actor, *s.Actors[0].SMUtil, s.Actors[0].PID)
					return
				}
			}
		}
		select {
		case <-exited:
			t.Fatalf("driver exited early")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy's GPU never showed its work: %v %+v", err, view)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
