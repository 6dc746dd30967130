//go:build cudagpu

package cuda

import (
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
