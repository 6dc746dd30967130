package compute

// Optional capabilities for fused kernels: ops a device runs in one pass
// over memory where the Backend contract takes several. Each is exactly the
// composition of Backend ops its comment names (up to float rounding), so a
// caller finds it with As and otherwise runs those ops. gpu/compute/cuda
// implements all of them; gpu/compute/cpu none (its ops are not bound by
// memory traffic the way a GPU's are).

// FlashAttender is causal grouped-query attention that keeps, instead of
// the (B,NH,T,T) probabilities of GQAttentionForward, each row's
// log-sum-exp (B,NH,T), and recomputes the probabilities in the backward
// (FlashAttention). Memory for attention then grows with T, not T².
type FlashAttender interface {
	// FlashAttentionForward: out (B,T,NH,HD) as GQAttentionForward, and
	// lse[b,h,t] = log sum_{s<=t} exp(q_t·k_s*scale) (B,NH,T).
	FlashAttentionForward(out, lse, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32)
	// FlashAttentionBackward accumulates dq, dk, dv as GQAttentionBackward,
	// from dout and q, k, v, out and lse of the forward.
	FlashAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse Buffer, B, T, NH, KVH, HD int, scale float32)
}

// FlashAttenderBF16 is FlashAttender with attention's two products on
// BF16-rounded q, k and v (float32 sums and softmax), as
// BF16Matmuler.GQAttentionForwardBF16 computes them: mixed precision's
// attention keeping the log-sum-exp instead of the (B,NH,T,T)
// probabilities. The backward recomputes the probabilities from the same
// rounded operands and returns the gradients with respect to them, as
// autocast's backward does.
type FlashAttenderBF16 interface {
	FlashAttentionForwardBF16(out, lse, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32)
	FlashAttentionBackwardBF16(dq, dk, dv, dout, q, k, v, out, lse Buffer, B, T, NH, KVH, HD int, scale float32)
}

// ResidualNormer fuses the residual add with the RMSNorm that follows it.
type ResidualNormer interface {
	// ResidualRMSNormForward: res = a + b (N*C elements; res may alias a
	// or b), then RMSNormForward(out, rstd, res, weight, N, C, eps). The
	// backward is RMSNormBackward into the residual's gradient.
	ResidualRMSNormForward(res, out, rstd, a, b, weight Buffer, N, C int, eps float32)
}

// QKRoper applies the rotary embedding to the attention's queries and keys
// in one launch, after Qwen3's per-head RMSNorm where the model has one.
type QKRoper interface {
	// RopeQKForward is RopeForward on q (N,NH,HD) and on k (N,KVH,HD).
	RopeQKForward(q, k Buffer, pos IntBuffer, cos, sin Buffer, N, NH, KVH, HD, maxPos int)
	// RopeQKBackward is RopeBackward on dq (N,NH,HD) and on dk (N,KVH,HD).
	RopeQKBackward(dq, dk Buffer, pos IntBuffer, cos, sin Buffer, N, NH, KVH, HD, maxPos int)
	// HeadNormRopeForward is RMSNormForward(out, rstd, inp, weight, N*H,
	// HD, eps) then RopeForward(out, pos, cos, sin, N, H, HD, maxPos):
	// inp and out (N,H,HD), rstd (N*H), weight (HD). The backward is
	// RopeBackward then RMSNormBackward (inp and rstd are what it needs).
	HeadNormRopeForward(out, rstd, inp, weight Buffer, pos IntBuffer, cos, sin Buffer, N, H, HD, maxPos int, eps float32)
}

