package gpu

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Holder is an actor holding (a share of) a GPU.
type Holder struct {
	Actor string `json:"actor"`
	Job   string `json:"job,omitempty"`
	// Fraction is the share of the GPU placed for the actor, in (0, 1].
	Fraction float64 `json:"fraction"`
	// PID is the process the actor runs in (its worker), 0 if unknown. When
	// it is the only holder on the GPU with that PID, the Sampler fills
	// SMUtil from NVML's per-process utilization.
	PID uint32 `json:"pid,omitempty"`
	// SMUtil is the measured SM utilization of the actor's process on this
	// GPU in the last sample (set by the Sampler; nil if not measurable, for
	// example several actors sharing one process).
	SMUtil *uint32 `json:"sm_util_percent,omitempty"`
}

// ErrHolder reports an invalid attribution (empty actor, bad fraction).
var ErrHolder = errors.New("gpu: invalid GPU holder")

// Attribution maps GPU indices to the actors placed on them. The runtime
// fills it when it places and stops actors; samplers, the CLI, metrics and
// the dashboard read it. It is safe for concurrent use.
type Attribution struct {
	mu    sync.RWMutex
	byGPU map[int][]Holder
}

// NewAttribution returns an empty attribution.
func NewAttribution() *Attribution { return &Attribution{byGPU: map[int][]Holder{}} }

// Assign records that h holds GPU gpu, replacing an earlier record of the
// same actor on that GPU. The total of fractions on a GPU may not exceed 1.
func (a *Attribution) Assign(gpu int, h Holder) error {
	if h.Actor == "" {
		return fmt.Errorf("assign GPU %d: %w: empty actor name", gpu, ErrHolder)
	}
	if gpu < 0 {
		return fmt.Errorf("assign GPU %d to %s: %w: negative index", gpu, h.Actor, ErrHolder)
	}
	if !(h.Fraction > 0 && h.Fraction <= 1) {
		return fmt.Errorf("assign GPU %d to %s: %w: fraction %v not in (0, 1]", gpu, h.Actor, ErrHolder, h.Fraction)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	hs := a.byGPU[gpu]
	total := h.Fraction
	kept := make([]Holder, 0, len(hs)+1)
	for _, o := range hs {
		if o.Actor != h.Actor {
			kept = append(kept, o)
			total += o.Fraction
		}
	}
	if total > 1+1e-9 {
		return fmt.Errorf("assign GPU %d to %s: %w: fractions would total %.2f", gpu, h.Actor, ErrHolder, total)
	}
	kept = append(kept, h)
	sort.Slice(kept, func(i, j int) bool { return kept[i].Actor < kept[j].Actor })
	a.byGPU[gpu] = kept
	return nil
}

// Release removes actor from every GPU it holds.
func (a *Attribution) Release(actor string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for g, hs := range a.byGPU {
		kept := hs[:0:0]
		for _, h := range hs {
			if h.Actor != actor {
				kept = append(kept, h)
			}
		}
		if len(kept) == 0 {
			delete(a.byGPU, g)
		} else {
			a.byGPU[g] = kept
		}
	}
}

// Holders returns the actors on GPU gpu, sorted by name (nil if none).
func (a *Attribution) Holders(gpu int) []Holder {
	if a == nil {
		return nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	hs := a.byGPU[gpu]
	if len(hs) == 0 {
		return nil
	}
	return append([]Holder(nil), hs...)
}

// MeasureHolders returns hs with each holder's SMUtil set from the
// per-process samples procs when its PID identifies it alone on the GPU
// (nil otherwise), as a Sampler does with its Attribution. hs is modified
// in place.
func MeasureHolders(hs []Holder, procs []Process) []Holder { return measureHolders(hs, procs) }
