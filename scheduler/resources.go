package scheduler

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// quantum is the granularity of fractional quantities (GPUs and custom
// resources): 1e-4, as in Ray. Every fractional value is rounded to a
// multiple of it after each operation, so sums are exact and independent of
// order and releasing an allocation restores the free state bit for bit.
const quantum = 1e4

// q rounds x to the nearest multiple of 1/quantum, giving the canonical
// float64 for that multiple.
func q(x float64) float64 { return math.Round(x*quantum) / quantum }

// maxCustom bounds custom amounts so quantized sums stay exact in float64.
const maxCustom = 1e11

// Resources is an amount of CPU, memory, GPUs and custom resources, used both
// for what a node has and for what an actor or bundle asks for.
type Resources struct {
	// MilliCPU is CPU in thousandths of a core (1500 = 1.5 cores).
	MilliCPU int64 `msgpack:"cpu,omitempty"`
	// MemoryBytes is memory in bytes.
	MemoryBytes int64 `msgpack:"mem,omitempty"`
	// GPUs is a GPU count. Below 1 it is a fraction of one GPU (shared with
	// other fractional requests while their sum stays ≤ 1); at 1 or above it
	// must be a whole number of dedicated GPUs.
	GPUs float64 `msgpack:"gpus,omitempty"`
	// Custom holds user-defined resources by name (for example "tpu" or
	// "license"), each a non-negative amount with 1e-4 granularity.
	Custom CustomResources `msgpack:"custom,omitempty"`
}

// CustomResources maps a custom resource name to an amount. It encodes
// with sorted keys so equal states snapshot to equal bytes.
type CustomResources map[string]float64

