package runtime

import (
	"fmt"
	"math"
	"sort"

	"troupe/actors"
)

// eps absorbs float rounding when fractional GPUs are added and removed.
const eps = 1e-9

// pool is one node's resources: totals and what is free. Not safe for
// concurrent use; the local cluster guards it.
type pool struct {
	total    actors.ResourceSet
	freeCPU  float64
	freeMem  int64
	freeGPU  []float64 // free fraction of each GPU, by index
	freeCust map[string]float64
}

func newPool(total actors.ResourceSet) *pool {
	p := &pool{total: total, freeCPU: total.CPUs, freeMem: total.MemoryBytes, freeCust: map[string]float64{}}
	p.freeGPU = make([]float64, int(total.GPUs))
	for i := range p.freeGPU {
		p.freeGPU[i] = 1
	}
	for k, v := range total.Custom {
		p.freeCust[k] = v
	}
	return p
}

// infeasible explains why r can never fit this node, or returns nil.
func (p *pool) infeasible(r actors.ResourceSet) error {
	if r.CPUs > p.total.CPUs+eps {
		return fmt.Errorf("%w: needs CPUs=%g, the largest node has %g", actors.ErrInfeasible, r.CPUs, p.total.CPUs)
	}
	if r.MemoryBytes > p.total.MemoryBytes {
		return fmt.Errorf("%w: needs memory=%d bytes, the largest node has %d", actors.ErrInfeasible, r.MemoryBytes, p.total.MemoryBytes)
	}
	if r.GPUs > p.total.GPUs+eps {
		return fmt.Errorf("%w: needs GPUs=%g, the largest node has %g", actors.ErrInfeasible, r.GPUs, p.total.GPUs)
	}
	for k, v := range r.Custom {
		if v > p.total.Custom[k]+eps {
			return fmt.Errorf("%w: needs %s=%g, the largest node has %g", actors.ErrInfeasible, k, v, p.total.Custom[k])
		}
	}
	return nil
}

// allocate takes r if it fits now and returns the GPU indices it got.
func (p *pool) allocate(r actors.ResourceSet) ([]int, bool) {
	if r.CPUs > p.freeCPU+eps || r.MemoryBytes > p.freeMem {
		return nil, false
	}
	for k, v := range r.Custom {
		if v > p.freeCust[k]+eps {
			return nil, false
		}
	}
	gpus := p.pickGPUs(r.GPUs)
	if r.GPUs > 0 && gpus == nil {
		return nil, false
	}
	p.freeCPU -= r.CPUs
	p.freeMem -= r.MemoryBytes
	for k, v := range r.Custom {
		p.freeCust[k] -= v
	}
	take := math.Min(r.GPUs, 1)
	for _, g := range gpus {
		p.freeGPU[g] -= take
	}
	return gpus, true
}

// pickGPUs chooses GPUs for a request: a fraction goes to the fitting GPU
// with the least free (best fit, so whole GPUs stay free); n whole GPUs go
// to the lowest-indexed fully free ones.
func (p *pool) pickGPUs(n float64) []int {
	if n <= 0 {
		return nil
	}
	if n < 1 {
		best := -1
		for i, f := range p.freeGPU {
			if f+eps >= n && (best < 0 || f < p.freeGPU[best]) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		return []int{best}
	}
	var out []int
	for i, f := range p.freeGPU {
		if f >= 1-eps {
			out = append(out, i)
			if len(out) == int(n) {
				return out
			}
		}
	}
	return nil
}

// release gives back what allocate took.
func (p *pool) release(r actors.ResourceSet, gpus []int) {
	p.freeCPU += r.CPUs
	p.freeMem += r.MemoryBytes
	for k, v := range r.Custom {
		p.freeCust[k] += v
	}
	take := math.Min(r.GPUs, 1)
	for _, g := range gpus {
		p.freeGPU[g] = math.Min(1, p.freeGPU[g]+take)
	}
}

// used reports what is held.
func (p *pool) used() actors.ResourceSet {
	u := actors.ResourceSet{CPUs: p.total.CPUs - p.freeCPU, MemoryBytes: p.total.MemoryBytes - p.freeMem}
	for _, f := range p.freeGPU {
		u.GPUs += 1 - f
	}
	if len(p.freeCust) > 0 {
		u.Custom = map[string]float64{}
		keys := make([]string, 0, len(p.freeCust))
		for k := range p.freeCust {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			u.Custom[k] = p.total.Custom[k] - p.freeCust[k]
		}
	}
	return u
}
