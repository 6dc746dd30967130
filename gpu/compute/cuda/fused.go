package cuda

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"troupe/gpu/compute"
)

// The fused kernels (kernels/fused.cu) behind compute's optional
// capabilities (gpu/compute/fused.go), and FlashAttender over the flash
// attention kernels (flash.go). Shapes are checked as for the ops they fuse.

var (
	_ compute.FlashAttender  = (*Backend)(nil)
	_ compute.ResidualNormer = (*Backend)(nil)
	_ compute.QKRoper        = (*Backend)(nil)
	_ compute.LSELossHeads   = (*Backend)(nil)
	_ compute.MultiAdamW     = (*Backend)(nil)
	_ compute.PackedSwiGLU   = (*Backend)(nil)
)

// FlashAttentionForward implements compute.FlashAttender (kernel
// flash_attn_forward): lse (B,NH,T) instead of GQAttentionForward's att.
func (b *Backend) FlashAttentionForward(out, lse, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	const op = "FlashAttentionForward"
	if !b.gqaDims(op, B, T, NH, KVH, HD, scale) {
		return
	}
	o, l := b.f(op, "out", out, B*T*NH*HD), b.f(op, "lse", lse, B*NH*T)
	qd, kd, vd := b.f(op, "q", q, B*T*NH*HD), b.f(op, "k", k, B*T*KVH*HD), b.f(op, "v", v, B*T*KVH*HD)
	if b.err != nil {
		return
	}
	b.flashForward(o, l, qd, kd, vd, B, T, NH, KVH, HD, scale)
}

// FlashAttentionBackward implements compute.FlashAttender (kernels
// flash_attn_backward_dot, _dq, _dkv): D = rowsum(dO∘O) from out.
func (b *Backend) FlashAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	const op = "FlashAttentionBackward"
	if !b.gqaDims(op, B, T, NH, KVH, HD, scale) {
		return
	}
	dqd, dkd, dvd := b.f(op, "dq", dq, B*T*NH*HD), b.f(op, "dk", dk, B*T*KVH*HD), b.f(op, "dv", dv, B*T*KVH*HD)
	do, o, l := b.f(op, "dout", dout, B*T*NH*HD), b.f(op, "out", out, B*T*NH*HD), b.f(op, "lse", lse, B*NH*T)
	qd, kd, vd := b.f(op, "q", q, B*T*NH*HD), b.f(op, "k", k, B*T*KVH*HD), b.f(op, "v", v, B*T*KVH*HD)
	if b.err != nil {
		return
	}
	b.flashBackward(dqd, dkd, dvd, do, qd, kd, vd, o, l, B, T, NH, KVH, HD, scale)
}

// ResidualRMSNormForward implements compute.ResidualNormer (kernel
// residual_rmsnorm_forward).
func (b *Backend) ResidualRMSNormForward(res, out, rstd, x, y, weight compute.Buffer, N, C int, eps float32) {
	const op = "ResidualRMSNormForward"
	if !b.dims(op, N, C) {
		return
	}
	if !(eps >= 0) || math.IsInf(float64(eps), 0) {
		b.fail(compute.ShapeError(op, "eps=%g, must be finite and >= 0", eps))
		return
	}
	rs, o, r := b.f(op, "res", res, N*C), b.f(op, "out", out, N*C), b.f(op, "rstd", rstd, N)
	xs, ys, w := b.f(op, "a", x, N*C), b.f(op, "b", y, N*C), b.f(op, "weight", weight, C)
	b.launch("residual_rmsnorm_forward", [3]uint32{uint32(N), 1, 1}, b.rowBlock(),
		ptr(rs), ptr(o), ptr(r), ptr(xs), ptr(ys), ptr(w), N, C, eps)
}

// ropeQK checks and launches rope_qk (sign -1: the backward).
func (b *Backend) ropeQK(op string, q, k compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, NH, KVH, HD, maxPos int, sign float32) {
	if !b.dims(op, N, NH+KVH, HD) || !b.dims(op, maxPos, HD) || !b.dims(op, KVH) {
		return
	}
	if HD%2 != 0 {
		b.fail(compute.ShapeError(op, "HD=%d is odd", HD))
		return
	}
	qd, kd, p := b.f(op, "q", q, N*NH*HD), b.f(op, "k", k, N*KVH*HD), b.ints(op, "pos", pos, N)
	c, s := b.f(op, "cos", cos, maxPos*HD/2), b.f(op, "sin", sin, maxPos*HD/2)
	b.launch("rope_qk", b.elemGrid(N*(NH+KVH)*HD/2), b.elemBlock(),
		ptr(qd), ptr(kd), ptr(p), ptr(c), ptr(s), N, NH, KVH, HD, maxPos, sign, ptr(b.errFlag))
}

