package compute

import (
	"errors"
	"fmt"
)

// This file defines the compute Backend: device buffers plus the forward and
// backward kernels of a decoder of the Llama family (Llama, Qwen2, Qwen3,
// Mistral, SmolLM: RMSNorm, rotary position embeddings, grouped-query causal
// attention, SwiGLU) and its optimizer. gpu/compute/cpu implements it with Go
// kernels and gpu/compute/cuda with CUDA kernels; algorithms/policy builds its
// model on it.
//
// # Conventions (shared by every implementation)
//
// All tensors are row-major float32:
//
//	B   batch size, T sequence length, C channels (hidden size),
//	N   number of rows, usually B*T, OC output channels of a matmul,
//	NH  query heads, KVH key/value heads (KVH divides NH; query head h
//	    reads key/value head h/(NH/KVH)), HD head size (any even number,
//	    not necessarily C/NH), I the MLP's intermediate size,
//	V   vocabulary size.
//
// Queries, keys and values live in separate buffers: q (B,T,NH,HD), k and v
// (B,T,KVH,HD).
//
// Tensors are flat Buffers; an op states the shape it reads from each
// argument. A Buffer may be longer than an op needs (only the prefix is used),
// never shorter. Views (Backend.View) share memory with their parent, so all
// parameters can live in one allocation and each tensor be a view of it.
//
// Backward ops ACCUMULATE (+=) into every gradient buffer, so the caller
// zeroes gradients once per step and tensors used twice (the residual stream)
// just receive two contributions. Outputs of forward ops are overwritten.
// Optional arguments are documented as "may be nil".
//
// # Errors
//
// Ops do not return errors. Like a CUDA stream, a Backend records the first
// failure (bad shape, buffer too short, token out of range, device fault);
// every later op is then skipped, and Err and Sync report it. Callers check
// Sync (or Err) once per step, not after every kernel. The error is sticky:
// a Backend that failed stays failed, because after a device fault the
// contents of its buffers are unknown.
//
// # Concurrency
//
// A Backend is not safe for concurrent use: one goroutine issues its ops in
// order. Implementations may use many cores or a device internally.

// ErrShape reports an op called with inconsistent sizes or a buffer shorter
// than the shape requires.
var ErrShape = errors.New("compute: bad shape")

// ErrToken reports a token id outside [0, V) passed to an op that indexes by
// token.
var ErrToken = errors.New("compute: token id out of range")

// ErrBuffer reports a buffer from another backend, or one already freed.
var ErrBuffer = errors.New("compute: foreign or freed buffer")

// Buffer is a float32 array in a backend's memory (host RAM for gpu/compute/cpu,
// device memory for gpu/compute/cuda). It is only usable with the Backend that made it.
type Buffer interface {
	// Len is the number of float32 elements.
	Len() int
}

// IntBuffer is an int32 array in a backend's memory, used for token ids.
type IntBuffer interface {
	// Len is the number of int32 elements.
	Len() int
}

// AdamW holds the hyperparameters of one AdamW update (Loshchilov & Hutter;
// the update of PyTorch's torch.optim.AdamW).
type AdamW struct {
	LR          float32 // learning rate
	Beta1       float32 // first-moment decay, e.g. 0.9
	Beta2       float32 // second-moment decay, e.g. 0.95 or 0.999
	Eps         float32 // denominator epsilon, e.g. 1e-8
	WeightDecay float32 // decoupled weight decay; 0 turns it off
	// Step is the 1-based update count, used for bias correction.
	Step int
	// GradScale multiplies every gradient before use (global-norm clipping
	// computes it as min(1, maxNorm/norm)); 0 is treated as 1.
	GradScale float32
}

