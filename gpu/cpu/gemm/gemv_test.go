package gemm

import (
	"math"
	"math/rand"
	"testing"
)

// TestGemv checks Gemv against the reference on row counts around the
// 4-row groups, lengths around the 16-column steps, a padded row stride,
// beta 0 (y never read: NaN stays out), 1 and 0.5, on one and two threads
// (the split into whole 4-row groups).
func TestGemv(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, threads := range []int{1, 2} {
		old := Threads()
		SetThreads(threads)
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
					Gemv(n, k, 0.75, w, ldw, x, beta, y)
					checkClose(t, "Gemv", y, want, k)
				}
			}
		}
		SetThreads(old)
	}
}
