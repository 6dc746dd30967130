package policy

import (
	"fmt"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
)

// This file is mixed precision for a float32 model, what PyTorch's
// autocast(dtype=torch.bfloat16) does on a CPU: the weights, their
// gradients and the AdamW moments stay float32, and the matmuls (the seven
// projections and the output head; forward, input gradient and weight
// gradient) and attention's two products in the forward multiply
// BF16-rounded operands with float32 sums. Norms, RoPE, the attention
// softmax and backward, SwiGLU and the loss stay float32; so does the
// decode step's attention over the KV cache (memory-bound, nothing to gain). Each matrix
// gets a BF16 copy, rounded again whenever the weights change (wver): one
// pass over the weights per optimizer step, about 1% of a training step.
//
// On CPUs with AVX512_BF16 (VDPBF16PS) a BF16 matmul has twice the float32
// FMA peak, so the matmuls, most of a step, run about twice as fast. The
// price is BF16's 8-bit mantissa in every product: log-probs and gradients
// agree with float32 to about 1e-2, not 1e-4 (TestLlamaMixedPrecision
// compares both against PyTorch's own autocast error).

// On a backend with compute.BF16Resident (a GPU's) the copies are the
// backend's, on the device: the masters are rounded into them where they
// live after each update, and the host slices in mats stay zero (they only
// name the copies).

// ampState is the BF16 copies of a float32 model's matrices.
type ampState struct {
	mm   compute.BF16Matmuler
	mats [numKinds][]uint16
	ver  int // the m.wver the copies were rounded at; -1 never
}

// ComputeDType is the precision of the model's matmuls: hf.BF16 with mixed
// precision (SetComputeDType) or a BF16 base on a backend that multiplies
// BF16 weights, else hf.F32.
func (m *Llama) ComputeDType() hf.DType {
	if m.amp != nil || (m.bf != nil && m.bf.mm != nil) {
		return hf.BF16
	}
	return hf.F32
}

// SetComputeDType sets the precision of the matmuls of a float32 model:
// hf.BF16 for mixed precision (see llama_amp.go), hf.F32 (the default) for
// float32 throughout. BF16 needs a backend with compute.BF16Matmuler (both backends);
// it costs a BF16 copy of the matrices (half the float32 weights). A BF16
// base (SetBaseDType) already computes in BF16 and accepts only BF16.
func (m *Llama) SetComputeDType(dt hf.DType) error {
	switch dt {
	case hf.F32:
		if m.bf != nil && m.bf.mm != nil {
			return fmt.Errorf("%w: compute dtype F32 on a BF16 base (SetBaseDType(F32) first)", ErrConfig)
		}
		m.amp = nil
		return nil
	case hf.BF16:
		if m.bf != nil {
			if m.bf.mm == nil {
				return fmt.Errorf("%w: compute dtype BF16: backend %T has no BF16 matmuls", ErrConfig, m.be)
			}
			return nil
		}
		if m.amp != nil {
			return nil
		}
		mm, ok := compute.As[compute.BF16Matmuler](m.be)
		if !ok {
			return fmt.Errorf("%w: compute dtype BF16: backend %T has no BF16 matmuls", ErrConfig, m.be)
		}
		a := &ampState{mm: mm, ver: -1}
		for _, k := range m.ampKinds() {
			a.mats[k] = make([]uint16, m.sizes[k])
		}
		m.amp = a
		m.freeTransposed() // decoding reads the BF16 copies
		return nil
	}
	return fmt.Errorf("%w: compute dtype %q (want F32 or BF16)", ErrConfig, dt)
}

// ampKinds are the matrices the matmuls read: the projections, and the
// head (the embedding when tied; an untied embedding is only gathered).
func (m *Llama) ampKinds() []int {
	ks := []int{kQ, kK, kV, kO, kGate, kUp, kDown, kHead}
	if m.arch.tied {
		ks = append(ks, kEmbed)
	}
	out := ks[:0]
	for _, k := range ks {
		if m.sizes[k] > 0 {
			out = append(out, k)
		}
	}
	return out
}

// ampMat is layer l's BF16 copy of kind k (l < 0: the whole kind), rounded
// again first if the weights changed since.
func (m *Llama) ampMat(k, l int) []uint16 {
	a := m.amp
	if a.ver != m.wver {
		for _, kk := range m.ampKinds() {
			if r := m.fu.res; r != nil {
				// The copies live on the device (the host slices only name
				// them): rounded there, nothing crosses the bus.
				r.RoundBF16Resident(a.mats[kk], m.pv.all[kk])
			} else {
				a.mm.RoundBF16(a.mats[kk], m.pv.all[kk])
			}
		}
		a.ver = m.wver
	}
	if l < 0 {
		return a.mats[k]
	}
	per := m.sizes[k] / m.arch.L
	return a.mats[k][l*per : (l+1)*per]
}

// ampHead is the BF16 copy of the output head.
func (m *Llama) ampHead() []uint16 {
	if m.arch.tied {
		return m.ampMat(kEmbed, -1)
	}
	return m.ampMat(kHead, -1)
}

// ampBytes is the host memory of the BF16 copies.
func (m *Llama) ampBytes() int {
	if m.amp == nil {
		return 0
	}
	n := 0
	for _, x := range m.amp.mats {
		n += 2 * len(x)
	}
	return n
}
