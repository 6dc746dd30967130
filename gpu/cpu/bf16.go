package cpu

import (
	"math"

	"troupe/gpu"
	"troupe/gpu/cpu/gemm"
)

var _ gpu.BF16Matmuler = (*Backend)(nil)

// bf16Weight checks a BF16 weight's length.
func (b *Backend) bf16Weight(op string, w []uint16, need int) bool {
	if b.err != nil {
		return false
	}
	if len(w) < need {
		b.fail(gpu.ShapeError(op, "weight has %d BF16 elements, needs %d", len(w), need))
		return false
	}
	return true
}

// MatmulForwardBF16 implements gpu.BF16Matmuler with gemm.GemmBF16: on
// AVX512_BF16 CPUs VDPBF16PS with inp rounded to BF16 (N ≥ 6), for fewer
// rows (decode) a matrix–vector product per row that reads the BF16
// weight once with inp in float32; elsewhere the weight is widened block
// by block.
func (b *Backend) MatmulForwardBF16(out, inp gpu.Buffer, weight []uint16, bias gpu.Buffer, N, C, OC int) {
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
	gemm.GemmBF16(false, true, N, OC, C, 1, in, C, weight, C, beta, o, OC)
}

// MatmulBackwardInputBF16 implements gpu.BF16Matmuler: dinp += dout·W by
// gemm.GemmBF16 without transpose (W read as [OC, C] rows).
func (b *Backend) MatmulBackwardInputBF16(dinp, dout gpu.Buffer, weight []uint16, N, C, OC int) {
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
		b.fail(gpu.ShapeError(op, "dinp is nil"))
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
	gemm.GemmBF16(false, false, N, C, OC, 1, do, OC, weight, C, beta, di, C)
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