// Backend is a compute device: memory management plus the kernels of a
// decoder's forward and backward pass and its optimizer. Every op's doc
// comment gives the shapes it reads and writes (see the conventions above).
type Backend interface {
	// Name identifies the implementation, e.g. "cpu" or "cuda:0".
	Name() string

	// ---- memory ----

	// Alloc returns a zeroed float32 buffer of n elements.
	Alloc(n int) (Buffer, error)
	// AllocInt returns a zeroed int32 buffer of n elements.
	AllocInt(n int) (IntBuffer, error)
	// View returns the sub-buffer [off, off+n) of b, sharing its memory.
	View(b Buffer, off, n int) (Buffer, error)
	// Free releases a buffer made by Alloc or AllocInt (not a view). Using a
	// buffer after Free is an error (ErrBuffer) where it can be detected.
	Free(b any)
	// Upload copies src into dst[0:len(src)].
	Upload(dst Buffer, src []float32)
	// UploadInt copies src into dst[0:len(src)].
	UploadInt(dst IntBuffer, src []int32)
	// Download copies src[0:len(dst)] into dst. It waits for pending ops.
	Download(dst []float32, src Buffer)
	// Zero sets all Len() elements of b to 0.
	Zero(b Buffer)
	// Copy copies src[0:n] into dst[0:n].
	Copy(dst, src Buffer, n int)
	// Sync waits for all issued ops and returns the first error any of them
	// hit (sticky; nil if none).
	Sync() error
	// Err returns the first recorded error without waiting.
	Err() error

	// ---- embedding and normalisation ----

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

	// ---- matmul ----

	// MatmulForward: out[n,o] = sum_c inp[n,c]*weight[o,c] + bias[o].
	// out (N,OC), inp (N,C), weight (OC,C) as in a PyTorch Linear, bias (OC)
	// may be nil.
	MatmulForward(out, inp, weight, bias Buffer, N, C, OC int)
	// MatmulBackward accumulates dinp (N,C) += dout @ weight,
	// dweight (OC,C) += dout^T @ inp and dbias (OC) += column sums of dout,
	// for dout (N,OC). Any of dinp, dweight, dbias may be nil to skip it.
	MatmulBackward(dinp, dweight, dbias, dout, inp, weight Buffer, N, C, OC int)

	// ---- attention ----

	// GQAttentionForward is causal attention with grouped query heads.
	// q (B,T,NH,HD), k, v (B,T,KVH,HD); att (B,NH,T,T) receives what the
	// backward needs: gpu/compute/cpu stores the softmax probabilities
	// att[b,h,t,s] = softmax_{s<=t}(q_t·k_s*scale) (zero for s>t), while
	// gpu/compute/cuda (flash attention) stores each row's log-sum-exp in
	// att[0:B*NH*T] (and a copy of out behind it where it fits), so callers
	// pass att to GQAttentionBackward and do not read it. out (B,T,NH,HD) = sum_s softmax*v_s. scale is usually
	// 1/sqrt(HD).
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

	// ---- pointwise ----

	// SwiGLUForward: out[i] = silu(gate[i]) * up[i] for i < N, with
	// silu(x) = x/(1+exp(-x)).
	SwiGLUForward(out, gate, up Buffer, N int)
	// SwiGLUBackward accumulates dgate[i] and dup[i] from dout[i].
	SwiGLUBackward(dgate, dup, dout, gate, up Buffer, N int)
	// ResidualForward: out[i] = a[i] + b[i], for i < N. out may alias a or b.
	ResidualForward(out, a, b Buffer, N int)
	// Scale: x[i] *= s, for i < N.
	Scale(x Buffer, s float32, N int)

	// ---- loss heads ----

	// CrossEntropyForward: probs (N,V) = softmax(logits (N,V)) per row and
	// losses[n] = -log probs[n, targets[n]]. probs may alias logits.
	CrossEntropyForward(losses, probs, logits Buffer, targets IntBuffer, N, V int)
	// CrossEntropyBackward is the fused softmax + cross-entropy backward:
	// dlogits[n,v] += (probs[n,v] - [v==targets[n]]) * dlosses[n].
	// dlosses (N) carries the per-token loss weight (mask / mean scaling).
	CrossEntropyBackward(dlogits, probs, dlosses Buffer, targets IntBuffer, N, V int)
	// LogProbForward is the log-softmax gather used by policy-gradient
	// losses: logp[n] = logits[n,targets[n]] - logsumexp(logits[n,:]).
	// probs (N,V) receives softmax(logits) for the backward; it may alias
	// logits.
	LogProbForward(logp, probs, logits Buffer, targets IntBuffer, N, V int)
	// LogProbBackward: dlogits[n,v] += dlogp[n] * ([v==targets[n]] - probs[n,v]),
	// given the upstream gradient dlogp (N) = d loss / d logp[n].
	LogProbBackward(dlogits, probs, dlogp Buffer, targets IntBuffer, N, V int)

	// ---- optimizer ----

	// AdamWUpdate applies one AdamW step to N parameters in place:
	// g = grads*GradScale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
	// params -= LR * (mhat/(sqrt(vhat)+Eps) + WeightDecay*params),
	// with mhat = m/(1-b1^Step), vhat = v/(1-b2^Step). grads are not changed.
	AdamWUpdate(params, grads, m, v Buffer, N int, h AdamW)
	// SumSquares returns sum_i x[i]^2 over i < N, accumulated in float64
	// where the device allows. The global gradient norm is its square root.
	// It waits for pending ops; on error it returns 0 and records the error.
	SumSquares(x Buffer, N int) float64
}

