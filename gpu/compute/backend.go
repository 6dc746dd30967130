package compute

import (
	"errors"
	"fmt"
)

// This file defines the compute Backend: device buffers plus the forward and
// backward kernels a GPT needs. gpu/compute/cpu implements it with Go kernels and
// gpu/compute/cuda with CUDA kernels; algorithms/policy builds its model on it.
//
// # Conventions (shared by every implementation)
//
// Layouts follow llm.c (train_gpt2.c), all row-major float32:
//
//	B   batch size, T sequence length, C channels (model width),
//	NH  attention heads, HS = C/NH head size, V vocabulary size,
//	N   number of rows, usually B*T, OC output channels of a matmul.
//
// Tensors are flat Buffers; an op states the shape it reads from each
// argument. A Buffer may be longer than an op needs (only the prefix is used),
// never shorter. Views (Backend.View) share memory with their parent, so all
// parameters can live in one allocation and each tensor be a view of it.
//
// Backward ops ACCUMULATE (+=) into every gradient buffer, as in llm.c, so the
// caller zeroes gradients once per step and tensors used twice (the residual
// stream) just receive two contributions. Outputs of forward ops are
// overwritten. Optional arguments are documented as "may be nil".
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

// Backend is a compute device: memory management plus the kernels of a GPT
// forward and backward pass and its optimizer. Every op's doc comment gives
// the shapes it reads and writes (see the conventions above).
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

	// ---- embedding ----

	// EncoderForward: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:].
	// out (B,T,C); inp (B,T) token ids in [0,V); wte (V,C); wpe (>=T,C).
	// To embed a token at absolute position p, pass a View of wpe at p*C.
	EncoderForward(out Buffer, inp IntBuffer, wte, wpe Buffer, B, T, C, V int)
	// EncoderBackward: dwte[inp[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:].
	// Shapes as EncoderForward. dwpe may be nil.
	EncoderBackward(dwte, dwpe, dout Buffer, inp IntBuffer, B, T, C, V int)

	// ---- layernorm ----

	// LayerNormForward normalises each of N rows of inp (N,C) with eps 1e-5:
	// out = (x-mean)*rstd*weight + bias. Saves mean (N) and rstd (N) for the
	// backward. weight, bias (C).
	LayerNormForward(out, mean, rstd, inp, weight, bias Buffer, N, C int)
	// LayerNormBackward accumulates dinp (N,C), dweight (C), dbias (C) from
	// dout (N,C), using inp, weight, mean, rstd saved by the forward.
	LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd Buffer, N, C int)

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

	// AttentionForward is causal multi-head self-attention.
	// qkv (B,T,3C) holds per token [q | k | v], each split into NH heads of
	// HS = C/NH channels. att (B,NH,T,T) receives the softmax probabilities
	// att[b,h,t,s] = softmax_s<=t(q_t·k_s/sqrt(HS)) (zero for s>t), kept for
	// the backward. out (B,T,C) gets sum_s att[b,h,t,s]*v_s per head.
	AttentionForward(out, att, qkv Buffer, B, T, C, NH int)
	// AttentionBackward accumulates dqkv (B,T,3C) from dout (B,T,C), using
	// qkv and att saved by the forward. Scratch space is internal.
	AttentionBackward(dqkv, dout, qkv, att Buffer, B, T, C, NH int)
	// AttentionDecode is one incremental decoding step with a KV cache, for
	// generation. qkv (B,3C) holds the new token's q|k|v at absolute position
	// pos (the same position for every batch row). cache (B,maxT,2C) holds
	// per position [k | v]; the op first writes the new k, v at pos, then sets
	// out (B,C) to causal attention of q over cache positions 0..pos.
	// Requires 0 <= pos < maxT.
	AttentionDecode(out, cache, qkv Buffer, B, maxT, pos, C, NH int)

	// ---- pointwise ----

	// GeluForward: out[i] = gelu(inp[i]), tanh approximation
	// 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))), for i < N.
	GeluForward(out, inp Buffer, N int)
	// GeluBackward: dinp[i] += gelu'(inp[i]) * dout[i], for i < N.
	GeluBackward(dinp, inp, dout Buffer, N int)
	// ResidualForward: out[i] = a[i] + b[i], for i < N. out may alias a or b.
	ResidualForward(out, a, b Buffer, N int)
	// ResidualBackward: da[i] += dout[i]; db[i] += dout[i], for i < N.
	ResidualBackward(da, db, dout Buffer, N int)
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

// MatmulTransposer is an optional Backend extension for decoding a few rows
// at a time (generation with a KV cache). A matmul whose weight is stored
// transposed, weightT (C,OC), lets a GEMM read the weight in place for small
// N instead of repacking the whole weight for every token. Callers test for
// it with a type assertion and fall back to MatmulForward.
type MatmulTransposer interface {
	// Transpose writes dst (cols,rows) = src (rows,cols)ᵀ.
	Transpose(dst, src Buffer, rows, cols int)
	// MatmulForwardT: out[n,o] = sum_c inp[n,c]*weightT[c,o] + bias[o].
	// out (N,OC), inp (N,C), weightT (C,OC), bias (OC) may be nil.
	MatmulForwardT(out, inp, weightT, bias Buffer, N, C, OC int)
}
