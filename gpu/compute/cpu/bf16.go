package cpu

import (
	"math"
	"unsafe"

	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu/gemm"
)

var _ compute.BF16Matmuler = (*Backend)(nil)

// bf16Weight checks a BF16 weight's length.
func (b *Backend) bf16Weight(op string, w []uint16, need int) bool {
	if b.err != nil {
		return false
	}
	if len(w) < need {
		b.fail(compute.ShapeError(op, "weight has %d BF16 elements, needs %d", len(w), need))
		return false
	}
	return true
}

// MatmulForwardBF16 implements compute.BF16Matmuler with gemm.GemmBF16: on
// AVX512_BF16 CPUs VDPBF16PS with inp rounded to BF16 (N ≥ 6), for fewer
// rows (decode) a matrix–vector product per row that reads the BF16
// weight once with inp in float32; elsewhere the weight is widened block
// by block.
func (b *Backend) MatmulForwardBF16(out, inp compute.Buffer, weight []uint16, bias compute.Buffer, N, C, OC int) {
	const op = "MatmulForwardBF16"
	if !b.dims(op, N, C, OC) {
		return
	}
	o, in := b.f(op, "out", out, N*OC), b.f(op, "inp", inp, N*C)
	bi := b.opt(op, "bias", bias, OC)
	if b.err != nil || !b.bf16Weight(op, weight, OC*C) {
		return
	}
	if b.ref {
		refMatmulForwardBF16(o, in, weight[:OC*C], bi, N, C, OC)
		return
	}
	beta := float32(0)
	if bi != nil {
		for n := 0; n < N; n++ {
			copy(o[n*OC:(n+1)*OC], bi)
		}
		beta = 1
	}
	gemm.GemmBF16(b.gemm, false, true, N, OC, C, 1, in, C, weight, C, beta, o, OC)
}

// MatmulBackwardInputBF16 implements compute.BF16Matmuler: dinp += dout·W by
// gemm.GemmBF16 without transpose (W read as [OC, C] rows).
func (b *Backend) MatmulBackwardInputBF16(dinp, dout compute.Buffer, weight []uint16, N, C, OC int) {
	const op = "MatmulBackwardInputBF16"
	if !b.dims(op, N, C, OC) {
		return
	}
	di, fresh := b.fz(op, "dinp", dinp, N*C)
	do := b.f(op, "dout", dout, N*OC)
	if b.err != nil || !b.bf16Weight(op, weight, OC*C) {
		return
	}
	if di == nil {
		b.fail(compute.ShapeError(op, "dinp is nil"))
		return
	}
	if b.ref {
		if fresh {
			clear(di)
		}
		refMatmulBackwardInputBF16(di, do, weight[:OC*C], N, C, OC)
		return
	}
	beta := float32(1)
	if fresh {
		beta = 0
	}
	gemm.GemmBF16(b.gemm, false, false, N, C, OC, 1, do, OC, weight, C, beta, di, C)
}

// widenBF16 returns w widened to float32 (exact).
func widenBF16(w []uint16) []float32 {
	f := make([]float32, len(w))
	for i, h := range w {
		f[i] = math.Float32frombits(uint32(h) << 16)
	}
	return f
}

// refMatmulForwardBF16 is MatmulForwardBF16 by widening the weight and
// refMatmulForward (float64 sums, inp not rounded).
func refMatmulForwardBF16(out, inp []float32, weight []uint16, bias []float32, N, C, OC int) {
	refMatmulForward(out, inp, widenBF16(weight), bias, N, C, OC)
}

// refMatmulBackwardInputBF16 is MatmulBackwardInputBF16 by widening the
// weight and refMatmulBackward.
func refMatmulBackwardInputBF16(dinp, dout []float32, weight []uint16, N, C, OC int) {
	refMatmulBackward(dinp, nil, nil, dout, nil, widenBF16(weight), N, C, OC)
}

// MatmulBackwardWeightBF16 implements compute.BF16Matmuler: dweight +=
// doutᵀ·inp with both rounded to BF16 and float32 sums, dbias += the
// column sums of dout (in float32, unrounded). Without AVX512_BF16 the
// product runs on float32 operands that were rounded to BF16 first, so
// the result is the same to float32 summation order.
//
// The VDPBF16PS kernel wants A in rows of k pairs; here A is doutᵀ, so dout
// is rounded and transposed into bfA ([OC, N]) once, in cache blocks, and
// inp is rounded into bfB ([N, C]), instead of gathering a transposed
// float32 A element by element while packing.
func (b *Backend) MatmulBackwardWeightBF16(dweight, dbias, dout, inp compute.Buffer, N, C, OC int) {
	const op = "MatmulBackwardWeightBF16"
	if !b.dims(op, N, C, OC) {
		return
	}
	dw, freshW := b.fz(op, "dweight", dweight, OC*C)
	db, freshB := b.fz(op, "dbias", dbias, OC)
	do := b.f(op, "dout", dout, N*OC)
	var in []float32
	if dw != nil {
		in = b.f(op, "inp", inp, N*C)
	}
	if b.err != nil {
		return
	}
	if b.ref {
		if freshW {
			clear(dw)
		}
		if freshB {
			clear(db)
		}
		refMatmulBackwardWeightBF16(dw, db, do, in, N, C, OC)
		return
	}
	if db != nil {
		b.matmulBackward(nil, nil, db, do, nil, nil, N, C, OC, [3]bool{false, false, freshB})
	}
	if dw == nil {
		return
	}
	beta := float32(1)
	if freshW {
		beta = 0
	}
	b.bfA = growU16(b.bfA, OC*N)
	b.bfB = growU16(b.bfB, N*C)
	at, bb := b.bfA[:OC*N], b.bfB[:N*C]
	b.roundBF16(bb, in)
	b.roundTransposeBF16(at, do, N, OC)
	gemm.GemmBF16(b.gemm, false, false, OC, C, N, 1, at, N, bb, C, beta, dw, C)
}

