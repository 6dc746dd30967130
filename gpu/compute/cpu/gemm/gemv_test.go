package gemm

import (
	"math"
	"math/rand"
	"slices"
	"testing"
)

// TestGemv checks Gemv against the reference on row counts around the
// 4-row groups, lengths around the 16-column steps, a padded row stride,
// beta 0 (y never read: NaN stays out), 1 and 0.5, on one and two threads
// (the split into whole 4-row groups).
func TestGemv(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, threads := range []int{1, 2} {
		e := engine(t, Config{Threads: threads})
		for _, n := range []int{1, 3, 4, 5, 64, 130, 1029} {
			for _, k := range []int{1, 15, 16, 17, 64, 577} {
				for _, beta := range []float32{0, 1, 0.5} {
					ldw := k + 3
					w, x, y := randSlice(r, n*ldw), randSlice(r, k), randSlice(r, n)
					if beta == 0 {
						for i := range y {
							y[i] = float32(math.NaN())
						}
					}
					want := append([]float32(nil), y...)
					Reference(false, true, 1, n, k, 0.75, x, k, w, ldw, beta, want, n)
					e.Gemv(n, k, 0.75, w, ldw, x, beta, y)
					checkClose(t, "Gemv", y, want, k)
				}
			}
		}
	}
}

// TestDotNT checks Sgemm's dot-product path (A·Wᵀ, rowsMaxM ≤ m <
// dotMaxM) against the reference: row counts around the 4-row tiles and
// both bounds, column counts around W's 4-row groups, lengths around the
// 16-column steps, padded strides, beta 0 (C never read), 1 and 0.5, a
// bias, on one and two threads; and that the path is taken.
func TestDotNT(t *testing.T) {
	if !Default().dotOK() {
		t.Skip("no AVX-512 kernel: the dot-product path is off")
	}
	r := rand.New(rand.NewSource(12))
	for _, threads := range []int{1, 2} {
		e := engine(t, Config{Threads: threads})
		for _, m := range []int{rowsMaxM, 7, 8, 11, 16, 33, dotMaxM - 1} {
			for _, n := range []int{1, 3, 4, 5, 17, 130, 1029} {
				for _, k := range []int{16, 17, 31, 64, 577} {
					for _, beta := range []float32{0, 1, 0.5} {
						lda, ldw, ldc := k+1, k+3, n+2
						a, w, c := randSlice(r, m*lda), randSlice(r, n*ldw), randSlice(r, m*ldc)
						if beta == 0 {
							for i := range c {
								c[i] = float32(math.NaN())
							}
						}
						want := append([]float32(nil), c...)
						Reference(false, true, m, n, k, 0.75, a, lda, w, ldw, beta, want, ldc)
						e.Sgemm(false, true, m, n, k, 0.75, a, lda, w, ldw, beta, c, ldc)
						for i := 0; i < m; i++ { // padding untouched
							for j := n; j < ldc && i*ldc+j < len(c); j++ {
								if !(math.IsNaN(float64(c[i*ldc+j])) && math.IsNaN(float64(want[i*ldc+j]))) && c[i*ldc+j] != want[i*ldc+j] {
									t.Fatalf("m=%d n=%d k=%d: padding C[%d][%d] written", m, n, k, i, j)
								}
							}
						}
						checkClose(t, "dotNT", c, want, k)
					}
				}
			}
		}
	}
	// Sgemm takes the path: its result is dotNT's bit for bit, and the
	// blocked kernel's (dotPath off) is not
	{
		m, n, k := 16, 64, 577
		a, w := randSlice(r, m*k), randSlice(r, n*k)
		viaSgemm, direct, blocked := make([]float32, m*n), make([]float32, m*n), make([]float32, m*n)
		Sgemm(false, true, m, n, k, 1, a, k, w, k, 0, viaSgemm, n)
		Default().dotNT(m, n, k, 1, a, k, w, k, 0, direct, n)
		noDot := *Default()
		noDot.dotPath = false
		noDot.Sgemm(false, true, m, n, k, 1, a, k, w, k, 0, blocked, n)
		same, differs := true, false
		for i := range direct {
			same = same && viaSgemm[i] == direct[i]
			differs = differs || blocked[i] != direct[i]
		}
		if !same || !differs {
			t.Errorf("Sgemm equal to dotNT: %v (want true); blocked kernel differs somewhere: %v (want true)", same, differs)
		}
	}
	// a row's sums do not depend on the rows beside it (the m%4 rows take
	// the tiles too): the first m rows of a 64-row product, bit for bit
	for _, k := range []int{64, 77} {
		n := 37
		a, w := randSlice(r, (dotMaxM-1)*k), randSlice(r, n*k)
		all := make([]float32, (dotMaxM-1)*n)
		Sgemm(false, true, dotMaxM-1, n, k, 1, a, k, w, k, 0, all, n)
		for _, m := range []int{rowsMaxM, 7, 9, 13, 33} {
			part := make([]float32, m*n)
			Sgemm(false, true, m, n, k, 1, a, k, w, k, 0, part, n)
			if !slices.Equal(part, all[:m*n]) {
				t.Errorf("k=%d: the first %d rows differ from the same rows of a %d-row product", k, m, dotMaxM-1)
			}
		}
	}
	// with a bias: each row starts from it
	m, n, k := 9, 21, 40
	a, w, bias := randSlice(r, m*k), randSlice(r, n*k), randSlice(r, n)
	got, want := make([]float32, m*n), make([]float32, m*n)
	for i := 0; i < m; i++ {
		copy(want[i*n:], bias)
	}
	Reference(false, true, m, n, k, 1, a, k, w, k, 1, want, n)
	SgemmBias(false, true, m, n, k, 1, a, k, w, k, bias, got, n)
	checkClose(t, "dotNT bias", got, want, k)
}
