package gemm

import (
	"math/rand"
	"testing"
)

// TestSgemmSteadyStateAllocs checks that pooled packing buffers, jobs and
// persistent workers make repeated calls allocation-free.
func TestSgemmSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	r := rand.New(rand.NewSource(3))
	const m, n, k = 130, 140, 150
	a, b, c := randSlice(r, m*k), randSlice(r, 140*1000), randSlice(r, m*1000)
	for _, tc := range []struct {
		threads int
		max     float64
	}{{1, 0}, {2, 0}} {
		old := Threads()
		SetThreads(tc.threads)
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			lda, ldb := k, n
			if tr[0] {
				lda = m
			}
			if tr[1] {
				ldb = k
			}
			got := testing.AllocsPerRun(20, func() {
				Sgemm(tr[0], tr[1], m, n, k, 1, a, lda, b, ldb, 0, c, n)
				Sgemm(tr[0], tr[1], 3, n, k, 1, a, lda, b, ldb, 0, c, n)
				if !tr[1] {
					Sgemm(tr[0], false, 2, 1000, 140, 1, a, lda, b, 1000, 0, c, 1000) // parallel rows path
				}
			})
			t.Logf("threads=%d trans=%v: %.1f allocs", tc.threads, tr, got)
			if got > tc.max {
				t.Errorf("threads=%d trans=%v: %.1f allocations per call pair, want ≤ %v", tc.threads, tr, got, tc.max)
			}
		}
		SetThreads(old)
	}
}
