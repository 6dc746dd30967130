package cpu

import (
	"fmt"
	"math"
	"troupe/gpu/compute"
)

// The Llama/Qwen decoder ops (RMSNorm, RoPE, grouped-query attention,
// SwiGLU, the embedding): argument checks here, reference kernels in
// ref_decoder.go, fast kernels in fast_decoder.go.

var _ compute.Backend = (*Backend)(nil)

// positions resolves a position buffer of need elements, each in [0,limit).
// A position out of range is a shape error (the cache or the rotary tables
// are too short), unlike a token id out of range.
func (b *Backend) positions(op, name string, x compute.IntBuffer, need, limit int) []int32 {
	if b.err != nil {
		return nil
	}
	p, ok := x.(*IntBuf)
	if !ok || p == nil || p.owner != b || p.d == nil {
		b.fail(fmt.Errorf("%s: %s: %w", op, name, compute.ErrBuffer))
		return nil
	}
	if len(p.d) < need {
		b.fail(compute.ShapeError(op, "%s has %d elements, needs %d", name, len(p.d), need))
		return nil
	}
	d := p.d[:need:need]
	for i, t := range d {
		if t < 0 || int(t) >= limit {
			b.fail(compute.ShapeError(op, "%s[%d]=%d not in [0,%d)", name, i, t, limit))
			return nil
		}
	}
	return d
}

// grad resolves a required gradient buffer that the op accumulates into;
// fresh as for fz.
func (b *Backend) grad(op, name string, x compute.Buffer, need int) (d []float32, fresh bool) {
	if x == nil {
		b.fail(fmt.Errorf("%s: %s: %w", op, name, compute.ErrBuffer))
		return nil, false
	}
	d, fresh = b.fz(op, name, x, need)
	if d == nil && b.err == nil {
		b.fail(fmt.Errorf("%s: %s: %w", op, name, compute.ErrBuffer))
	}
	return d, fresh
}

// EmbedForward implements compute.Backend.
func (b *Backend) EmbedForward(out compute.Buffer, inp compute.IntBuffer, wte compute.Buffer, N, C, V int) {
	const op = "EmbedForward"
	if !b.dims(op, N, C, V) || !b.dims(op, V, C) {
		return
	}
	o, in, we := b.f(op, "out", out, N*C), b.ints(op, "inp", inp, N, V), b.f(op, "wte", wte, V*C)
	if b.err != nil {
		return
	}
	if b.ref {
		refEmbedForward(o, in, we, N, C)
		return
	}
	b.embedForward(o, in, we, N, C)
}

// EmbedBackward implements compute.Backend.
func (b *Backend) EmbedBackward(dwte, dout compute.Buffer, inp compute.IntBuffer, N, C, V int) {
	const op = "EmbedBackward"
	if !b.dims(op, N, C, V) || !b.dims(op, V, C) {
		return
	}
	// a scatter-add cannot overwrite, so a pending Zero is applied (f)
	dwe := b.f(op, "dwte", dwte, V*C)
	do, in := b.f(op, "dout", dout, N*C), b.ints(op, "inp", inp, N, V)
	if b.err != nil {
		return
	}
	if b.ref {
		refEmbedBackward(dwe, do, in, N, C)
		return
	}
	b.embedBackward(dwe, do, in, N, C)
}

// RMSNormForward implements compute.Backend.
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
	if b.err != nil {
		return
	}
	if b.ref {
		refRMSNormForward(o, r, in, w, N, C, eps)
		return
	}
	b.rmsNormForward(o, r, in, w, N, C, eps)
}

// RMSNormBackward implements compute.Backend.
func (b *Backend) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd compute.Buffer, N, C int) {
	const op = "RMSNormBackward"
	if !b.dims(op, N, C) {
		return
	}
	di, fresh := b.grad(op, "dinp", dinp, N*C)
	dw, freshW := b.fz(op, "dweight", dweight, C)
	do, in := b.f(op, "dout", dout, N*C), b.f(op, "inp", inp, N*C)
	w, r := b.f(op, "weight", weight, C), b.f(op, "rstd", rstd, N)
	if b.err != nil {
		return
	}
	if b.ref {
		refRMSNormBackward(di, dw, do, in, w, r, N, C)
		return
	}
	b.rmsNormBackward(di, dw, do, in, w, r, N, C, fresh, freshW)
}

