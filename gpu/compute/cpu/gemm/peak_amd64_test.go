//go:build amd64 && !purego

package gemm

import (
	"fmt"
	"sync"
	"testing"
)

// peaks are the register-only FMA loops, one per vector width: the most
// any SGEMM can reach on this machine with that ISA (flops per call of
// iters iterations).
var peaks = []struct {
	isa   string
	ok    bool
	run   func(n int)
	flops float64 // per iteration
}{
	{"avx512", hasAVX512, fmaPeak512, 24 * 16 * 2},
	{"avx2", hasAVX2, fmaPeak, 12 * 8 * 2},
	{"bf16", hasBF16, dpbf16Peak, 24 * 16 * 4},
}

// BenchmarkPeak is the FMA throughput ceiling per ISA on 1 and 2 cores
// (goroutines pinned to nothing: run with GOMAXPROCS ≥ threads on an idle
// machine). Compare Sgemm's GFLOP/s with it rather than with a nominal
// figure; "bf16" counts VDPBF16PS's two multiply-adds per lane.
func BenchmarkPeak(b *testing.B) {
	for _, p := range peaks {
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/t%d", p.isa, th), func(b *testing.B) {
				if !p.ok {
					b.Skipf("CPU lacks %s", p.isa)
				}
				const iters = 1 << 16
				timeLoop(b, float64(iters)*p.flops*float64(th), func() {
					var wg sync.WaitGroup
					for t := 1; t < th; t++ {
						wg.Go(func() { p.run(iters) })
					}
					p.run(iters)
					wg.Wait()
				})
			})
		}
	}
}
