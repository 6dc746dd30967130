//go:build cudagpu

package cuda

import (
	"fmt"
	"math"
	"testing"

	"troupe/gpu/compute"
)

// Benchmarks of the flash attention kernels on CUDA device 0 at the
// attention shapes of Qwen2.5-0.5B (14 query / 2 kv heads of 64) and
// Qwen3-1.7B (16 / 8 of 128): go test -tags cudagpu -run '^$' -bench
// GPUFlash ./gpu/compute/cuda/. They report TFLOP/s (the causal products
// only, the backward counted as 2.5 forwards as FlashAttention's papers
// do) and, for the decode, the cache bytes read per second. Nothing here
// has run on a GPU yet.

var flashBenchShapes = []struct {
	name          string
	NH, KVH, HD   int
	B, T, decodeT int
}{
	{"qwen2.5-0.5b", 14, 2, 64, 8, 512, 4096},
	{"qwen3-1.7b", 16, 8, 128, 8, 512, 4096},
}

// benchBuf allocates n floats filled with a fixed pattern of small values.
func benchBuf(b *testing.B, be *Backend, n int) compute.Buffer {
	b.Helper()
	x, err := be.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.Sin(float64(i))) * 0.5
	}
	be.Upload(x, v)
	return x
}

func BenchmarkGPUFlashAttention(b *testing.B) {
	for _, s := range flashBenchShapes {
		be := newTestBackend(b)
		B, T, NH, KVH, HD := s.B, s.T, s.NH, s.KVH, s.HD
		scale := float32(1 / math.Sqrt(float64(HD)))
		q, k, v := benchBuf(b, be, B*T*NH*HD), benchBuf(b, be, B*T*KVH*HD), benchBuf(b, be, B*T*KVH*HD)
		out, lse, dout := benchBuf(b, be, B*T*NH*HD), benchBuf(b, be, B*NH*T), benchBuf(b, be, B*T*NH*HD)
		dq, dk, dv := benchBuf(b, be, B*T*NH*HD), benchBuf(b, be, B*T*KVH*HD), benchBuf(b, be, B*T*KVH*HD)
		fwdFlops := 2.0 * float64(B*NH) * float64(T) * float64(T) * float64(HD) // two causal products
		b.Run(s.name+"/forward", func(b *testing.B) {
			for b.Loop() {
				be.FlashAttentionForward(out, lse, q, k, v, B, T, NH, KVH, HD, scale)
			}
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(fwdFlops*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
		b.Run(s.name+"/backward", func(b *testing.B) {
			for b.Loop() {
				be.FlashAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, KVH, HD, scale)
			}
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(2.5*fwdFlops*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
	}
}

func BenchmarkGPUFlashDecode(b *testing.B) {
	for _, s := range flashBenchShapes {
		for _, B := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/batch%d", s.name, B), func(b *testing.B) {
				be := newTestBackend(b)
				maxT, NH, KVH, HD := s.decodeT, s.NH, s.KVH, s.HD
				scale := float32(1 / math.Sqrt(float64(HD)))
				cache := benchBuf(b, be, B*maxT*2*KVH*HD)
				q, k, v := benchBuf(b, be, B*NH*HD), benchBuf(b, be, B*KVH*HD), benchBuf(b, be, B*KVH*HD)
				out := benchBuf(b, be, B*NH*HD)
				pos, err := be.AllocInt(B)
				if err != nil {
					b.Fatal(err)
				}
				ps := make([]int32, B)
				read := 0.0
				for i := range ps { // rows of different lengths, the longest the whole cache
					ps[i] = int32(maxT - 1 - i*maxT/(2*B))
					read += float64(ps[i]+1) * float64(2*KVH*HD*4)
				}
				be.UploadInt(pos, ps)
				for b.Loop() {
					be.GQAttentionDecode(out, cache, q, k, v, pos, B, maxT, NH, KVH, HD, scale)
				}
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(read*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
