package gpuagent

import (
	"context"
	"testing"
	"time"

	"troupe/gpu"
	"troupe/gpu/busy"
)

func TestNodeGPUs(t *testing.T) {
	gpus, topo, sim, err := NodeGPUs("h:1", "4")
	if err != nil || len(gpus) != 4 || topo != nil || !sim || gpus[3].Index != 3 {
		t.Fatalf("4 simulated GPUs: %v %v %v %v", gpus, topo, sim, err)
	}
	if _, _, _, err := NodeGPUs("h:1", "999"); err == nil {
		t.Error("999 GPUs accepted")
	}
	gpus, topo, sim, err = NodeGPUs("h:1", "pcie-4")
	if err != nil || len(gpus) != 4 || len(topo) != 4 || !sim || gpus[0].MemoryBytes == 0 {
		t.Fatalf("profile pcie-4: %v %v %v %v", gpus, topo, sim, err)
	}
	if topo[0][0] != 0 || topo[0][1] == 0 {
		t.Errorf("topology scores %v: want 0 on the diagonal, links elsewhere", topo)
	}
	labels := map[string]string{}
	if IsSimulated(labels) {
		t.Error("unlabelled node reported simulated")
	}
	MarkSimulated(labels)
	if !IsSimulated(labels) {
		t.Error("MarkSimulated did not mark")
	}
}

// TestAgentFollowsBusyTime: the busy time an actor's backend reports for
// a simulated GPU of this node shows in the next sample as utilization,
// with the actor attributed.
func TestAgentFollowsBusyTime(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := Start(ctx, Options{Node: "agent-test", Simulate: "2", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if a.Inventory().Len() != 2 || len(a.Sampler().Devices()) != 2 {
		t.Fatalf("%d GPUs, want 2", a.Inventory().Len())
	}
	a.Attribution().Assign(0, gpu.Holder{Actor: "planner", Job: "job-1", Fraction: 1})
	busy.ProcessMeter().Counter(busy.Key{Node: "agent-test", GPU: 0, Actor: "planner"}).AddBusy(time.Hour)
	time.Sleep(150 * time.Millisecond) // at least one simulated utilization window
	s := a.Sampler().SampleOnce()
	if len(s) != 2 || s[0].SMUtil == nil || *s[0].SMUtil == 0 {
		t.Fatalf("GPU 0 after an hour of busy time: %+v", s)
	}
	if s[1].SMUtil != nil && *s[1].SMUtil != 0 {
		t.Errorf("idle GPU 1 at %d%%", *s[1].SMUtil)
	}
	if len(s[0].Actors) != 1 || s[0].Actors[0].Actor != "planner" {
		t.Errorf("GPU 0 holders %+v, want the planner", s[0].Actors)
	}
}