// RopeQKForward implements compute.QKRoper (kernel rope_qk).
func (b *Backend) RopeQKForward(q, k compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, NH, KVH, HD, maxPos int) {
	b.ropeQK("RopeQKForward", q, k, pos, cos, sin, N, NH, KVH, HD, maxPos, 1)
}

// RopeQKBackward implements compute.QKRoper (kernel rope_qk, inverse
// rotation).
func (b *Backend) RopeQKBackward(dq, dk compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, NH, KVH, HD, maxPos int) {
	b.ropeQK("RopeQKBackward", dq, dk, pos, cos, sin, N, NH, KVH, HD, maxPos, -1)
}

// HeadNormRopeForward implements compute.QKRoper (kernel
// head_norm_rope_forward).
func (b *Backend) HeadNormRopeForward(out, rstd, inp, weight compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int, eps float32) {
	const op = "HeadNormRopeForward"
	if !b.dims(op, N, H, HD) || !b.dims(op, maxPos, HD) {
		return
	}
	if HD%2 != 0 {
		b.fail(compute.ShapeError(op, "HD=%d is odd", HD))
		return
	}
	if !(eps >= 0) || math.IsInf(float64(eps), 0) {
		b.fail(compute.ShapeError(op, "eps=%g, must be finite and >= 0", eps))
		return
	}
	o, r, in := b.f(op, "out", out, N*H*HD), b.f(op, "rstd", rstd, N*H), b.f(op, "inp", inp, N*H*HD)
	w, p := b.f(op, "weight", weight, HD), b.ints(op, "pos", pos, N)
	c, s := b.f(op, "cos", cos, maxPos*HD/2), b.f(op, "sin", sin, maxPos*HD/2)
	b.launch("head_norm_rope_forward", [3]uint32{uint32(ceilDiv(N*H, 4)), 1, 1}, [3]uint32{128, 1, 1},
		ptr(o), ptr(r), ptr(in), ptr(w), ptr(p), ptr(c), ptr(s), N, H, HD, maxPos, eps, ptr(b.errFlag))
}

// lseForward checks and launches lse_loss_forward (sign +1: cross-entropy,
// -1: log-prob).
func (b *Backend) lseForward(op string, out, lse, logits compute.Buffer, targets compute.IntBuffer, N, V int, sign float32) {
	if !b.dims(op, N, V) {
		return
	}
	o, l, x, t := b.f(op, "out", out, N), b.f(op, "lse", lse, N), b.f(op, "logits", logits, N*V), b.ints(op, "targets", targets, N)
	b.launch("lse_loss_forward", [3]uint32{uint32(N), 1, 1}, b.rowBlock(),
		ptr(o), ptr(l), ptr(x), ptr(t), N, V, sign, ptr(b.errFlag))
}

// lseBackward checks and launches lse_loss_backward (sign +1:
// cross-entropy, -1: log-prob).
func (b *Backend) lseBackward(op string, dlogits, logits, lse, dl compute.Buffer, targets compute.IntBuffer, N, V int, sign float32) {
	if !b.dims(op, N, V) {
		return
	}
	d, x := b.f(op, "dlogits", dlogits, N*V), b.f(op, "logits", logits, N*V)
	l, g, t := b.f(op, "lse", lse, N), b.f(op, "dl", dl, N), b.ints(op, "targets", targets, N)
	b.launch("lse_loss_backward", b.elemGrid(N*V), b.elemBlock(),
		ptr(d), ptr(x), ptr(l), ptr(g), ptr(t), N, V, sign, ptr(b.errFlag))
}

// CrossEntropyLSEForward implements compute.LSELossHeads (kernel
// lse_loss_forward).
func (b *Backend) CrossEntropyLSEForward(losses, lse, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	b.lseForward("CrossEntropyLSEForward", losses, lse, logits, targets, N, V, 1)
}

// CrossEntropyLSEBackward implements compute.LSELossHeads (kernel
// lse_loss_backward).
func (b *Backend) CrossEntropyLSEBackward(dlogits, logits, lse, dlosses compute.Buffer, targets compute.IntBuffer, N, V int) {
	b.lseBackward("CrossEntropyLSEBackward", dlogits, logits, lse, dlosses, targets, N, V, 1)
}

// LogProbLSEForward implements compute.LSELossHeads (kernel
// lse_loss_forward).
func (b *Backend) LogProbLSEForward(logp, lse, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	b.lseForward("LogProbLSEForward", logp, lse, logits, targets, N, V, -1)
}

// LogProbLSEBackward implements compute.LSELossHeads (kernel
// lse_loss_backward).
func (b *Backend) LogProbLSEBackward(dlogits, logits, lse, dlogp compute.Buffer, targets compute.IntBuffer, N, V int) {
	b.lseBackward("LogProbLSEBackward", dlogits, logits, lse, dlogp, targets, N, V, -1)
}

