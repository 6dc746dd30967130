package gemm

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

func randBF16(r *rand.Rand, n int) []uint16 {
	h := make([]uint16, n)
	for i := range h {
		h[i] = RoundBF16(r.Float32()*2 - 1)
	}
	return h
}

// RoundBF16 against a float64 model of round-to-nearest-even, and ToBF16
// (assembly where the CPU has AVX512_BF16) against RoundBF16.
func TestToBF16(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.00390625 /* tie, even below */, 1.01171875, /* tie, odd below */
		float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, 3.3895314e38, 1e-30, -2.5e-20}
	src := append([]float32(nil), special...)
	for len(src) < 1000 {
		src = append(src, float32(r.NormFloat64()*math.Pow(10, float64(r.Intn(20)-10))))
	}
	for _, f := range src {
		got := math.Float32frombits(uint32(RoundBF16(f)) << 16)
		// Nearest BF16 by search over the two neighbours.
		u := math.Float32bits(f) &^ 0xffff
		lo, hi := math.Float32frombits(u), math.Float32frombits(u+0x10000)
		hi64 := float64(hi)
		if math.IsInf(hi64, 0) {
			hi64 = math.Copysign(math.Ldexp(1, 128), hi64) // rounding past the largest finite BF16
		}
		dl, dh := math.Abs(float64(f)-float64(lo)), math.Abs(hi64-float64(f))
		want := lo
		if dh < dl || (dh == dl && (u>>16)&1 == 1) {
			want = hi
		}
		if math.IsInf(float64(f), 0) {
			want = f
		}
		if got != want {
			t.Fatalf("RoundBF16(%g) = %g, want %g", f, got, want)
		}
	}
	nan := float32(math.NaN())
	if h := RoundBF16(nan); h&0x7fff <= 0x7f80 {
		t.Fatalf("RoundBF16(NaN) = %#x, not a NaN", h)
	}
	dst := make([]uint16, len(src))
	ToBF16(dst, src)
	for i, f := range src {
		if dst[i] != RoundBF16(f) {
			t.Fatalf("ToBF16 element %d (%g): got %#x want %#x", i, f, dst[i], RoundBF16(f))
		}
	}
	t.Logf("assembly conversion (VCVTNE2PS2BF16): %v", hasBF16)
}

// bf16Paths runs f on each GemmBF16 path this CPU has: VDPBF16PS, and
// widening to float32 under each float32 micro-kernel.
func bf16Paths(t *testing.T, f func(t *testing.T, e *Engine, roundA bool)) {
	t.Run("dp", func(t *testing.T) {
		if !hasBF16 {
			t.Skip("CPU lacks AVX512_BF16 (VDPBF16PS)")
		}
		e := *Default()
		e.bf16Path = "dp"
		f(t, &e, true)
	})
	for _, isa := range allISAs {
		t.Run("widen/"+isa, func(t *testing.T) {
			withISA(t, isa, func(t *testing.T, e *Engine) {
				e.bf16Path = "widen"
				f(t, e, false)
			})
		})
	}
}

func TestGemmBF16(t *testing.T) {
	bf16Paths(t, func(t *testing.T, e *Engine, roundA bool) {
		r := rand.New(rand.NewSource(8))
		sizes := []int{1, 2, 7, 12, 13, 33, 65}
		for _, threads := range []int{1, 2} {
			e := e.withThreads(threads)
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for i := 0; i < 12; i++ {
						tc := gemmCase{ta: ta, tb: tb,
							m: sizes[r.Intn(len(sizes))], n: sizes[r.Intn(len(sizes))], k: sizes[r.Intn(len(sizes))],
							alpha: []float32{1, -0.5, 2}[r.Intn(3)], beta: []float32{0, 1, 0.25}[r.Intn(3)],
							pad: []int{0, 1, 3}[r.Intn(3)]}
						runBF16Case(t, e, r, tc, roundA, i%2 == 0)
					}
					// Several k blocks, more than one 32-column panel, ragged
					// edges, and enough work for the parallel split.
					runBF16Case(t, e, r, gemmCase{ta: ta, tb: tb, m: 131, n: 97, k: 601, alpha: 1, beta: 0.5, pad: 2}, roundA, true)
					runBF16Case(t, e, r, gemmCase{ta: ta, tb: tb, m: 64, n: 130, k: 300, alpha: 1, beta: 0}, roundA, false)
				}
			}
		}
	})
}

// runBF16Case checks GemmBF16 on one shape with A in float32 (aFloat) or
// BF16, against ReferenceBF16.
func runBF16Case(t *testing.T, e *Engine, r *rand.Rand, tc gemmCase, roundA, aFloat bool) {
	t.Helper()
	ar, ac := tc.m, tc.k
	if tc.ta {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.tb {
		br, bc = tc.n, tc.k
	}
	lda, ldb, ldc := ac+tc.pad, bc+tc.pad, tc.n+tc.pad
	b := randBF16(r, max(br*ldb, 1))
	c := randSlice(r, max(tc.m*ldc, 1))
	if tc.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN())
		}
	}
	want := append([]float32(nil), c...)
	name := fmt.Sprintf("%+v aFloat=%v", tc, aFloat)
	if tc.m < rowsMaxM && tc.tb {
		roundA = false // the decode path (GemvBF16) keeps A in float32
	}
	if aFloat {
		a := randSlice(r, max(ar*lda, 1))
		if err := CheckBF16(tc.ta, tc.tb, tc.m, tc.n, tc.k, a, lda, b, ldb, c, ldc); err != nil {
			t.Fatal(err)
		}
		ReferenceBF16(roundA, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
		GemmBF16(e, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	} else {
		a := randBF16(r, max(ar*lda, 1))
		ReferenceBF16(false, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
		GemmBF16(e, tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	}
	for i := range c {
		if i%ldc >= tc.n || i >= tc.m*ldc {
			if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: padding element %d changed", name, i)
			}
			c[i], want[i] = 0, 0
		}
	}
	checkClose(t, name, c, want, tc.k)
}

func TestGemvBF16(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	for _, threads := range []int{1, 2} {
		e := engine(t, Config{Threads: threads})
		for _, sh := range [][2]int{{1, 1}, {3, 17}, {4, 16}, {7, 33}, {64, 576}, {129, 100}, {1031, 2100}} {
			n, k := sh[0], sh[1]
			ldw := k + 3
			w := randBF16(r, n*ldw)
			x := randSlice(r, k)
			for _, beta := range []float32{0, 0.5} {
				y := randSlice(r, n)
				want := append([]float32(nil), y...)
				ReferenceBF16(false, false, true, 1, n, k, 1.5, x, k, w, ldw, beta, want, n)
				e.GemvBF16(n, k, 1.5, w, ldw, x, beta, y)
				checkClose(t, fmt.Sprintf("gemv n=%d k=%d beta=%v threads=%d", n, k, beta, threads), y, want, k)
			}
		}
	}
}

func TestCheckBF16(t *testing.T) {
	a, b, c := make([]float32, 6), make([]uint16, 12), make([]float32, 8)
	if err := CheckBF16(false, false, 2, 4, 3, a, 3, b, 4, c, 4); err != nil {
		t.Fatalf("valid args rejected: %v", err)
	}
	if err := CheckBF16(false, true, 2, 4, 3, a, 3, b, 4, c, 4); err == nil {
		t.Fatal("short transposed B accepted")
	}
	if err := CheckBF16(false, false, 2, 4, 3, make([]uint16, 5), 3, b, 4, c, 4); err == nil {
		t.Fatal("short A accepted")
	}
}
