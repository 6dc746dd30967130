package gemm

import "testing"

// BenchmarkKernel measures the micro-kernel alone on L1/L2-resident packed
// panels: the ceiling for the whole Sgemm.
func BenchmarkKernel(b *testing.B) {
	const kc = 256
	ap := make([]float32, mr*kc*24)
	bp := make([]float32, nr*kc)
	c := make([]float32, mr*nr)
	kern := pickKernel()
	c0 := processCPU()
	for b.Loop() {
		for i := 0; i < 24; i++ {
			kern(1, kc, ap[i*mr*kc:], 1, mr, 0, bp, nr, c, nr, 1, 1)
		}
	}
	b.ReportMetric(2*mr*nr*kc*24*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(2*mr*nr*kc*24*float64(b.N)/(processCPU()-c0).Seconds()/1e9, "GFLOP/s-core")
}

// BenchmarkPack measures the packing routines in ns per packed element on
// a 512×512 source (one mcBlock×kcBlock A block, one kcBlock×512 B block).
func BenchmarkPack(b *testing.B) {
	src := make([]float32, 512*512)
	dst := make([]float32, 256*512)
	for _, tr := range []bool{false, true} {
		name := map[bool]string{false: "N", true: "T"}[tr]
		b.Run("A"+name, func(b *testing.B) {
			c0 := processCPU()
			for b.Loop() {
				packA(dst, tr, src, 512, 0, 0, mcBlock, kcBlock)
			}
			b.ReportMetric(float64(processCPU()-c0)/float64(b.N)/(mcBlock*kcBlock), "cpu-ns/elem")
		})
		b.Run("B"+name, func(b *testing.B) {
			c0 := processCPU()
			for b.Loop() {
				packB(dst, tr, src, 512, 0, 0, kcBlock, 512)
			}
			b.ReportMetric(float64(processCPU()-c0)/float64(b.N)/(kcBlock*512), "cpu-ns/elem")
		})
	}
}

// BenchmarkVariants compares packing choices on the GPT shapes (one
// goroutine), to tune packTransA and packNN.
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
				o1, o2 := packTransA, packNN
				packTransA, packNN = v.ptA, v.packNNv
				defer func() { packTransA, packNN = o1, o2 }()
				benchOne(b, s, 1, Sgemm)
			})
		}
	}
}

// BenchmarkForkJoin is the fixed cost of splitting a call across two
// goroutines: a tiny product forced through the parallel path.
func BenchmarkForkJoin(b *testing.B) {
	a, bb, c := make([]float32, 12*16), make([]float32, 16*16), make([]float32, 12*16)
	kern := pickKernel()
	for b.Loop() {
		parallel(kern, 2, true, 2, false, false, 12, 16, 16, 1, a, 16, bb, 16, 0, c, 16, nil)
	}
}
