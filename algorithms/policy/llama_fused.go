package policy

import (
	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
)

// This file holds the backend's fused kernels (gpu/compute/fused.go) as the
// model uses them. Each capability is found once, when the model is built
// on its backend; where the backend lacks one (gpu/compute/cpu lacks all)
// the model runs the Backend ops it fuses, exactly as it would without this
// file:
//
//   - FlashAttender: attention keeps each row's log-sum-exp (B,NH,T)
//     instead of the (B,NH,T,T) probabilities, and the backward reads the
//     layer's saved attention output (the o projection's input), so
//     attention's memory grows with T, not T²;
//   - ResidualNormer: each residual add runs with the RMSNorm that follows
//     it (the MLP's norm, the next block's input norm, the final norm);
//   - QKRoper: RoPE on q and k in one launch, after Qwen3's per-head norm;
//   - LSELossHeads: the loss head keeps a log-sum-exp per row instead of
//     writing the softmax over the logits, and its backward writes the
//     gradient over the logits in place (no second (R,V) buffer);
//   - MultiAdamW: one AdamW launch over every parameter tensor;
//   - PackedSwiGLU with StackedBF16Matmuler: where the products read BF16
//     weights (mixed precision, a BF16 base), the MLP's gate and up
//     projections are one GEMM over the two matrices stacked (the backend
//     stacks them without a copy; the model keeps every kind stacked over
//     layers, the flat order of Weights, the optimizer state and the
//     checkpoints) into one (N,2I) buffer that the packed SwiGLU reads, and
//     the backward is one input-gradient GEMM over the pair. Not with
//     gate/up biases or an adapter on gate or up, which need the two
//     outputs apart.

// fusedOps are the fused capabilities of the model's backend; a nil field
// is one it lacks.
type fusedOps struct {
	flash compute.FlashAttender
	norm  compute.ResidualNormer
	rope  compute.QKRoper
	loss  compute.LSELossHeads
	adam  compute.MultiAdamW
	// res keeps the BF16 copies on the device (mixed precision's rounding,
	// a BF16 base's embedding rows); mix runs LoRA's products in BF16
	// where the base's run in BF16. Neither is a fused kernel, but both are
	// found here for the same reason: once, and nil on gpu/compute/cpu.
	res compute.BF16Resident
	mix compute.MixedMatmuler
	// flashBF16 is flash attention under mixed precision (the products on
	// BF16-rounded operands, as GQAttentionForwardBF16).
	flashBF16 compute.FlashAttenderBF16
	// glu and stack together run the MLP's gate and up as one GEMM.
	glu   compute.PackedSwiGLU
	stack compute.StackedBF16Matmuler
}

// findFused looks up be's fused capabilities.
func findFused(be compute.Backend) fusedOps {
	var f fusedOps
	if c, ok := compute.As[compute.FlashAttender](be); ok {
		f.flash = c
	}
	if c, ok := compute.As[compute.ResidualNormer](be); ok {
		f.norm = c
	}
	if c, ok := compute.As[compute.QKRoper](be); ok {
		f.rope = c
	}
	if c, ok := compute.As[compute.LSELossHeads](be); ok {
		f.loss = c
	}
	if c, ok := compute.As[compute.MultiAdamW](be); ok {
		f.adam = c
	}
	if c, ok := compute.As[compute.BF16Resident](be); ok {
		f.res = c
	}
	if c, ok := compute.As[compute.MixedMatmuler](be); ok {
		f.mix = c
	}
	if c, ok := compute.As[compute.FlashAttenderBF16](be); ok {
		f.flashBF16 = c
	}
	g, ok1 := compute.As[compute.PackedSwiGLU](be)
	st, ok2 := compute.As[compute.StackedBF16Matmuler](be)
	if ok1 && ok2 {
		f.glu, f.stack = g, st
	}
	return f
}

// packable reports whether the backend can run the MLP packed: the gate and
// up activations (and their gradients) are then allocated as one (N,2I)
// buffer with the two (N,I) halves as views, so either form fits.
func (m *Llama) packable() bool { return m.fu.glu != nil }

// packedMLP reports whether the MLP's gate and up run as one stacked BF16
// GEMM into the (N,2I) buffer PackedSwiGLU reads: on a backend with both
// capabilities, when the products read BF16 matrices and nothing needs the
// gate and up outputs apart (biases, an adapter on either).
func (m *Llama) packedMLP() bool {
	if !m.packable() || m.arch.mlpBias || m.ComputeDType() != hf.BF16 {
		return false
	}
	if m.hasAdapters() {
		if mask, _, _ := m.loraNeeds(); mask[tGate] || mask[tUp] {
			return false
		}
	}
	return true
}

// bf16Mat is layer l's BF16 matrix of kind k as the products read it: the
// mixed-precision copy or the BF16 base's.
func (m *Llama) bf16Mat(k, l int) []uint16 {
	if m.amp != nil {
		return m.ampMat(k, l)
	}
	return m.layerBF16(k, l)
}

// mlpGateUpForward sets gu (N,2I) to the gate and up projections of inp
// (N,C), stacked per row, and act (N,I) to their SwiGLU (packedMLP).
func (m *Llama) mlpGateUpForward(l int, act, gu, inp compute.Buffer, N int) {
	C, I := m.arch.C, m.arch.I
	m.fu.stack.MatmulForwardBF16Stacked(gu, inp, m.bf16Mat(kGate, l), m.bf16Mat(kUp, l), N, C, I)
	m.fu.glu.SwiGLUPackedForward(act, gu, N, I)
}

// flashAttn reports whether the forward saves the log-sum-exp for a
// FlashAttentionBackward: with the backend's FlashAttender, and under mixed
// precision with its FlashAttenderBF16 (without, mixed precision runs
// attention's products through the BF16 matmuls' GQAttentionForwardBF16,
// with the contract's att).
func (m *Llama) flashAttn() bool {
	return m.fu.flash != nil && (m.amp == nil || m.fu.flashBF16 != nil)
}

// attSize is the floats of one layer's saved attention state for B rows of
// T positions: the log-sum-exp with flash attention, else the
// probabilities.
func (m *Llama) attSize(B, T int) int {
	if m.flashAttn() {
		return B * m.arch.NH * T
	}
	return B * m.arch.NH * T * T
}

// residualNorm is res = a + b (res may alias either) and then out, rstd =
// RMSNorm(res, weight), N rows of C.
func (m *Llama) residualNorm(res, out, rstd, a, b, weight compute.Buffer, N, C int) {
	if m.fu.norm != nil {
		m.fu.norm.ResidualRMSNormForward(res, out, rstd, a, b, weight, N, C, m.arch.eps)
		return
	}
	m.be.ResidualForward(res, a, b, N*C)
	m.be.RMSNormForward(out, rstd, res, weight, N, C, m.arch.eps)
}