// ropeArgs checks the arguments shared by the rotary ops.
func (b *Backend) ropeArgs(op string, x compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int) (xd []float32, p []int32, c, s []float32) {
	if !b.dims(op, N, H, HD) || !b.dims(op, maxPos, HD) {
		return
	}
	if HD%2 != 0 {
		b.fail(compute.ShapeError(op, "HD=%d is odd", HD))
		return
	}
	xd, p = b.f(op, "x", x, N*H*HD), b.positions(op, "pos", pos, N, maxPos)
	c, s = b.f(op, "cos", cos, maxPos*HD/2), b.f(op, "sin", sin, maxPos*HD/2)
	return
}

// RopeForward implements compute.Backend.
func (b *Backend) RopeForward(x compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int) {
	xd, p, c, s := b.ropeArgs("RopeForward", x, pos, cos, sin, N, H, HD, maxPos)
	if b.err != nil {
		return
	}
	if b.ref {
		refRope(xd, p, c, s, N, H, HD, 1)
		return
	}
	b.rope(xd, p, c, s, N, H, HD, 1)
}

// RopeBackward implements compute.Backend.
func (b *Backend) RopeBackward(dx compute.Buffer, pos compute.IntBuffer, cos, sin compute.Buffer, N, H, HD, maxPos int) {
	xd, p, c, s := b.ropeArgs("RopeBackward", dx, pos, cos, sin, N, H, HD, maxPos)
	if b.err != nil {
		return
	}
	if b.ref {
		refRope(xd, p, c, s, N, H, HD, -1)
		return
	}
	b.rope(xd, p, c, s, N, H, HD, -1)
}

// gqaDims checks the sizes shared by the grouped-query attention ops; T is
// the sequence length (maxT for the decode).
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
	return true
}

// GQAttentionForward implements compute.Backend.
func (b *Backend) GQAttentionForward(out, att, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	o, a, qd, kd, vd, ok := b.gqaForwardArgs("GQAttentionForward", out, att, q, k, v, B, T, NH, KVH, HD, scale)
	if !ok {
		return
	}
	if b.ref {
		refGQAttentionForward(o, a, qd, kd, vd, B, T, NH, KVH, HD, scale)
		return
	}
	b.gqAttentionForward(o, a, qd, kd, vd, B, T, NH, KVH, HD, scale)
}

// gqaForwardArgs checks and resolves the attention forward's arguments.
func (b *Backend) gqaForwardArgs(op string, out, att, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) (o, a, qd, kd, vd []float32, ok bool) {
	if !b.gqaDims(op, B, T, NH, KVH, HD, scale) || !b.dims(op, B, NH, T, T) {
		return
	}
	o, a = b.f(op, "out", out, B*T*NH*HD), b.f(op, "att", att, B*NH*T*T)
	qd, kd, vd = b.f(op, "q", q, B*T*NH*HD), b.f(op, "k", k, B*T*KVH*HD), b.f(op, "v", v, B*T*KVH*HD)
	return o, a, qd, kd, vd, b.err == nil
}

// GQAttentionForwardBF16 implements compute.BF16Matmuler: q, k and v are
// rounded to BF16 once (bfQ, bfK, bfV), the probabilities as gemm packs them
// (VDPBF16PS; elsewhere gemm widens and only q, k, v are rounded). Below
// gemmMinT, and in the reference backend, it is the float32 reference on
// rounded q, k and v: the probabilities stay float32 there.
func (b *Backend) GQAttentionForwardBF16(out, att, q, k, v compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	o, a, qd, kd, vd, ok := b.gqaForwardArgs("GQAttentionForwardBF16", out, att, q, k, v, B, T, NH, KVH, HD, scale)
	if !ok {
		return
	}
	if b.ref || T < gemmMinT {
		refGQAttentionForward(o, a, roundedBF16(qd), roundedBF16(kd), roundedBF16(vd), B, T, NH, KVH, HD, scale)
		return
	}
	n, nq := B*T*KVH*HD, B*T*NH*HD
	b.bfK, b.bfV, b.bfQ = growU16(b.bfK, n), growU16(b.bfV, n), growU16(b.bfQ, nq)
	b.roundBF16(b.bfQ[:nq], qd)
	b.roundBF16(b.bfK[:n], kd)
	b.roundBF16(b.bfV[:n], vd)
	_, pairs := blockPairs(T)
	b.dec = decArgs{out: o, att: a, B: B, T: T, NH: NH, KVH: KVH, HD: HD,
		pairs: pairs, scale: scale, qh: b.bfQ[:nq], kh: b.bfK[:n], vh: b.bfV[:n]}
	j := b.newJob(kGQAttentionForward)
	j.d = &b.dec
	parallelFor(B*NH*pairs, 1, j)
}

