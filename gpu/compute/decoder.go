package compute

// This file defines the ops of the Llama/Qwen decoder family (Llama, Qwen2,
// Qwen3, Mistral, SmolLM): RMSNorm, rotary position embeddings (HF's
// rotate_half convention), grouped-query causal attention with a head size
// independent of the model width, SwiGLU and a position-free embedding.
// They extend Backend rather than widen it so that a backend without them
// fails a decoder model's construction with a clear error instead of at the
// first kernel. gpu/compute/cpu and gpu/compute/cuda implement them.
//
// Shapes follow backend.go's conventions, plus:
//
//	NH   query heads, KVH key/value heads (KVH divides NH; query head h
//	     reads key/value head h/(NH/KVH)), HD head size (any even number,
//	     not necessarily C/NH), I the MLP's intermediate size.
//
// Queries, keys and values live in separate buffers, row-major:
// q (B,T,NH,HD), k and v (B,T,KVH,HD). Backward ops accumulate (+=), as in
// backend.go.

// DecoderBackend is a Backend with the decoder family's ops.
type DecoderBackend interface {
	Backend

	// EmbedForward: out[n,:] = wte[inp[n],:] for n < N. out (N,C), inp (N)
	// ids in [0,V), wte (V,C).
	EmbedForward(out Buffer, inp IntBuffer, wte Buffer, N, C, V int)
	// EmbedBackward: dwte[inp[n],:] += dout[n,:].
	EmbedBackward(dwte, dout Buffer, inp IntBuffer, N, C, V int)

	// RMSNormForward normalises each of N rows of inp (N,C):
	// rstd[n] = 1/sqrt(mean(x^2)+eps), out = x*rstd*weight (weight (C)).
	// rstd (N) is saved for the backward. out may not alias inp.
	// With N = rows*heads and C = HD it is Qwen3's per-head q/k norm.
	RMSNormForward(out, rstd, inp, weight Buffer, N, C int, eps float32)
	// RMSNormBackward accumulates dinp (N,C) and dweight (C) from dout,
	// using inp, weight and rstd saved by the forward. dweight may be nil
	// (a frozen norm).
	RMSNormBackward(dinp, dweight, dout, inp, weight, rstd Buffer, N, C int)

	// RopeForward rotates each head of x (N,H,HD) in place by its row's
	// position pos[n] (int32, >= 0), HF's rotate_half convention: for
	// i < HD/2, with c = cos[p,i], s = sin[p,i] (tables (maxPos,HD/2), the
	// caller folds rope_theta and rope_scaling into them):
	//   x'[i]      = x[i]*c      - x[i+HD/2]*s
	//   x'[i+HD/2] = x[i+HD/2]*c + x[i]*s
	RopeForward(x Buffer, pos IntBuffer, cos, sin Buffer, N, H, HD, maxPos int)
	// RopeBackward turns dout (N,H,HD) into the gradient before the rotation,
	// in place: the inverse rotation (s -> -s). The gradient is replaced,
	// not accumulated, because the rotation is linear and done in place.
	RopeBackward(dx Buffer, pos IntBuffer, cos, sin Buffer, N, H, HD, maxPos int)

	// GQAttentionForward is causal attention with grouped query heads.
	// q (B,T,NH,HD), k, v (B,T,KVH,HD); att (B,NH,T,T) receives the softmax
	// probabilities att[b,h,t,s] = softmax_{s<=t}(q_t·k_s*scale) (zero for
	// s>t), kept for the backward; out (B,T,NH,HD) = sum_s att*v_s.
	// scale is usually 1/sqrt(HD).
	GQAttentionForward(out, att, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32)
	// GQAttentionBackward accumulates dq, dk, dv (shapes of q, k, v) from
	// dout (B,T,NH,HD), using q, k, v and att saved by the forward.
	GQAttentionBackward(dq, dk, dv, dout, q, k, v, att Buffer, B, T, NH, KVH, HD int, scale float32)
	// GQAttentionDecode is one incremental step with a KV cache, one new
	// token per row at its own position pos[b] (rows of different lengths).
	// q (B,NH,HD), k, v (B,KVH,HD) are the new token's (RoPE already
	// applied); cache (B,maxT,2,KVH,HD) holds per position k then v. The op
	// first writes k, v at pos[b], then sets out (B,NH,HD) to attention of
	// q over cache positions 0..pos[b]. Requires 0 <= pos[b] < maxT.
	GQAttentionDecode(out, cache, q, k, v Buffer, pos IntBuffer, B, maxT, NH, KVH, HD int, scale float32)

	// SwiGLUForward: out[i] = silu(gate[i]) * up[i] for i < N, with
	// silu(x) = x/(1+exp(-x)).
	SwiGLUForward(out, gate, up Buffer, N int)
	// SwiGLUBackward accumulates dgate[i] and dup[i] from dout[i].
	SwiGLUBackward(dgate, dup, dout, gate, up Buffer, N int)
}
