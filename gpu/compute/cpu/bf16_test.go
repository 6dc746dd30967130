package cpu

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu/gemm"
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
			var bb compute.Buffer
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

// TestMatmulBackwardWeightBF16 checks the mixed-precision weight gradient
// against the float64 reference on rounded operands (what it computes),
// accumulating and after a Zero, with and without the bias gradient, on
// shapes around the 16×16 transpose tiles and both kernels' edges; and its
// rounding against the unrounded float32 product.
func TestMatmulBackwardWeightBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 2))
	for _, s := range []struct{ N, C, OC int }{
		{1, 3, 5}, {2, 33, 17}, {6, 31, 33}, {17, 129, 65}, {64, 96, 257}, {130, 40, 12}, {512, 64, 48},
	} {
		inp, dout := randf(r, s.N*s.C, 1), randf(r, s.N*s.OC, 1)
		dw0, db0 := randf(r, s.OC*s.C, 1), randf(r, s.OC, 1)
		for _, ref := range []bool{false, true} {
			e := env{t, New()}
			if ref {
				e.be = NewReference()
			}
			dw, db := e.buf(dw0), e.buf(db0)
			e.be.MatmulBackwardWeightBF16(dw, db, e.buf(dout), e.buf(inp), s.N, s.C, s.OC)
			wantW, wantB := clone(dw0), clone(db0)
			refMatmulBackward(nil, wantW, wantB, roundedBF16(dout), roundedBF16(inp), nil, s.N, s.C, s.OC)
			assertClose(t, "dweight accumulates", data(dw), wantW, 2e-5)
			clear(wantB)
			copy(wantB, db0)
			refMatmulBackward(nil, nil, wantB, dout, nil, nil, s.N, s.C, s.OC)
			assertClose(t, "dbias (unrounded dout)", data(db), wantB, 2e-5)

			e.be.Zero(dw)
			e.be.MatmulBackwardWeightBF16(dw, nil, e.buf(dout), e.buf(inp), s.N, s.C, s.OC)
			clear(wantW)
			refMatmulBackward(nil, wantW, nil, dout, inp, nil, s.N, s.C, s.OC)
			assertClose(t, "dweight after Zero vs unrounded", data(dw), wantW, 2e-2)
			if err := e.be.Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestRoundBF16Op checks the backend's rounding against the scalar one,
// ties and NaNs included, on a length that splits across workers unevenly.
func TestRoundBF16Op(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	src := randf(r, 1<<15+37, 4)
	src[5] = math.Float32frombits(0x3f808000) // a tie: rounds to even (down)
	src[6] = math.Float32frombits(0x3f818000) // a tie: rounds to even (up)
	src[7] = float32(math.NaN())
	src[8] = float32(math.Inf(-1))
	e := env{t, New()}
	got := make([]uint16, len(src)-3) // a prefix of the buffer
	e.be.RoundBF16(got, e.buf(src))
	if err := e.be.Err(); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if want := gemm.RoundBF16(src[i]); v != want {
			t.Fatalf("element %d (%v): %#04x, want %#04x", i, src[i], v, want)
		}
	}
	if got[5] != 0x3f80 || got[6] != 0x3f82 || got[7]&0x7fc0 != 0x7fc0 || got[8] != 0xff80 {
		t.Fatalf("ties/NaN/Inf: %#04x %#04x %#04x %#04x", got[5], got[6], got[7], got[8])
	}
	e.be.RoundBF16(make([]uint16, len(src)+1), e.buf(src))
	if err := e.be.Err(); err == nil {
		t.Fatal("RoundBF16 past the end of src: no error")
	}
}

func TestMatmulBF16Errors(t *testing.T) {
	e := env{t, New()}
	out, inp := e.buf(make([]float32, 6)), e.buf(make([]float32, 6))
	e.be.MatmulForwardBF16(out, inp, make([]uint16, 8), nil, 2, 3, 3)
	if err := e.be.Err(); !errors.Is(err, compute.ErrShape) {
		t.Fatalf("short weight: err %v, want ErrShape", err)
	}
	e = env{t, New()}
	e.be.MatmulBackwardInputBF16(e.buf(make([]float32, 6)), e.buf(make([]float32, 5)), make([]uint16, 9), 2, 3, 3)
	if err := e.be.Err(); !errors.Is(err, compute.ErrShape) {
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

// TestGQAttentionForwardBF16 checks BF16 attention against the float64
// reference on rounded q, k and v: the probabilities to float32-sum
// precision (scores are exact products of rounded operands), the output to
// the rounding of the probabilities; and the output against unrounded
// attention, on lengths below and above gemmMinT, ragged blocks, GQA and MQA.
func TestGQAttentionForwardBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, s := range []struct{ B, T, NH, KVH, HD int }{
		{1, 5, 2, 1, 8}, {2, 8, 4, 2, 16}, {1, 37, 3, 1, 64}, {2, 70, 6, 3, 32}, {1, 129, 9, 3, 64},
	} {
		NH, KVH, HD, T, B := s.NH, s.KVH, s.HD, s.T, s.B
		scale := float32(1 / math.Sqrt(float64(HD)))
		q, k, v := randf(r, B*T*NH*HD, 1), randf(r, B*T*KVH*HD, 1), randf(r, B*T*KVH*HD, 1)
		e := env{t, New()}
		out, att := e.buf(make([]float32, B*T*NH*HD)), e.buf(make([]float32, B*NH*T*T))
		e.be.GQAttentionForwardBF16(out, att, e.buf(q), e.buf(k), e.buf(v), B, T, NH, KVH, HD, scale)
		if err := e.be.Err(); err != nil {
			t.Fatal(err)
		}
		wantO, wantA := make([]float32, B*T*NH*HD), make([]float32, B*NH*T*T)
		refGQAttentionForward(wantO, wantA, roundedBF16(q), roundedBF16(k), roundedBF16(v), B, T, NH, KVH, HD, scale)
		assertClose(t, "att", data(att), wantA, 2e-5)
		assertClose(t, "out vs rounded q, k, v", data(out), wantO, 1e-2)
		refGQAttentionForward(wantO, wantA, q, k, v, B, T, NH, KVH, HD, scale)
		assertClose(t, "out vs float32", data(out), wantO, 3e-2)
	}
}