// GQAttentionBackward implements compute.Backend.
func (b *Backend) GQAttentionBackward(dq, dk, dv, dout, q, k, v, att compute.Buffer, B, T, NH, KVH, HD int, scale float32) {
	const op = "GQAttentionBackward"
	if !b.gqaDims(op, B, T, NH, KVH, HD, scale) || !b.dims(op, B, NH, T, T) {
		return
	}
	var fresh [3]bool
	dqd, fq := b.grad(op, "dq", dq, B*T*NH*HD)
	dkd, fk := b.grad(op, "dk", dk, B*T*KVH*HD)
	dvd, fv := b.grad(op, "dv", dv, B*T*KVH*HD)
	fresh = [3]bool{fq, fk, fv}
	do, a := b.f(op, "dout", dout, B*T*NH*HD), b.f(op, "att", att, B*NH*T*T)
	qd, kd, vd := b.f(op, "q", q, B*T*NH*HD), b.f(op, "k", k, B*T*KVH*HD), b.f(op, "v", v, B*T*KVH*HD)
	if b.err != nil {
		return
	}
	if b.ref {
		refGQAttentionBackward(dqd, dkd, dvd, do, qd, kd, vd, a, B, T, NH, KVH, HD, scale)
		return
	}
	b.gqAttentionBackward(dqd, dkd, dvd, do, qd, kd, vd, a, B, T, NH, KVH, HD, scale, fresh)
}

// GQAttentionDecode implements compute.Backend.
func (b *Backend) GQAttentionDecode(out, cache, q, k, v compute.Buffer, pos compute.IntBuffer, B, maxT, NH, KVH, HD int, scale float32) {
	const op = "GQAttentionDecode"
	if !b.gqaDims(op, B, maxT, NH, KVH, HD, scale) {
		return
	}
	o, c := b.f(op, "out", out, B*NH*HD), b.f(op, "cache", cache, B*maxT*2*KVH*HD)
	qd, kd, vd := b.f(op, "q", q, B*NH*HD), b.f(op, "k", k, B*KVH*HD), b.f(op, "v", v, B*KVH*HD)
	p := b.positions(op, "pos", pos, B, maxT)
	if b.err != nil {
		return
	}
	if b.ref {
		refGQAttentionDecode(o, c, qd, kd, vd, p, B, maxT, NH, KVH, HD, scale)
		return
	}
	b.gqAttentionDecode(o, c, qd, kd, vd, p, B, maxT, NH, KVH, HD, scale)
}

// SwiGLUForward implements compute.Backend.
func (b *Backend) SwiGLUForward(out, gate, up compute.Buffer, N int) {
	b.elementwise3("SwiGLUForward", [3]string{"out", "gate", "up"}, [3]compute.Buffer{out, gate, up}, N, refSwiGLUForward, b.swiGLUForward)
}

// SwiGLUBackward implements compute.Backend.
func (b *Backend) SwiGLUBackward(dgate, dup, dout, gate, up compute.Buffer, N int) {
	const op = "SwiGLUBackward"
	if !b.dims(op, N) {
		return
	}
	dg, fg := b.grad(op, "dgate", dgate, N)
	du, fu := b.grad(op, "dup", dup, N)
	do, g, u := b.f(op, "dout", dout, N), b.f(op, "gate", gate, N), b.f(op, "up", up, N)
	if b.err != nil {
		return
	}
	if b.ref {
		refSwiGLUBackward(dg, du, do, g, u, N)
		return
	}
	b.swiGLUBackward(dg, du, do, g, u, N, fg, fu)
}
