package cpu

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
	"troupe/gpu/compute"
)

// Per-op benchmarks of the matmuls at a small model's shapes (B=8, T=128,
// C=256, an MLP of 4C); decoder_bench_test.go has the decoder's other ops.
func BenchmarkOps(b *testing.B) {
	const B, T, C = 8, 128, 256
	N := B * T
	be := New()
	r := rand.New(rand.NewPCG(1, 1))
	buf := func(n int) compute.Buffer { x, _ := be.Alloc(n); be.Upload(x, randf(r, n, 1)); return x }
	x4, y4, d4 := buf(N*4*C), buf(N*4*C), buf(N*4*C)
	ln, dln, b4 := buf(N*C), buf(N*C), buf(4*C)
	ops := []struct {
		name string
		fn   func()
	}{
		{"MatmulForwardFC", func() { be.MatmulForward(x4, ln, y4, b4, N, C, 4*C) }},
		{"MatmulBackwardFC", func() { be.MatmulBackward(dln, d4, b4, x4, ln, y4, N, C, 4*C) }},
	}
	for _, op := range ops {
		b.Run(fmt.Sprint(op.name), func(b *testing.B) {
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				op.fn()
			}
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// cpuTime is the process's CPU time: on the shared build machine wall time
// per op swings with other load, CPU time much less.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
