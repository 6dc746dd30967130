//go:build amd64 && !purego

package gemm

import "testing"

// BenchmarkPeak is the FMA throughput ceiling of one core (register-only
// FMAs): the most any SGEMM can reach here. Compare Sgemm's GFLOP/s-core
// with it rather than with a nominal figure.
func BenchmarkPeak(b *testing.B) {
	if !hasAsm {
		b.Skip("no AVX2+FMA")
	}
	const iters = 1 << 16
	c0 := processCPU()
	for b.Loop() {
		fmaPeak(iters)
	}
	flops := float64(iters) * 12 * 16 * float64(b.N)
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(flops/(processCPU()-c0).Seconds()/1e9, "GFLOP/s-core")
}