// LSELossHeads are the loss heads with an online log-sum-exp: the forward
// reads the logits once and keeps lse (N) instead of writing the softmax
// (N,V); the backward recomputes the softmax from the logits and lse while
// it writes the gradient. With the vocabulary as the widest tensor of a
// model, that halves the head's memory traffic.
//
// In the backwards, dlogits may be the logits buffer itself: the gradient
// then replaces the logits in place (each element is read before it is
// written). Otherwise it accumulates, as every backward op does.
type LSELossHeads interface {
	// CrossEntropyLSEForward: lse[n] = logsumexp(logits[n,:]) and
	// losses[n] = lse[n] - logits[n,targets[n]].
	CrossEntropyLSEForward(losses, lse, logits Buffer, targets IntBuffer, N, V int)
	// CrossEntropyLSEBackward: dlogits[n,v] (+)= (exp(logits[n,v]-lse[n]) -
	// [v==targets[n]]) * dlosses[n].
	CrossEntropyLSEBackward(dlogits, logits, lse, dlosses Buffer, targets IntBuffer, N, V int)
	// LogProbLSEForward: lse as above, logp[n] = logits[n,targets[n]] - lse[n].
	LogProbLSEForward(logp, lse, logits Buffer, targets IntBuffer, N, V int)
	// LogProbLSEBackward: dlogits[n,v] (+)= dlogp[n] * ([v==targets[n]] -
	// exp(logits[n,v]-lse[n])).
	LogProbLSEBackward(dlogits, logits, lse, dlogp Buffer, targets IntBuffer, N, V int)
}

// AdamWTensor is one parameter tensor of a multi-tensor AdamW update: N
// elements of Params, Grads, M and V.
type AdamWTensor struct {
	Params, Grads, M, V Buffer
	N                   int
	// NoDecay skips the weight decay for this tensor (norms, biases).
	NoDecay bool
}

// MultiAdamW updates many parameter tensors in one launch.
type MultiAdamW interface {
	// AdamWUpdateMulti is AdamWUpdate on every tensor of ts with h (and
	// WeightDecay 0 where NoDecay).
	AdamWUpdateMulti(ts []AdamWTensor, h AdamW)
}

// PackedSwiGLU is SwiGLU on the output of one matmul whose weight stacks
// the gate and up projections ((2I,C): gate rows, then up rows), so the
// MLP's input is read by one GEMM instead of two.
type PackedSwiGLU interface {
	// SwiGLUPackedForward: out[n,i] = silu(gu[n,i]) * gu[n,I+i] for
	// gu (N,2I) and out (N,I): SwiGLUForward on the two halves of each row.
	SwiGLUPackedForward(out, gu Buffer, N, I int)
	// SwiGLUPackedBackward accumulates the gate half dgu[n,i] and the up
	// half dgu[n,I+i] (dgu (N,2I)) from dout (N,I), as SwiGLUBackward.
	SwiGLUPackedBackward(dgu, dout, gu Buffer, N, I int)
}

// StackedBF16Matmuler multiplies one input by two BF16 weights of the same
// shape as if they were stacked in one (2·OC, C) weight, without a stacked
// copy: the MLP's gate and up projections, whose (N, 2I) output
// PackedSwiGLU reads, so the MLP's input is read by one GEMM. Weights are
// BF16Matmuler's (bits of an (OC, C) Linear weight, w1's rows first).
type StackedBF16Matmuler interface {
	// MatmulForwardBF16Stacked: out (N, 2·OC), out[n, :OC] = inp·w1ᵀ and
	// out[n, OC:] = inp·w2ᵀ, as MatmulForwardBF16 on each (no bias).
	MatmulForwardBF16Stacked(out, inp Buffer, w1, w2 []uint16, N, C, OC int)
	// MatmulBackwardInputBF16Stacked accumulates dinp (N, C) +=
	// dout[:, :OC]·w1 + dout[:, OC:]·w2 for dout (N, 2·OC).
	MatmulBackwardInputBF16Stacked(dinp, dout Buffer, w1, w2 []uint16, N, C, OC int)
	// MatmulBackwardWeightBF16Stacked accumulates dw1 (OC, C) +=
	// dout[:, :OC]ᵀ·inp and dw2 += dout[:, OC:]ᵀ·inp (BF16-rounded operands,
	// float32 sums); either may be nil.
	MatmulBackwardWeightBF16Stacked(dw1, dw2, dout, inp Buffer, N, C, OC int)
}
