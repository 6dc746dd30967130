//go:build cudagpu

package cuda

import (
	"fmt"
	"testing"
)

// BenchmarkGPUGemmBF16 times the tensor-core GEMMs (compute.BF16Matmuler) at
// the shapes of BenchmarkGPUGemm, for each product of a linear layer:
// forward (out = inp·Wᵀ), input gradient (dinp += dout·W) and weight
// gradient (dW += doutᵀ·inp), and reports TFLOP/s (the float32 operands'
// packing to BF16 included). Only a GPU gives figures; nothing here has run
// on one yet.
func BenchmarkGPUGemmBF16(b *testing.B) {
	for _, s := range gemmBenchShapes {
		for _, dir := range []string{"fwd", "dinp", "dweight"} {
			if dir != "fwd" && s.N < 16 {
				continue // decode rows have no backward
			}
			b.Run(s.name+"/"+dir, func(b *testing.B) {
				be := newTestBackend(b)
				inp, out := benchBuf(b, be, s.N*s.C), benchBuf(b, be, s.N*s.OC)
				w := make([]uint16, s.OC*s.C)
				for i := range w {
					w[i] = Float32ToBF16(float32(i%17-8) / 64)
				}
				var dw = out
				if dir == "dweight" {
					dw = benchBuf(b, be, s.OC*s.C)
				}
				run := func() {
					switch dir {
					case "fwd":
						be.MatmulForwardBF16(out, inp, w, nil, s.N, s.C, s.OC)
					case "dinp":
						be.MatmulBackwardInputBF16(inp, out, w, s.N, s.C, s.OC)
					default:
						be.MatmulBackwardWeightBF16(dw, nil, out, inp, s.N, s.C, s.OC)
					}
				}
				run() // uploads the weight once; it stays resident
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					run()
				}
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(2*float64(s.N)*float64(s.C)*float64(s.OC)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
			})
		}
	}
}

// BenchmarkGPUGemmLoRA times LoRA's products on the tensor cores
// (compute.MixedMatmuler, the float32 A and B rounded as they are packed)
// for 4096 tokens of a Qwen2.5-0.5B projection (896 wide) at ranks 16 and
// 64: each iteration is one side's forward, input gradient and weight
// gradient (x·Aᵀ with in = 896, or u·Bᵀ with out = 896). Memory bound: the
// figure to watch is GB/s of the activations, reported beside TFLOP/s.
func BenchmarkGPUGemmLoRA(b *testing.B) {
	const N, W = 4096, 896
	for _, r := range []int{16, 64} {
		for _, side := range []struct {
			name  string
			C, OC int
		}{{"A", W, r}, {"B", r, W}} {
			b.Run(fmt.Sprintf("r%d/%s", r, side.name), func(b *testing.B) {
				be := newTestBackend(b)
				C, OC := side.C, side.OC
				inp, w, out := benchBuf(b, be, N*C), benchBuf(b, be, OC*C), benchBuf(b, be, N*OC)
				din, dw := benchBuf(b, be, N*C), benchBuf(b, be, OC*C)
				run := func() {
					be.MatmulForwardMixed(out, inp, w, nil, N, C, OC)
					be.MatmulBackwardMixed(din, dw, nil, out, inp, w, N, C, OC)
				}
				run()
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					run()
				}
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
				sec := b.Elapsed().Seconds()
				b.ReportMetric(3*2*float64(N*C*OC)*float64(b.N)/sec/1e12, "TFLOP/s")
				// Compulsory float32 traffic: inp and dinp (N·C), out/dout
				// (N·OC, written then read twice), the weight and its gradient.
				bytes := 4 * float64(2*N*C+3*N*OC+3*OC*C)
				b.ReportMetric(bytes*float64(b.N)/sec/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkGPUGemmSplitK times products split over k (decode rows against
// Qwen2.5-0.5B's down and up projections) with the two ways of summing the
// splits: the deterministic workspace and second pass (the default) and
// atomicAdd; the ratio is what bit-reproducibility costs.
func BenchmarkGPUGemmSplitK(b *testing.B) {
	for _, s := range []struct {
		name     string
		N, C, OC int
	}{{"decode1-down", 1, 4864, 896}, {"decode16-up", 16, 896, 4864}} {
		for _, atomic := range []bool{false, true} {
			mode := map[bool]string{false: "deterministic", true: "atomic"}[atomic]
			b.Run(s.name+"/"+mode, func(b *testing.B) {
				be := newTestBackend(b)
				be.SetAtomicSplitK(atomic)
				inp, out := benchBuf(b, be, s.N*s.C), benchBuf(b, be, s.N*s.OC)
				w := make([]uint16, s.OC*s.C)
				for i := range w {
					w[i] = Float32ToBF16(float32(i%17-8) / 64)
				}
				be.MatmulForwardBF16(out, inp, w, nil, s.N, s.C, s.OC)
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					be.MatmulForwardBF16(out, inp, w, nil, s.N, s.C, s.OC)
				}
				if err := be.Sync(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(2*float64(s.OC*s.C)*float64(b.N)/b.Elapsed().Seconds()/1e9, "weight-GB/s")
			})
		}
	}
}
