package cpu

import (
	"errors"
	"math/rand/v2"
	"testing"

	"troupe/gpu"
	"troupe/gpu/cpu/gemm"
)

// TestMatmulBF16MatchesReference checks the BF16-weight matmuls against
// widening the weight and the float64 reference, on odd shapes around the
// gemv (N < 6) and VDPBF16PS (N ≥ 6) split. Where the kernel rounds its
// float32 operand to BF16 (AVX512_BF16: the forward for N ≥ 6, the
// backward always) the reference gets it rounded the same way,
// so both are compared at float32-sum precision; a second check against
// unrounded inp bounds the rounding itself (2^-8 relative per product,
// random signs: well under 1% of the output's scale).
func TestMatmulBF16MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 1))
	for _, s := range []struct{ N, C, OC int }{
		{1, 3, 5}, {1, 67, 130}, {2, 33, 17}, {5, 64, 96}, {6, 31, 33}, {7, 129, 65}, {13, 96, 257}, {37, 40, 12},
	} {
		w32 := randf(r, s.OC*s.C, 0.5)
		w := make([]uint16, len(w32))
		gemm.ToBF16(w, w32)
		inp, bias := randf(r, s.N*s.C, 1), randf(r, s.OC, 0.3)
		dout, dinp0 := randf(r, s.N*s.OC, 1), randf(r, s.N*s.C, 1)
		// the forward's few-row case reads inp in float32; the backward
		// (no transpose) always runs on VDPBF16PS where the CPU has it
		inpR, doutR := inp, dout
		if gemm.BF16Native() && s.N >= 6 {
			inpR = roundedBF16(inp)
		}
		if gemm.BF16Native() {
			doutR = roundedBF16(dout)
		}
		for _, withBias := range []bool{false, true} {
			e := env{t, New()}
			var bb gpu.Buffer
			var bh []float32
			if withBias {
				bb, bh = e.buf(bias), bias
			}
			out := e.buf(make([]float32, s.N*s.OC))
			e.be.MatmulForwardBF16(out, e.buf(inp), w, bb, s.N, s.C, s.OC)
			if err := e.be.Err(); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, s.N*s.OC)
			refMatmulForwardBF16(want, inpR, w, bh, s.N, s.C, s.OC)
			assertClose(t, "forward", data(out), want, 2e-5)
			refMatmulForwardBF16(want, inp, w, bh, s.N, s.C, s.OC)
			assertClose(t, "forward vs unrounded inp", data(out), want, 1e-2)
		}
		e := env{t, New()}
		di := e.buf(dinp0)
		e.be.MatmulBackwardInputBF16(di, e.buf(dout), w, s.N, s.C, s.OC)
		want := clone(dinp0)
		refMatmulBackwardInputBF16(want, doutR, w, s.N, s.C, s.OC)
		assertClose(t, "backward accumulates", data(di), want, 2e-5)
		// a pending Zero is overwritten, not added to
		e.be.Zero(di)
		e.be.MatmulBackwardInputBF16(di, e.buf(dout), w, s.N, s.C, s.OC)
		clear(want)
		refMatmulBackwardInputBF16(want, doutR, w, s.N, s.C, s.OC)
		assertClose(t, "backward after Zero", data(di), want, 2e-5)
		if err := e.be.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func roundedBF16(x []float32) []float32 {
	h := make([]uint16, len(x))
	gemm.ToBF16(h, x)
	return widenBF16(h)
}

func TestMatmulBF16Errors(t *testing.T) {
	e := env{t, New()}
	out, inp := e.buf(make([]float32, 6)), e.buf(make([]float32, 6))
	e.be.MatmulForwardBF16(out, inp, make([]uint16, 8), nil, 2, 3, 3)
	if err := e.be.Err(); !errors.Is(err, gpu.ErrShape) {
		t.Fatalf("short weight: err %v, want ErrShape", err)
	}
	e = env{t, New()}
	e.be.MatmulBackwardInputBF16(e.buf(make([]float32, 6)), e.buf(make([]float32, 5)), make([]uint16, 9), 2, 3, 3)
	if err := e.be.Err(); !errors.Is(err, gpu.ErrShape) {
		t.Fatalf("short dout: err %v, want ErrShape", err)
	}
}

// TestMatmulBF16Reference runs the reference backend's path.
func TestMatmulBF16Reference(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 1))
	N, C, OC := 3, 5, 7
	w32 := randf(r, OC*C, 1)
	w := make([]uint16, len(w32))
	gemm.ToBF16(w, w32)
	inp := randf(r, N*C, 1)
	e := env{t, NewReference()}
	out := e.buf(make([]float32, N*OC))
	e.be.MatmulForwardBF16(out, e.buf(inp), w, nil, N, C, OC)
	want := make([]float32, N*OC)
	refMatmulForward(want, inp, widenBF16(w), nil, N, C, OC)
	assertClose(t, "reference forward", data(out), want, 1e-6)
}
