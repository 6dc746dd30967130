package policy

import "troupe/gpu/compute"

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
//   - MultiAdamW: one AdamW launch over every parameter tensor.
//
// PackedSwiGLU is not used: it needs each layer's gate and up matrices
// stacked in one (2I,C) weight, and the model keeps every kind stacked over
// layers (the flat order of Weights, the optimizer state and the
// checkpoints), with LoRA adapters on gate and up separately.

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
	return f
}

// flashAttn reports whether the forward saves the log-sum-exp for a
// FlashAttentionBackward: with the backend's FlashAttender, unless mixed
// precision runs attention's products through the BF16 matmuls (its own
// GQAttentionForwardBF16, with the contract's att).
func (m *Llama) flashAttn() bool { return m.fu.flash != nil && m.amp == nil }

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
