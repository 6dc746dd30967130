package cuda

import (
	"math"
	"troupe/gpu/compute"
)

// The Llama/Qwen decoder ops: kernels/decoder.cu (embedding, RMSNorm,
// RoPE, SwiGLU) and kernels/flash_attn.cu (grouped-query attention, see
// flash.go). Shapes are checked here, as in ops.go; token ids and positions live on the device
// and are range-checked by the kernels, which raise a flag word that Sync
// reports (compute.ErrToken for ids, compute.ErrShape for positions, as
// gpu/compute/cpu does).

// EmbedForward implements compute.Backend (kernel embed_forward).
func (b *Backend) EmbedForward(out compute.Buffer, inp compute.IntBuffer, wte compute.Buffer, N, C, V int) {
	const op = "EmbedForward"
	if !b.dims(op, N, C) || !b.dims(op, V, C) {
		return
	}
	o, in, we := b.f(op, "out", out, N*C), b.ints(op, "inp", inp, N), b.f(op, "wte", wte, V*C)
	n := N * C
	b.launch("embed_forward", [3]uint32{uint32(ceilDiv(n, b.cfg.elemBlock)), 1, 1}, b.elemBlock(),
		ptr(o), ptr(in), ptr(we), N, C, V, ptr(b.errFlag))
}

// EmbedBackward implements compute.Backend (kernel embed_backward,
// atomics).
func (b *Backend) EmbedBackward(dwte, dout compute.Buffer, inp compute.IntBuffer, N, C, V int) {
	const op = "EmbedBackward"
	if !b.dims(op, N, C) || !b.dims(op, V, C) {
		return
	}
	dwe, do, in := b.f(op, "dwte", dwte, V*C), b.f(op, "dout", dout, N*C), b.ints(op, "inp", inp, N)
	n := N * C
	b.launch("embed_backward", [3]uint32{uint32(ceilDiv(n, b.cfg.elemBlock)), 1, 1}, b.elemBlock(),
		ptr(dwe), ptr(do), ptr(in), N, C, V, ptr(b.errFlag))
}

// RMSNormForward implements compute.Backend (kernel rmsnorm_forward).
func (b *Backend) RMSNormForward(out, rstd, inp, weight compute.Buffer, N, C int, eps float32) {
	const op = "RMSNormForward"
	if !b.dims(op, N, C) {
		return
	}
	if !(eps >= 0) || math.IsInf(float64(eps), 0) {
		b.fail(compute.ShapeError(op, "eps=%g, must be finite and >= 0", eps))
		return
	}
	o, r := b.f(op, "out", out, N*C), b.f(op, "rstd", rstd, N)
	in, w := b.f(op, "inp", inp, N*C), b.f(op, "weight", weight, C)
	b.launch("rmsnorm_forward", [3]uint32{uint32(N), 1, 1}, b.rowBlock(),
		ptr(o), ptr(r), ptr(in), ptr(w), N, C, eps)
}

// RMSNormBackward implements compute.Backend (kernel rmsnorm_backward;
// dweight may be nil).
func (b *Backend) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd compute.Buffer, N, C int) {
	const op = "RMSNormBackward"
	if !b.dims(op, N, C) {
		return
	}
	di, dw := b.f(op, "dinp", dinp, N*C), b.opt(op, "dweight", dweight, C)
	do, in := b.f(op, "dout", dout, N*C), b.f(op, "inp", inp, N*C)
	w, r := b.f(op, "weight", weight, C), b.f(op, "rstd", rstd, N)
	b.launch("rmsnorm_backward", [3]uint32{uint32(N), 1, 1}, b.rowBlock(),
		ptr(di), ptr(dw), ptr(do), ptr(in), ptr(w), ptr(r), N, C)
}

// ropeArgs checks the rotary ops' arguments and returns the kernel
// arguments (nil after an error). Positions are checked against maxPos by
// the kernel.
func (b *Backend) ropeArgs(op string, x compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int) []any {
	if !b.dims(op, N, H, HD) || !b.dims(op, maxPos, HD) {
		return nil
	}
	if HD%2 != 0 {
		b.fail(compute.ShapeError(op, "HD=%d is odd", HD))
		return nil
	}
	xd, p := b.f(op, "x", x, N*H*HD), b.ints(op, "pos", pos, N)
	c, s := b.f(op, "cos", cos, maxPos*HD/2), b.f(op, "sin", sin, maxPos*HD/2)
	if b.err != nil {
		return nil
	}
	return []any{ptr(xd), ptr(p), ptr(c), ptr(s), N, H, HD, maxPos, ptr(b.errFlag)}
}

// RopeForward implements compute.Backend (kernel rope_forward).
func (b *Backend) RopeForward(x compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int) {
	if a := b.ropeArgs("RopeForward", x, pos, cos, sin, N, H, HD, maxPos); a != nil {
		b.launch("rope_forward", b.elemGrid(N*H*HD/2), b.elemBlock(), a...)
	}
}

// RopeBackward implements compute.Backend (kernel rope_backward).
func (b *Backend) RopeBackward(dx compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int) {
	if a := b.ropeArgs("RopeBackward", dx, pos, cos, sin, N, H, HD, maxPos); a != nil {
		b.launch("rope_backward", b.elemGrid(N*H*HD/2), b.elemBlock(), a...)
	}
}

