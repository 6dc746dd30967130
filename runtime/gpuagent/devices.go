package gpuagent

import (
	"fmt"
	"strconv"

	"troupe/gpu"
	"troupe/scheduler"
)

// simulatedLabel is the node label that says the node's GPUs are
// simulated: the scheduler's views and the dashboard show it.
const simulatedLabel = "troupe.gpus"

// MarkSimulated labels a node's GPUs as simulated.
func MarkSimulated(labels map[string]string) { labels[simulatedLabel] = "simulated" }

// IsSimulated reports whether a node's labels mark its GPUs simulated.
func IsSimulated(labels map[string]string) bool { return labels[simulatedLabel] == "simulated" }

// NodeGPUs returns the GPUs a node offers the scheduler, and their
// topology scores: simulate's count or profile (see gpu.Profiles), or the
// real devices through NVML (none when NVML is missing). where names the
// node in simulated GPUs' UUIDs.
func NodeGPUs(where, simulate string) (gpus []scheduler.GPUInfo, topology [][]int, simulated bool, err error) {
	if n, err := strconv.Atoi(simulate); err == nil {
		if n < 0 || n > scheduler.MaxGPUsPerNode {
			return nil, nil, false, fmt.Errorf("--simulate-gpus %d: want 0..%d", n, scheduler.MaxGPUsPerNode)
		}
		var out []scheduler.GPUInfo
		for i := 0; i < n; i++ {
			out = append(out, scheduler.GPUInfo{Index: i, UUID: fmt.Sprintf("GPU-sim-%s-%d", where, i), Model: "simulated GPU"})
		}
		return out, nil, n > 0, nil
	}
	inv, err := gpu.Open(gpu.Options{Simulate: simulate})
	if err != nil {
		return nil, nil, false, fmt.Errorf("GPUs: %w", err)
	}
	defer inv.Close()
	devs := inv.Devices()
	for _, d := range devs {
		gi := scheduler.GPUInfo{Index: d.Index, UUID: d.UUID, Model: d.Name}
		if d.MemoryTotal != nil {
			gi.MemoryBytes = int64(*d.MemoryTotal)
		}
		gpus = append(gpus, gi)
	}
	if t := inv.Topology(); t != nil && t.Len() == len(devs) && len(devs) > 0 {
		topology = make([][]int, len(devs))
		for i := range topology {
			topology[i] = make([]int, len(devs))
			for j := range topology[i] {
				if i != j {
					topology[i][j] = t.Score(i, j)
				}
			}
		}
	}
	return gpus, topology, inv.Simulated(), nil
}
