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
		e := engine(t, Config{Threads: tc.threads})
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			lda, ldb := k, n
			if tr[0] {
				lda = m
			}
			if tr[1] {
				ldb = k
			}
			got := testing.AllocsPerRun(20, func() {
				e.Sgemm(tr[0], tr[1], m, n, k, 1, a, lda, b, ldb, 0, c, n)
				e.Sgemm(tr[0], tr[1], 3, n, k, 1, a, lda, b, ldb, 0, c, n)
				if !tr[1] {
					e.Sgemm(tr[0], false, 2, 1000, 140, 1, a, lda, b, 1000, 0, c, 1000) // parallel rows path
				}
			})
			t.Logf("threads=%d trans=%v: %.1f allocs", tc.threads, tr, got)
			if got > tc.max {
				t.Errorf("threads=%d trans=%v: %.1f allocations per call pair, want ≤ %v", tc.threads, tr, got, tc.max)
			}
		}
	}
}

// TestBF16SteadyStateAllocs checks GemmBF16 (each path, serial and
// parallel, A in float32 and BF16) and GemvBF16 for allocations.
func TestBF16SteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	r := rand.New(rand.NewSource(4))
	const m, n, k = 170, 180, 190 // above the parallel threshold
	a, ah, b, c := randSlice(r, m*k), randBF16(r, m*k), randBF16(r, n*k), randSlice(r, m*n)
	paths := []string{"widen"}
	if hasBF16 {
		paths = append(paths, "dp")
	}
	for _, path := range paths {
		for _, threads := range []int{1, 2} {
			e := engine(t, Config{Threads: threads})
			e.bf16Path = path
			got := testing.AllocsPerRun(10, func() {
				GemmBF16(e, false, true, m, n, k, 1, a, k, b, k, 0, c, n)
				GemmBF16(e, true, false, m, n, k, 1, ah, m, b, n, 0, c, n)
				GemmBF16(e, false, true, 2, n, k, 1, ah, k, b, k, 0, c, n)
				e.GemvBF16(n, k, 1, b, k, a, 0, c)
			})
			if got > 0 {
				t.Errorf("path %s threads=%d: %.1f allocations per call set, want 0", path, threads, got)
			}
		}
	}
}
