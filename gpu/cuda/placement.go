package cuda

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"troupe/gpu"
	"troupe/gpu/cpu"
)

// This file picks the compute backend of an actor from where the scheduler
// placed it: the CUDA backend on the GPU it was given, the CPU backend
// metered against a simulated GPU, or the plain CPU backend. An actor given
// a real GPU that it cannot use fails; it never falls back to the CPU
// silently.

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

// ErrNoSuchGPU reports a placement GPU that the CUDA driver does not show
// this process.
var ErrNoSuchGPU = errors.New("cuda: the placed GPU is not visible")

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
func ForPlacement(p Placement, mode string) (gpu.Backend, string, error) {
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
			b, err := New(0)
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

func (p Placement) meter(b gpu.Backend) gpu.Backend {
	return gpu.BindActorBackend(b, p.Node, p.GPUs, p.Actor)
}

// open opens the CUDA device of the placement's first GPU (an actor
// computes on one device; the others of a multi-GPU placement are the
// caller's to use).
func (p Placement) open() (*Backend, error) {
	idx := p.GPUs[0]
	uuid := ""
	if !p.Simulated && len(p.UUIDs) > 0 {
		uuid = p.UUIDs[0]
	}
	ordinal, err := ordinalFor(idx, uuid, os.Getenv("CUDA_VISIBLE_DEVICES"))
	if err != nil {
		return nil, placedErr(idx, uuid, err)
	}
	b, err := New(ordinal)
	if err != nil {
		return nil, placedErr(idx, uuid, err)
	}
	return b, nil
}

func placedErr(idx int, uuid string, err error) error {
	if uuid != "" {
		return fmt.Errorf("GPU %d (%s): %w", idx, uuid, err)
	}
	return fmt.Errorf("GPU %d: %w", idx, err)
}

// ordinalFor maps a node GPU (NVML index, UUID) to the CUDA ordinal that
// names it in this process. With a UUID it asks the driver for every
// visible device's UUID and takes the match. Without one it maps the index
// the way CUDA_VISIBLE_DEVICES does: the index's position in the list, or
// the index itself when the variable is unset.
func ordinalFor(idx int, uuid, visible string) (int, error) {
	if uuid != "" {
		api, err := loadDriver()
		if err != nil {
			return 0, err
		}
		uuids, err := deviceUUIDs(api)
		if err != nil {
			return 0, err
		}
		for i, u := range uuids {
			if strings.EqualFold(u, uuid) {
				return i, nil
			}
		}
		return 0, fmt.Errorf("%w: the driver shows %d device(s) (%s), none with that UUID (CUDA_VISIBLE_DEVICES=%q)",
			ErrNoSuchGPU, len(uuids), strings.Join(uuids, ", "), visible)
	}
	return visibleOrdinal(idx, visible)
}

// visibleOrdinal is CUDA_VISIBLE_DEVICES' mapping from a node index to an
// ordinal: unset means identity; otherwise the position of idx in the
// comma-separated list (which, like CUDA, ends at the first invalid entry).
func visibleOrdinal(idx int, visible string) (int, error) {
	if strings.TrimSpace(visible) == "" {
		return idx, nil
	}
	for pos, f := range strings.Split(visible, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			break
		}
		if n == idx {
			return pos, nil
		}
	}
	return 0, fmt.Errorf("%w: CUDA_VISIBLE_DEVICES=%q hides it", ErrNoSuchGPU, visible)
}