// gqaDims checks the sizes shared by the grouped-query attention ops; T is
// the sequence length (maxT for the decode), rows the grid's y extent.
func (b *Backend) gqaDims(op string, B, T, NH, KVH, HD int, scale float32) bool {
	if !b.dims(op, B, T, NH, HD) || !b.dims(op, B, T, 2, KVH, HD) {
		return false
	}
	if NH%KVH != 0 {
		b.fail(compute.ShapeError(op, "NH=%d not divisible by KVH=%d", NH, KVH))
		return false
	}
	if s := float64(scale); math.IsNaN(s) || math.IsInf(s, 0) {
		b.fail(compute.ShapeError(op, "scale=%g", scale))
		return false
	}
	if HD > faMaxHD {
		b.fail(compute.ShapeError(op, "head size %d exceeds the kernels' %d", HD, faMaxHD))
		return false
	}
	if B*NH > 65535 {
		b.fail(compute.ShapeError(op, "B*NH=%d exceeds the attention grid's 65535", B*NH))
		return false
	}
	return true
}

// GQAttentionForward implements compute.Backend with flash attention
// (kernel flash_attn_forward): att receives each row's log-sum-exp (and,
// where it fits, a copy of out), not the probabilities, and is read only
// by GQAttentionBackward.
func (b *Backend) GQAttentionForward(out, att, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	const op = "GQAttentionForward"
	if !b.gqaDims(op, B, T, NH, KVH, HD, scale) || !b.dims(op, B, NH, T, T) {
		return
	}
	o, a := b.f(op, "out", out, B*T*NH*HD), b.f(op, "att", att, B*NH*T*T)
	qd, kd, vd := b.f(op, "q", q, B*T*NH*HD), b.f(op, "k", k, B*T*KVH*HD), b.f(op, "v", v, B*T*KVH*HD)
	if b.err != nil {
		return
	}
	b.attForward(o, a, qd, kd, vd, B, T, NH, KVH, HD, scale) // a receives the log-sum-exp (flash.go)
}

// GQAttentionBackward implements compute.Backend with flash attention
// (kernels flash_attn_backward_dq then flash_attn_backward_dkv), from what
// GQAttentionForward left in att.
func (b *Backend) GQAttentionBackward(dq, dk, dv, dout, q, k, v, att compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	const op = "GQAttentionBackward"
	if !b.gqaDims(op, B, T, NH, KVH, HD, scale) || !b.dims(op, B, NH, T, T) {
		return
	}
	dqd, dkd, dvd := b.f(op, "dq", dq, B*T*NH*HD), b.f(op, "dk", dk, B*T*KVH*HD), b.f(op, "dv", dv, B*T*KVH*HD)
	do, a := b.f(op, "dout", dout, B*T*NH*HD), b.f(op, "att", att, B*NH*T*T)
	qd, kd, vd := b.f(op, "q", q, B*T*NH*HD), b.f(op, "k", k, B*T*KVH*HD), b.f(op, "v", v, B*T*KVH*HD)
	if b.err != nil {
		return
	}
	b.attBackward(dqd, dkd, dvd, do, qd, kd, vd, a, B, T, NH, KVH, HD, scale)
}

// GQAttentionDecode implements compute.Backend with a split-KV flash
// decode (kernels flash_decode_store, flash_decode_partial,
// flash_decode_combine). Positions are checked against maxT by the kernels.
func (b *Backend) GQAttentionDecode(out, cache, q, k, v compute.Buffer, pos compute.IntBuffer, B, maxT, NH, KVH, HD int, scale float32) {
	const op = "GQAttentionDecode"
	if !b.gqaDims(op, B, maxT, NH, KVH, HD, scale) {
		return
	}
	o, c := b.f(op, "out", out, B*NH*HD), b.f(op, "cache", cache, B*maxT*2*KVH*HD)
	qd, kd, vd := b.f(op, "q", q, B*NH*HD), b.f(op, "k", k, B*KVH*HD), b.f(op, "v", v, B*KVH*HD)
	p := b.ints(op, "pos", pos, B)
	if b.err != nil {
		return
	}
	b.flashDecode(o, c, qd, kd, vd, p, B, maxT, NH, KVH, HD, scale)
}

// SwiGLUForward implements compute.Backend (kernel swiglu_forward).
func (b *Backend) SwiGLUForward(out, gate, up compute.Buffer, N int) {
	const op = "SwiGLUForward"
	if !b.dims(op, N) {
		return
	}
	o, g, u := b.f(op, "out", out, N), b.f(op, "gate", gate, N), b.f(op, "up", up, N)
	b.launch("swiglu_forward", b.elemGrid(N), b.elemBlock(), ptr(o), ptr(g), ptr(u), N)
}

// SwiGLUBackward implements compute.Backend (kernel swiglu_backward).
func (b *Backend) SwiGLUBackward(dgate, dup, dout, gate, up compute.Buffer, N int) {
	const op = "SwiGLUBackward"
	if !b.dims(op, N) {
		return
	}
	dg, du := b.f(op, "dgate", dgate, N), b.f(op, "dup", dup, N)
	do, g, u := b.f(op, "dout", dout, N), b.f(op, "gate", gate, N), b.f(op, "up", up, N)
	b.launch("swiglu_backward", b.elemGrid(N), b.elemBlock(), ptr(dg), ptr(du), ptr(do), ptr(g), ptr(u), N)
}
