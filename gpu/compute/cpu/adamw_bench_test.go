package cpu

import (
	"testing"
	"troupe/gpu/compute"
)

// BenchmarkAdamWUpdate: one AdamW step over a SmolLM2-135M-sized parameter
// vector (memory-bound: four float32 streams read, three written), with
// the GB/s of that traffic.
func BenchmarkAdamWUpdate(b *testing.B) {
	const n = 134_515_008
	be := New()
	bufs := make([]compute.Buffer, 4)
	for i := range bufs {
		x, err := be.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		be.Upload(x, make([]float32, n)) // touch every page before timing
		bufs[i] = x
	}
	h := compute.AdamW{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 1, GradScale: 1}
	be.AdamWUpdate(bufs[0], bufs[1], bufs[2], bufs[3], n, h)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be.AdamWUpdate(bufs[0], bufs[1], bufs[2], bufs[3], n, h)
	}
	if err := be.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)*7*4*n/b.Elapsed().Seconds()/1e9, "GB/s")
}
