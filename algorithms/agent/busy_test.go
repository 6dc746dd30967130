package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"troupe/actors"
	"troupe/gpu/busy"
	"troupe/gpu/compute/cuda"
)

// A policy actor placed on a simulated GPU counts its backend's busy time
// and memory for that GPU (what drives a simulated GPU's utilization); one
// without a GPU counts nothing.
func TestPolicyOnGPUCountsBusyTime(t *testing.T) {
	ctx := actors.WithSelf(context.Background(), &actors.ActorInfo{ID: "a1", Name: "planner", Node: "busy-test-node", GPUs: []int{3}, SimulatedGPUs: true})
	p, err := NewPolicy(ctx, tinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sample(ctx, SampleRequest{Prompts: []string{"p a01 g22"}, K: 2, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	var rec *busy.Record
	for _, r := range busy.ProcessMeter().Snapshot() {
		if r.Node == "busy-test-node" {
			rec = &r
		}
	}
	if rec == nil || rec.GPU != 3 || rec.Actor != "planner" || rec.BusyNanos <= 0 || rec.MemoryBytes <= 0 {
		t.Fatalf("busy record %+v, want GPU 3 of planner with busy time and memory", rec)
	}
	cpuOnly := actors.WithSelf(context.Background(), &actors.ActorInfo{ID: "a2", Name: "cpu-only", Node: "busy-test-node-2"})
	if _, err := NewPolicy(cpuOnly, tinyConfig()); err != nil {
		t.Fatal(err)
	}
	for _, r := range busy.ProcessMeter().Snapshot() {
		if r.Node == "busy-test-node-2" {
			t.Errorf("actor without a GPU counted: %+v", r)
		}
	}
}

// A policy actor placed on a real GPU that it cannot use (here: no NVIDIA
// driver) fails its construction naming the GPU; it does not train on the
// CPU instead.
func TestPolicyOnUnusableGPUFails(t *testing.T) {
	t.Setenv("TROUPE_LIBCUDA", "/nonexistent/libcuda.so.1")
	ctx := actors.WithSelf(context.Background(), &actors.ActorInfo{ID: "a3", Name: "planner", Node: "n", GPUs: []int{1}, GPUUUIDs: []string{"GPU-0b1c"}})
	_, err := NewPolicy(ctx, tinyConfig())
	if !errors.Is(err, ErrConfig) || !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), "GPU 1 (GPU-0b1c)") {
		t.Fatalf("NewPolicy on an unusable GPU: %v; want ErrConfig wrapping cuda.ErrUnavailable, naming GPU 1", err)
	}
	cfg := tinyConfig()
	cfg.Backend = "cpu" // the override still works
	p, err := NewPolicy(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ws, _ := p.Weights(ctx, struct{}{}); ws.Backend != "cpu (backend cpu)" {
		t.Fatalf("backend %q, want cpu (backend cpu)", ws.Backend)
	}
}