// ClipScale returns the gradient scale for global-norm clipping: 1 when
// norm <= maxNorm or maxNorm <= 0, else maxNorm/norm. Pass it as
// AdamW.GradScale.
func ClipScale(norm, maxNorm float64) float32 {
	if maxNorm <= 0 || norm <= maxNorm || norm == 0 {
		return 1
	}
	return float32(maxNorm / norm)
}

// ShapeError builds an ErrShape error naming the op and what was wrong.
func ShapeError(op, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", op, ErrShape, fmt.Sprintf(format, args...))
}

// Optional capabilities extend Backend where only some implementations
// can: MatmulTransposer (gpu/compute/cpu), BF16Matmuler (both backends),
// BF16Resident and MixedMatmuler (bf16.go) and the fused kernels of
// fused.go (gpu/compute/cuda). Find one with As, not with a type assertion:
// a wrapper such as Metered has a capability exactly when the backend it
// wraps has it, and hands it out through As instead of being one type per
// combination of capabilities.

// As returns b's implementation of the optional capability C (an interface
// such as MatmulTransposer or BF16Matmuler) and whether b has it: b itself
// when it implements C, else what a wrapper made by this package provides
// for the backend it wraps.
func As[C any](b Backend) (C, bool) {
	if c, ok := b.(C); ok {
		return c, true
	}
	var c C
	w, ok := b.(capabler)
	return c, ok && w.capability(&c)
}

// capabler is a wrapper that provides the capabilities of what it wraps.
type capabler interface {
	// capability sets *target (a pointer to a capability interface) and
	// reports whether the wrapped backend has that capability.
	capability(target any) bool
}

// MatmulTransposer is an optional Backend capability for decoding a few rows
// at a time (generation with a KV cache). A matmul whose weight is stored
// transposed, weightT (C,OC), lets a GEMM read the weight in place for small
// N instead of repacking the whole weight for every token. Callers find it
// with As and fall back to MatmulForward.
type MatmulTransposer interface {
	// Transpose writes dst (cols,rows) = src (rows,cols)ᵀ.
	Transpose(dst, src Buffer, rows, cols int)
	// MatmulForwardT: out[n,o] = sum_c inp[n,c]*weightT[c,o] + bias[o].
	// out (N,OC), inp (N,C), weightT (C,OC), bias (OC) may be nil.
	MatmulForwardT(out, inp, weightT, bias Buffer, N, C, OC int)
}
