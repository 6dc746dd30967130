package gemm

import (
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"
)

// BenchmarkBF16 is GemmBF16 (B in BF16, A in float32) on the family's
// forward (W [out,in] as transposed B) and input-gradient (W as B)
// products, to compare with BenchmarkFamily's float32 figures for the same
// names; "path" is dp (VDPBF16PS) or widen.
func BenchmarkBF16(b *testing.B) {
	path := "widen"
	if Default().BF16Native() {
		path = "dp"
	}
	shapes := []benchShape{{"cube512/NN", false, false, 512, 512, 512}}
	for _, s := range familyShapes() {
		if !s.ta {
			shapes = append(shapes, s)
		}
	}
	for _, th := range []int{1, 2} {
		for _, s := range shapes {
			b.Run(fmt.Sprintf("%s/t%d/%s", path, th, s.name), func(b *testing.B) {
				e := engine(b, Config{Threads: th})
				r := rand.New(rand.NewSource(1))
				ldb := s.n
				if s.tb {
					ldb = s.k
				}
				a, w, c := randSlice(r, s.m*s.k), randBF16(r, s.k*s.n), make([]float32, s.m*s.n)
				op := func() { GemmBF16(e, false, s.tb, s.m, s.n, s.k, 1, a, s.k, w, ldb, 0, c, s.n) }
				op()
				timeLoop(b, 2*float64(s.m)*float64(s.n)*float64(s.k), op)
			})
		}
	}
}

// BenchmarkDecode is the batch-1 matrix–vector product of every family
// weight: GemvBF16 on the BF16 [out, in] weight, and Sgemm's few-rows path
// on a float32 [in, out] copy (the layout gpu/compute/cpu keeps for generation).
// GB/s counts weight bytes read; compare with BenchmarkStreamCopy.
func BenchmarkDecode(b *testing.B) {
	for _, th := range []int{1, 2} {
		for _, f := range familyLayers {
			for _, l := range f.layers {
				name := fmt.Sprintf("t%d/%s/%s", th, f.model, l.name)
				r := rand.New(rand.NewSource(1))
				x, y := randSlice(r, l.in), make([]float32, l.out)
				b.Run("bf16/"+name, func(b *testing.B) {
					e := engine(b, Config{Threads: th})
					w := randBF16(r, l.out*l.in)
					op := func() { e.GemvBF16(l.out, l.in, 1, w, l.in, x, 0, y) }
					op()
					timeBytes(b, 2*float64(l.out*l.in), op)
				})
				b.Run("f32/"+name, func(b *testing.B) {
					e := engine(b, Config{Threads: th})
					wt := randSlice(r, l.in*l.out)
					op := func() { e.Sgemm(false, false, 1, l.out, l.in, 1, x, l.in, wt, l.out, 0, y, l.out) }
					op()
					timeBytes(b, 4*float64(l.out*l.in), op)
				})
			}
		}
	}
}

// timeBytes runs op under b.Loop and reports GB/s of `bytes` per call, mean
// and best call.
func timeBytes(b *testing.B, bytes float64, op func()) {
	b.ResetTimer()
	best := time.Duration(math.MaxInt64)
	for b.Loop() {
		t0 := time.Now()
		op()
		best = min(best, time.Since(t0))
	}
	b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	b.ReportMetric(bytes/best.Seconds()/1e9, "GB/s-best")
}

// BenchmarkStreamCopy is STREAM's copy kernel (a[i] = b[i]) on 128 MiB
// arrays, far larger than the caches, with Go's copy (AVX moves,
// non-temporal stores at this size), split across 1 and 2 goroutines.
// GB/s counts bytes read plus bytes written, as STREAM does; "read-GB/s"
// counts only the bytes read, the figure a decode step's weight reads
// compare with.
func BenchmarkStreamCopy(b *testing.B) {
	const n = 32 << 20 // float32s: 128 MiB
	src, dst := make([]float32, n), make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	copy(dst, src)
	for _, th := range []int{1, 2} {
		b.Run(fmt.Sprintf("t%d", th), func(b *testing.B) {
			op := func() {
				var wg sync.WaitGroup
				for t := 1; t < th; t++ {
					wg.Go(func() { copy(dst[t*n/th:(t+1)*n/th], src[t*n/th:(t+1)*n/th]) })
				}
				copy(dst[:n/th], src[:n/th])
				wg.Wait()
			}
			b.ResetTimer()
			best := time.Duration(math.MaxInt64)
			for b.Loop() {
				t0 := time.Now()
				op()
				best = min(best, time.Since(t0))
			}
			b.ReportMetric(8*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			b.ReportMetric(8*n/best.Seconds()/1e9, "GB/s-best")
			b.ReportMetric(4*n/best.Seconds()/1e9, "read-GB/s-best")
		})
	}
}

// BenchmarkKernelBF16 is the VDPBF16PS micro-kernel alone on cache-resident
// packed panels (flops count two per multiply-add, as for float32).
func BenchmarkKernelBF16(b *testing.B) {
	if !hasBF16 {
		b.Skip("CPU lacks AVX512_BF16")
	}
	const kq, tiles = 256, 16
	ap := make([]uint32, bfMR*kq*tiles)
	bp := make([]uint32, bfNR*kq)
	c := make([]float32, bfMR*bfNR)
	timeLoop(b, 2*2*float64(bfMR*bfNR*kq*tiles), func() {
		for i := 0; i < tiles; i++ {
			kernelBF16Asm(1, kq, ap[i*bfMR*kq:], kq, 1, 0, bp, bfNR, c, bfNR, 1, 1)
		}
	})
}

// BenchmarkDecodeOrder is a decode step's float32 weight reads without the
// rest of the step: Gemv over 30 layers of SmolLM2-135M's matrices (q, k,
// v, o, gate, up, down, each kind contiguous across layers as the model
// keeps them, 425 MB, far beyond the caches) in decode order, against one
// Gemv over a single matrix of the same bytes. Their gap is what the
// per-matrix start costs (the first rows of each matrix before the
// prefetch runs ahead); compare both with BenchmarkStreamCopy.
func BenchmarkDecodeOrder(b *testing.B) {
	const L = 30
	kinds := []struct{ n, k int }{{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}}
	r := rand.New(rand.NewSource(1))
	var mats [][]float32
	total := 0
	for _, kd := range kinds {
		mats = append(mats, randSlice(r, L*kd.n*kd.k))
		total += L * kd.n * kd.k
	}
	x, y := randSlice(r, 1536), make([]float32, 1536)
	b.Run("layers", func(b *testing.B) {
		timeBytes(b, 4*float64(total), func() {
			for l := 0; l < L; l++ {
				for i, kd := range kinds {
					per := kd.n * kd.k
					Gemv(kd.n, kd.k, 1, mats[i][l*per:(l+1)*per], kd.k, x, 0, y)
				}
			}
		})
	})
	mats = nil
	one, yy := randSlice(r, total), make([]float32, total/576)
	b.Run("one-matrix", func(b *testing.B) {
		timeBytes(b, 4*float64(total), func() { Gemv(total/576, 576, 1, one, 576, x[:576], 0, yy) })
	})
}
