// Package backends decides which compute backend an actor or a program
// computes with: the CUDA backend on the GPU it was placed on, the CPU
// backend metered against a simulated GPU, or the plain CPU backend. It is
// the one place that knows both implementations; models see only
// gpu/compute's contract. An actor given a real GPU that it cannot use
// fails; it never falls back to the CPU silently.
package backends

import (
	"errors"
	"fmt"
	"strings"

	"troupe/gpu/busy"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
	"troupe/gpu/compute/cuda"
)

// Placement is what an actor was given on its node.
type Placement struct {
	Node  string   // node ID, for metering and messages
	Actor string   // actor name or ID, for metering
	GPUs  []int    // NVML indices on the node; empty for a CPU actor
	UUIDs []string // NVML UUIDs of GPUs, same order (may be empty)
	// Simulated marks GPUs of a simulated profile: there is no device.
	Simulated bool
}

// Backend choices for ForPlacement (TROUPE_BACKEND's values).
const (
	BackendAuto = "auto" // follow the placement
	BackendCPU  = "cpu"  // always the CPU backend
	BackendCUDA = "cuda" // always CUDA; an error when it cannot run
)

// ForPlacement returns the backend an actor placed as p computes with, and
// a one-line note saying which and why (for logs and stats). mode is
// BackendAuto ("" too), BackendCPU or BackendCUDA:
//
//   - auto: a real GPU gives the CUDA backend on that device, found by its
//     NVML UUID among the devices the driver shows (so CUDA_VISIBLE_DEVICES
//     and CUDA's own device order cannot point it at another GPU); a
//     simulated GPU gives the CPU backend metered against it, so its
//     simulated utilization follows the actor's work; no GPU gives the CPU
//     backend.
//   - cpu: the CPU backend, metered when the GPU is simulated.
//   - cuda: CUDA on the placed GPU (device 0 with none); on a simulated GPU
//     the device with the same index, metered.
//
// A real GPU that cannot be used (no driver, not visible, too old) is an
// error naming the GPU and the reason.
func ForPlacement(p Placement, mode string) (compute.Backend, string, error) {
	switch strings.ToLower(strings.TrimSpace(mode)) {
	case "", BackendAuto:
		switch {
		case len(p.GPUs) == 0:
			return cpu.New(), "cpu (no GPU placed)", nil
		case p.Simulated:
			return p.meter(cpu.New()), fmt.Sprintf("cpu metered as simulated GPU %d", p.GPUs[0]), nil
		}
		b, err := p.open()
		if err != nil {
			return nil, "", err
		}
		return b, b.Name(), nil
	case BackendCPU:
		if p.Simulated && len(p.GPUs) > 0 {
			return p.meter(cpu.New()), fmt.Sprintf("cpu metered as simulated GPU %d (backend cpu)", p.GPUs[0]), nil
		}
		return cpu.New(), "cpu (backend cpu)", nil
	case BackendCUDA:
		if len(p.GPUs) == 0 {
			b, err := cuda.New(0)
			if err != nil {
				return nil, "", fmt.Errorf("backend cuda with no GPU placed: %w", err)
			}
			return b, b.Name() + " (backend cuda, no GPU placed)", nil
		}
		b, err := p.open()
		if err != nil {
			return nil, "", err
		}
		if p.Simulated {
			return p.meter(b), b.Name() + fmt.Sprintf(" (backend cuda, as simulated GPU %d)", p.GPUs[0]), nil
		}
		return b, b.Name(), nil
	default:
		return nil, "", fmt.Errorf("%w %q: want cpu, cuda or auto", ErrBackendName, mode)
	}
}

func (p Placement) meter(b compute.Backend) compute.Backend {
	return BindActor(b, p.Node, p.GPUs, p.Actor)
}

// BindActor returns b metered to the GPU an actor was placed on: the first
// of gpus on node, counted in this process's busy meter (gpu/busy) under
// actor. With no GPU it returns b unchanged. The result keeps b's optional
// capabilities, as compute.Metered does.
func BindActor(b compute.Backend, node string, gpus []int, actor string) compute.Backend {
	if len(gpus) == 0 {
		return b
	}
	return compute.Metered(b, busy.ProcessMeter().Counter(busy.Key{Node: node, GPU: gpus[0], Actor: actor}), nil)
}

// open opens the CUDA device of the placement's first GPU (an actor
// computes on one device; the others of a multi-GPU placement are the
// caller's to use).
func (p Placement) open() (*cuda.Backend, error) {
	uuid := ""
	if !p.Simulated && len(p.UUIDs) > 0 {
		uuid = p.UUIDs[0]
	}
	return cuda.OpenPlaced(p.GPUs[0], uuid)
}

// ErrBackendName reports an unknown backend name (--backend,
// TROUPE_BACKEND).
var ErrBackendName = errors.New("unknown backend")

// Select returns the compute backend this process should use and a one-line
// note saying which and why. mode is what the user asked for, read at the
// edge (a --backend flag defaulting to TROUPE_BACKEND): "cpu" forces the CPU
// backend; "cuda" forces CUDA and fails with a clear error when it is
// unavailable; "" or "auto" picks CUDA when Available and the CPU backend
// otherwise.
func Select(mode string) (compute.Backend, string, error) {
	switch v := strings.ToLower(strings.TrimSpace(mode)); v {
	case "cpu":
		return cpu.New(), "cpu (backend cpu asked for)", nil
	case "cuda":
		b, err := cuda.New(0)
		if err != nil {
			return nil, "", fmt.Errorf("backend cuda: %w", err)
		}
		return b, b.Name() + " (backend cuda asked for)", nil
	case "", "auto":
		if ok, reason := cuda.Available(); !ok {
			return cpu.New(), "cpu (" + reason + ")", nil
		}
		b, err := cuda.New(0)
		if err != nil {
			return cpu.New(), "cpu (" + firstLine(err.Error()) + ")", nil
		}
		return b, b.Name(), nil
	default:
		return nil, "", fmt.Errorf("%w %q: want cpu, cuda or auto", ErrBackendName, v)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