// adamEntryWords is the size of kernels/fused.cu's AdamWEntry in 64-bit
// words: p, g, m, v, start, n, decay.
const adamEntryWords = 7

// AdamWUpdateMulti implements compute.MultiAdamW (kernel adamw_multi): the
// tensors' pointers and sizes go to the device as a table (56 bytes per
// tensor, in a buffer kept between calls and uploaded only when it differs
// from the call before), then one grid-stride launch
// covers the concatenation of all tensors (64-bit indices: it may exceed
// 2³¹ elements, each tensor may not).
func (b *Backend) AdamWUpdateMulti(ts []compute.AdamWTensor, h compute.AdamW) {
	const op = "AdamWUpdateMulti"
	if b.err != nil {
		return
	}
	hp := b.adamArgs(op, h)
	if hp == nil {
		return
	}
	table := make([]uint64, 0, adamEntryWords*len(ts))
	total := 0
	for i, t := range ts {
		if t.N == 0 {
			continue
		}
		if t.N < 0 || t.N > maxElems {
			b.fail(compute.ShapeError(op, "tensor %d: N=%d", i, t.N))
			return
		}
		name := func(s string) string { return fmt.Sprintf("tensor %d %s", i, s) }
		p, g := b.f(op, name("params"), t.Params, t.N), b.f(op, name("grads"), t.Grads, t.N)
		m, v := b.f(op, name("m"), t.M, t.N), b.f(op, name("v"), t.V, t.N)
		if b.err != nil {
			return
		}
		decay := uint64(1)
		if t.NoDecay {
			decay = 0
		}
		table = append(table, uint64(p), uint64(g), uint64(m), uint64(v), uint64(total), uint64(t.N), decay)
		total += t.N
	}
	if total == 0 {
		return
	}
	d := b.ensureAdamTable(len(table))
	if b.err != nil {
		return
	}
	// The same tensors step after step: the table on the device is already
	// this one, and an update moves no bytes but the kernel's arguments.
	if !slices.Equal(b.adamLast, table) {
		// A synchronous copy on the default stream: it waits for the
		// previous adamw_multi that read the table.
		if err := b.dev.HtoD(d, unsafe.Pointer(&table[0]), 8*len(table)); err != nil {
			b.adamLast = b.adamLast[:0]
			b.fail(fmt.Errorf("%s: %w: %v", op, ErrDevice, err))
			return
		}
		b.adamLast = append(b.adamLast[:0], table...)
	}
	b.launch("adamw_multi", b.elemGrid(total), b.elemBlock(),
		append([]any{ptr(d), len(table) / adamEntryWords, int64(total)}, hp...)...)
}

// ensureAdamTable grows the device table of adamw_multi to words 64-bit
// words.
func (b *Backend) ensureAdamTable(words int) uintptr {
	if b.adamTableN >= words {
		return b.adamTable
	}
	if b.adamTable != 0 {
		if err := b.dev.Sync(); err != nil {
			b.fail(fmt.Errorf("cuda: sync: %w", err))
			return 0
		}
		_ = b.dev.Free(b.adamTable)
		b.adamTable, b.adamTableN = 0, 0
		b.adamLast = b.adamLast[:0]
	}
	p, err := b.dev.Alloc(8 * words)
	if err != nil {
		b.fail(fmt.Errorf("cuda: AdamW table of %d words: %w", words, err))
		return 0
	}
	b.adamTable, b.adamTableN = p, words
	return p
}

// SwiGLUPackedForward implements compute.PackedSwiGLU (kernel
// swiglu_packed_forward).
func (b *Backend) SwiGLUPackedForward(out, gu compute.Buffer, N, I int) {
	const op = "SwiGLUPackedForward"
	if !b.dims(op, N, 2*I) {
		return
	}
	o, g := b.f(op, "out", out, N*I), b.f(op, "gu", gu, 2*N*I)
	b.launch("swiglu_packed_forward", b.elemGrid(N*I), b.elemBlock(), ptr(o), ptr(g), N, I)
}

// SwiGLUPackedBackward implements compute.PackedSwiGLU (kernel
// swiglu_packed_backward).
func (b *Backend) SwiGLUPackedBackward(dgu, dout, gu compute.Buffer, N, I int) {
	const op = "SwiGLUPackedBackward"
	if !b.dims(op, N, 2*I) {
		return
	}
	d, do, g := b.f(op, "dgu", dgu, 2*N*I), b.f(op, "dout", dout, N*I), b.f(op, "gu", gu, 2*N*I)
	b.launch("swiglu_packed_backward", b.elemGrid(N*I), b.elemBlock(), ptr(d), ptr(do), ptr(g), N, I)
}
