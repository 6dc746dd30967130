package gemm

import (
	"fmt"
	"testing"
)

// BenchmarkKernel measures each micro-kernel alone on L1/L2-resident packed
// panels: the ceiling for the whole Sgemm.
func BenchmarkKernel(b *testing.B) {
	for _, kn := range kernelsAvail {
		b.Run(kn.isa, func(b *testing.B) {
			mr, nr, kc := kn.mr, kn.nr, kn.kc
			const tiles = 16
			ap := make([]float32, mr*kc*tiles)
			bp := make([]float32, nr*kc)
			c := make([]float32, mr*nr)
			c0 := processCPU()
			for b.Loop() {
				for i := 0; i < tiles; i++ {
					kn.fn(1, kc, ap[i*mr*kc:], 1, mr, 0, bp, nr, c, nr, 1, 1)
				}
			}
			flops := 2 * float64(mr*nr*kc*tiles) * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			b.ReportMetric(flops/(processCPU()-c0).Seconds()/1e9, "GFLOP/s-core")
		})
	}
}

// BenchmarkPack measures the packing routines in ns per packed element on
// a 512×512 source (one mc×kc A block, one kc×512 B block).
func BenchmarkPack(b *testing.B) {
	src := make([]float32, 512*512)
	dst := make([]float32, 512*512)
	for _, kn := range kernelsAvail {
		for _, tr := range []bool{false, true} {
			name := fmt.Sprintf("%s/%s", kn.isa, map[bool]string{false: "N", true: "T"}[tr])
			b.Run("A"+name, func(b *testing.B) {
				c0 := processCPU()
				for b.Loop() {
					packA(kn, dst, tr, src, 512, 0, 0, kn.mc, kn.kc)
				}
				b.ReportMetric(float64(processCPU()-c0)/float64(b.N)/float64(kn.mc*kn.kc), "cpu-ns/elem")
			})
			b.Run("B"+name, func(b *testing.B) {
				c0 := processCPU()
				for b.Loop() {
					packB(kn, dst, tr, src, 512, 0, 0, kn.kc, 512)
				}
				b.ReportMetric(float64(processCPU()-c0)/float64(b.N)/float64(kn.kc*512), "cpu-ns/elem")
			})
		}
	}
}

// BenchmarkVariants compares packing choices on the GPT shapes (one
// goroutine), to tune the Engine's packTransA and packNN.
func BenchmarkVariants(b *testing.B) {
	for _, v := range []struct {
		name         string
		ptA, packNNv bool
	}{{"packAll", true, true}, {"directA", false, true}, {"directB", true, false}} {
		for _, s := range gptShapes() {
			if (v.name == "directA" && !s.ta) || (v.name == "directB" && s.tb) {
				continue
			}
			b.Run(v.name+"/"+s.name, func(b *testing.B) {
				e := engine(b, Config{Threads: 1})
				e.packTransA, e.packNN = v.ptA, v.packNNv
				benchOne(b, s, e.Sgemm)
			})
		}
	}
}

// BenchmarkForkJoin is the fixed cost of splitting a call across two
// goroutines: a tiny product forced through the parallel path.
func BenchmarkForkJoin(b *testing.B) {
	a, bb, c := make([]float32, 24*32), make([]float32, 32*32), make([]float32, 24*32)
	e := Default()
	kn := e.kn
	for b.Loop() {
		j := jobPool.Get().(*job)
		*j = job{e: e, splitM: true, units: 2, parts: 2, m: 2 * kn.mr, n: 16, k: 16, alpha: 1,
			a: a, lda: 16, b: bb, ldb: 16, c: c, ldc: 16}
		j.fork()
	}
}

// BenchmarkBlocking tries kc and mc around the cache-derived values of the
// default kernel on a few family shapes (one goroutine), to check the
// sizing rule in sizeBlocking.
func BenchmarkBlocking(b *testing.B) {
	for _, kn := range kernelsAvail[:len(kernelsAvail)-1] {
		benchBlocking(b, kn)
	}
}

func benchBlocking(b *testing.B, kn *kernel) {
	shapes := []benchShape{{"cube512/NN", false, false, 512, 512, 512}}
	for _, s := range familyShapes() {
		switch s.name {
		case "smol135m/up/fwd", "smol135m/lmhead/fwd", "qwen05b/down/dW", "qwen05b/up/dX":
			shapes = append(shapes, s)
		}
	}
	for _, kc := range []int{128, 256, 384, 512} {
		for _, mc := range []int{96, 192, 384} {
			for _, s := range shapes {
				b.Run(fmt.Sprintf("%s/kc%d/mc%d/%s", kn.isa, kc, mc, s.name), func(b *testing.B) {
					// A copy of the kernel with this blocking, in an
					// Engine of its own.
					e := engine(b, Config{Threads: 1, ISA: kn.isa})
					k2 := *kn
					k2.kc, k2.mc = kc, mc/kn.mr*kn.mr
					e.kn = &k2
					benchOne(b, s, e.Sgemm)
				})
			}
		}
	}
}