// RoundBF16 implements compute.BF16Matmuler.
func (b *Backend) RoundBF16(dst []uint16, src compute.Buffer) {
	const op = "RoundBF16"
	s := b.f(op, "src", src, len(dst))
	if b.err != nil {
		return
	}
	if b.ref {
		refRoundBF16(dst, s)
		return
	}
	b.roundBF16(dst, s[:len(dst)])
}

func growU16(x []uint16, n int) []uint16 {
	if cap(x) < n {
		return make([]uint16, n)
	}
	return x[:n]
}

// roundBF16 is gemm.ToBF16 split across the workers.
func (b *Backend) roundBF16(dst []uint16, src []float32) {
	j := b.newJob(kRoundBF16)
	j.f[0] = src
	j.h = dst
	parallelFor(len(src), 1<<14, j)
}

func kRoundBF16(j *job, _, lo, hi int) { gemm.ToBF16(j.h[lo:hi], j.f[0][lo:hi]) }

// roundTransposeBF16 writes dst (cols, rows) = srcᵀ rounded to BF16, src
// (rows, cols): first rounded in place order into b.bfT (vector
// conversion), then transposed as 32-bit words, each holding two
// neighbouring rows of one column, which is what a row of dst holds in
// one word; tiles of 8 word rows by 16 columns, parallel over column
// stripes. An odd row count (no whole words) takes the plain loop.
func (b *Backend) roundTransposeBF16(dst []uint16, src []float32, rows, cols int) {
	b.bfT = growU16(b.bfT, rows*cols)
	t := b.bfT[:rows*cols]
	b.roundBF16(t, src)
	j := b.newJob(kTransposeBF16)
	j.h, j.h2 = dst, t
	j.n[0], j.n[1] = rows, cols
	parallelFor((cols+15)/16, 4, j)
}

func kTransposeBF16(j *job, _, lo, hi int) {
	dst, t, rows, cols := j.h, j.h2, j.n[0], j.n[1]
	c0, c1 := lo*16, min(hi*16, cols)
	if rows%2 != 0 {
		for r := 0; r < rows; r++ {
			row := t[r*cols : r*cols+c1]
			for c := c0; c < c1; c++ {
				dst[c*rows+r] = row[c]
			}
		}
		return
	}
	pairs := rows / 2
	dw := unsafe.Slice((*uint32)(unsafe.Pointer(&dst[0])), cols*pairs)
	for p0 := 0; p0 < pairs; p0 += 8 {
		p1 := min(p0+8, pairs)
		for cb := c0; cb < c1; cb += 16 {
			ce := min(cb+16, c1)
			for p := p0; p < p1; p++ {
				lo, hi := t[2*p*cols+cb:2*p*cols+ce], t[(2*p+1)*cols+cb:(2*p+1)*cols+ce]
				hi = hi[:len(lo)]
				for i, x := range lo {
					dw[(cb+i)*pairs+p] = uint32(x) | uint32(hi[i])<<16
				}
			}
		}
	}
}

// refRoundBF16 rounds to nearest even one element at a time.
func refRoundBF16(dst []uint16, src []float32) {
	for i := range dst {
		dst[i] = gemm.RoundBF16(src[i])
	}
}

// roundedBF16 is x rounded to BF16 and widened back.
func roundedBF16(x []float32) []float32 {
	h := make([]uint16, len(x))
	refRoundBF16(h, x)
	return widenBF16(h)
}

// refMatmulBackwardWeightBF16 is MatmulBackwardWeightBF16 by rounding dout
// and inp and refMatmulBackward (float64 sums); the bias gradient from dout
// unrounded.
func refMatmulBackwardWeightBF16(dweight, dbias, dout, inp []float32, N, C, OC int) {
	if dbias != nil {
		refMatmulBackward(nil, nil, dbias, dout, nil, nil, N, C, OC)
	}
	if dweight != nil {
		refMatmulBackward(nil, dweight, nil, roundedBF16(dout), roundedBF16(inp), nil, N, C, OC)
	}
}