// EncodeMsgpack implements msgpack.CustomEncoder with sorted keys.
func (c CustomResources) EncodeMsgpack(enc *msgpack.Encoder) error {
	if c == nil {
		return enc.EncodeNil()
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := enc.EncodeMapLen(len(keys)); err != nil {
		return err
	}
	for _, k := range keys {
		if err := enc.EncodeString(k); err != nil {
			return err
		}
		if err := enc.EncodeFloat64(c[k]); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *CustomResources) DecodeMsgpack(dec *msgpack.Decoder) error {
	var m map[string]float64
	if err := dec.Decode(&m); err != nil {
		return err
	}
	*c = m
	return nil
}

// CPUs returns the CPU amount in cores.
func (r Resources) CPUs() float64 { return float64(r.MilliCPU) / 1000 }

// IsZero reports whether r asks for nothing at all.
func (r Resources) IsZero() bool {
	if r.MilliCPU != 0 || r.MemoryBytes != 0 || r.GPUs != 0 {
		return false
	}
	for _, v := range r.Custom {
		if v != 0 {
			return false
		}
	}
	return true
}

// Validate checks that r is a well-formed request: no negative amounts, no
// NaN, and a GPU count above 1 that is a whole number.
func (r Resources) Validate() error {
	if r.MilliCPU < 0 {
		return fmt.Errorf("%w: negative CPU %d milli", ErrInvalid, r.MilliCPU)
	}
	if r.MemoryBytes < 0 {
		return fmt.Errorf("%w: negative memory %d bytes", ErrInvalid, r.MemoryBytes)
	}
	if math.IsNaN(r.GPUs) || math.IsInf(r.GPUs, 0) || r.GPUs < 0 {
		return fmt.Errorf("%w: bad GPU count %v", ErrInvalid, r.GPUs)
	}
	if r.GPUs > 1 && r.GPUs != math.Trunc(r.GPUs) {
		return fmt.Errorf("%w: GPU count %v above 1 must be a whole number", ErrInvalid, r.GPUs)
	}
	if r.GPUs > 1<<16 {
		return fmt.Errorf("%w: GPU count %v too large", ErrInvalid, r.GPUs)
	}
	if q(r.GPUs) != r.GPUs {
		return fmt.Errorf("%w: GPU fraction %v is not a multiple of 0.0001", ErrInvalid, r.GPUs)
	}
	for k, v := range r.Custom {
		if k == "" {
			return fmt.Errorf("%w: custom resource with empty name", ErrInvalid)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > maxCustom {
			return fmt.Errorf("%w: custom resource %q has bad amount %v", ErrInvalid, k, v)
		}
		if q(v) != v {
			return fmt.Errorf("%w: custom resource %q amount %v is not a multiple of 0.0001", ErrInvalid, k, v)
		}
	}
	return nil
}

// wholeGPUs returns the number of dedicated GPUs r asks for (0 for a
// fractional or GPU-less request).
func (r Resources) wholeGPUs() int {
	if r.GPUs >= 1 {
		return int(r.GPUs)
	}
	return 0
}

// fractionalGPU reports whether r asks for a share of one GPU.
func (r Resources) fractionalGPU() bool { return r.GPUs > 0 && r.GPUs < 1 }

// Clone returns a deep copy of r.
func (r Resources) Clone() Resources {
	c := r
	if r.Custom != nil {
		c.Custom = make(CustomResources, len(r.Custom))
		for k, v := range r.Custom {
			c.Custom[k] = v
		}
	}
	return c
}

// Add returns r + o (custom resources merged by name).
func (r Resources) Add(o Resources) Resources {
	c := r.Clone()
	c.MilliCPU += o.MilliCPU
	c.MemoryBytes += o.MemoryBytes
	c.GPUs = q(c.GPUs + o.GPUs)
	for k, v := range o.Custom {
		if v == 0 {
			continue
		}
		if c.Custom == nil {
			c.Custom = make(CustomResources, len(o.Custom))
		}
		c.Custom[k] = q(c.Custom[k] + v)
	}
	return c
}

// Sub returns r - o. Custom entries keep their key even at zero so a node's
// free map keeps the same shape as its total.
func (r Resources) Sub(o Resources) Resources {
	c := r.Clone()
	c.MilliCPU -= o.MilliCPU
	c.MemoryBytes -= o.MemoryBytes
	c.GPUs = q(c.GPUs - o.GPUs)
	for k, v := range o.Custom {
		if v == 0 {
			continue
		}
		if c.Custom == nil {
			c.Custom = make(CustomResources, len(o.Custom))
		}
		c.Custom[k] = q(c.Custom[k] - v)
	}
	return c
}

// addInPlace adds o (times sign) to r without allocating a new map when r
// already has one.
func (r *Resources) addInPlace(o Resources, sign int64) {
	r.MilliCPU += sign * o.MilliCPU
	r.MemoryBytes += sign * o.MemoryBytes
	r.GPUs = q(r.GPUs + float64(sign)*o.GPUs)
	for k, v := range o.Custom {
		if v == 0 {
			continue // a zero amount must not add a key the node lacks
		}
		if r.Custom == nil {
			r.Custom = make(CustomResources, len(o.Custom))
		}
		r.Custom[k] = q(r.Custom[k] + float64(sign)*v)
	}
}

// Fits reports whether the non-GPU parts of req (CPU, memory, custom) and the
// GPU total fit in r. Per-GPU placement is checked separately.
func (r Resources) Fits(req Resources) bool {
	if req.MilliCPU > r.MilliCPU || req.MemoryBytes > r.MemoryBytes || req.GPUs > r.GPUs+1e-9 {
		return false
	}
	for k, v := range req.Custom {
		if v > 0 && v > r.Custom[k]+1e-9 {
			return false
		}
	}
	return true
}

// shortfall describes, for a person, what of req does not fit in r (empty
// when everything fits). GPUs are left out: their message depends on
// per-GPU state and topology.
func (r Resources) shortfall(req Resources) []string {
	var out []string
	if req.MilliCPU > r.MilliCPU {
		out = append(out, fmt.Sprintf("CPU (needs %s, has %s)", fmtCPU(req.MilliCPU), fmtCPU(r.MilliCPU)))
	}
	if req.MemoryBytes > r.MemoryBytes {
		out = append(out, fmt.Sprintf("memory (needs %s, has %s)", fmtBytes(req.MemoryBytes), fmtBytes(r.MemoryBytes)))
	}
	keys := make([]string, 0, len(req.Custom))
	for k := range req.Custom {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v := req.Custom[k]; v > 0 && v > r.Custom[k]+1e-9 {
			out = append(out, fmt.Sprintf("%s (needs %g, has %g)", k, v, r.Custom[k]))
		}
	}
	return out
}

// String formats r compactly, e.g. "cpu=4 mem=16GiB gpu=2 tpu=1".
func (r Resources) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cpu=%s mem=%s gpu=%g", fmtCPU(r.MilliCPU), fmtBytes(r.MemoryBytes), r.GPUs)
	keys := make([]string, 0, len(r.Custom))
	for k := range r.Custom {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%g", k, r.Custom[k])
	}
	return b.String()
}

func fmtCPU(m int64) string { return fmt.Sprintf("%g", float64(m)/1000) }

func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.4g%ciB", float64(n)/float64(div), "KMGTP"[exp])
}
