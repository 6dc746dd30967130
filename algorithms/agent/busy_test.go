package agent

import (
	"context"
	"testing"

	"troupe/actors"
	"troupe/gpu"
)

// A policy actor placed on a GPU counts its backend's busy time and memory
// for that GPU (what drives a simulated GPU's utilization); one without a
// GPU counts nothing.
func TestPolicyOnGPUCountsBusyTime(t *testing.T) {
	ctx := actors.WithSelf(context.Background(), &actors.ActorInfo{ID: "a1", Name: "planner", Node: "busy-test-node", GPUs: []int{3}})
	p, err := NewPolicy(ctx, tinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sample(ctx, SampleRequest{Prompts: []string{"p a01 g22"}, K: 2, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	var rec *gpu.BusyRecord
	for _, r := range gpu.ProcessMeter().Snapshot() {
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
	for _, r := range gpu.ProcessMeter().Snapshot() {
		if r.Node == "busy-test-node-2" {
			t.Errorf("actor without a GPU counted: %+v", r)
		}
	}
}
