//go:build cudagpu

package cuda

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
)

// Benchmarks and the PyTorch-peer export that scripts/gpu-check.sh runs on
// a machine with a GPU. The figures are the GPU's; nothing here has run on
// one yet.

// gemmBenchShapes: 4096³ and the training-batch (8×512 tokens) products of
// Qwen2.5-0.5B and Qwen3-1.7B (N rows, C in, OC out).
var gemmBenchShapes = []struct {
	name     string
	N, C, OC int
}{
	{"4096cubed", 4096, 4096, 4096},
	{"qwen05b-qkv", 4096, 896, 1152},
	{"qwen05b-up", 4096, 896, 4864},
	{"qwen05b-down", 4096, 4864, 896},
	{"qwen05b-head", 4096, 896, 151936},
	{"qwen05b-decode1-down", 1, 4864, 896},
	{"qwen17b-qkv", 4096, 2048, 4096},
	{"qwen17b-up", 4096, 2048, 6144},
	{"qwen17b-down", 4096, 6144, 2048},
}

// BenchmarkGPUGemm times MatmulForward (out = inp·Wᵀ) and reports TFLOP/s.
func BenchmarkGPUGemm(b *testing.B) {
	for _, s := range gemmBenchShapes {
		b.Run(s.name, func(b *testing.B) {
			be := newTestBackend(b)
			inp, w, out := benchBuf(b, be, s.N*s.C), benchBuf(b, be, s.OC*s.C), benchBuf(b, be, s.N*s.OC)
			be.MatmulForward(out, inp, w, nil, s.N, s.C, s.OC)
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.MatmulForward(out, inp, w, nil, s.N, s.C, s.OC)
			}
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(2*float64(s.N)*float64(s.C)*float64(s.OC)*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
		})
	}
}

// qwen05bConfig is Qwen2.5-0.5B's config.json shape.
func qwen05bConfig(tb testing.TB) hf.Config {
	c, err := hf.NewConfig(hf.Qwen2)
	if err != nil {
		tb.Fatal(err)
	}
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 151936, 896, 4864, 24
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 14, 2, 64
	c.MaxPositionEmbeddings, c.RopeTheta, c.RMSNormEps, c.TieWordEmbeddings = 32768, 1e6, 1e-6, true
	c.SlidingWindow, c.UseSlidingWindow, c.MaxWindowLayers, c.LayerTypes = 0, false, 24, nil
	return c
}

func gpuModel(b *testing.B, cfg hf.Config) *policy.Llama {
	be := newTestBackend(b)
	m, err := policy.NewLlama(be, cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Free)
	return m
}

func benchTokens(B, T, vocab int) [][]int32 {
	s := make([][]int32, B)
	for i := range s {
		s[i] = make([]int32, T)
		for j := range s[i] {
			s[i][j] = int32((i*131 + j*17) % vocab)
		}
	}
	return s
}

// BenchmarkGPUQwen runs the Qwen2.5-0.5B shape (random weights) on device
// 0: prefill of B×512 tokens (first token sampled), decode of B rows × 32
// new tokens after a 16-token prompt (step-ms is a steady-state step), and
// full fine-tuning steps on B×512 tokens; B = 1 and 32, and training also
// at the 8×512. The peers are scripts/gpu_check_torch.py's.
func BenchmarkGPUQwen(b *testing.B) {
	cfg := qwen05bConfig(b)
	for _, B := range []int{1, 32} {
		b.Run("prefill-"+strconv.Itoa(B)+"x512", func(b *testing.B) {
			m := gpuModel(b, cfg)
			p := benchTokens(B, 512, cfg.VocabSize)
			opt := policy.GenerateOptions{MaxNewTokens: 1}
			if _, err := m.Generate(p, opt); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.Generate(p, opt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*B*512)/b.Elapsed().Seconds(), "tokens/s")
		})
		b.Run("decode-batch"+strconv.Itoa(B), func(b *testing.B) {
			m := gpuModel(b, cfg)
			p := benchTokens(B, 16, cfg.VocabSize)
			gen := func(n int) time.Duration {
				t0 := time.Now()
				if _, err := m.Generate(p, policy.GenerateOptions{MaxNewTokens: n}); err != nil {
					b.Fatal(err)
				}
				return time.Since(t0)
			}
			gen(32)
			b.ResetTimer()
			var t1, tn time.Duration
			for i := 0; i < b.N; i++ {
				t1 += gen(1)
				tn += gen(32)
			}
			b.StopTimer()
			step := (tn - t1).Seconds() / float64(b.N*31)
			b.ReportMetric(step*1e3, "step-ms")
			b.ReportMetric(float64(B)/step, "tokens/s")
		})
	}
	for _, B := range []int{1, 8, 32} {
		b.Run("train-"+strconv.Itoa(B)+"x512", func(b *testing.B) {
			m := gpuModel(b, cfg)
			batch := policy.Batch{Tokens: benchTokens(B, 513, cfg.VocabSize)}
			if _, err := m.TrainStep(batch); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.TrainStep(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*B*512)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestGPUPeerExport writes, into $TROUPE_GPUCHECK_EXPORT, a small Qwen2
// checkpoint and a LoRA adapter trained one step on the GPU, and troupe's
// log-probs of a fixed batch with the adapter, for gpu_check_torch.py to
// compare with transformers + peft. Skipped without the variable.
func TestGPUPeerExport(t *testing.T) {
	dir := os.Getenv("TROUPE_GPUCHECK_EXPORT")
	if dir == "" {
		t.Skip("TROUPE_GPUCHECK_EXPORT not set")
	}
	cfg, err := hf.NewConfig(hf.Qwen2)
	if err != nil {
		t.Fatal(err)
	}
	cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 512, 128, 352, 2
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 4, 2, 32
	cfg.MaxPositionEmbeddings, cfg.RopeTheta, cfg.RMSNormEps, cfg.TieWordEmbeddings = 256, 1e6, 1e-6, true
	cfg.SlidingWindow, cfg.UseSlidingWindow, cfg.MaxWindowLayers, cfg.LayerTypes = 0, false, 2, nil
	m, err := policy.NewLlama(newTestBackend(t), cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if err := m.Save(filepath.Join(dir, "base")); err != nil {
		t.Fatal(err)
	}
	ad, err := m.AddAdapter("peer", policy.LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}, 3)
	if err != nil {
		t.Fatal(err)
	}
	batch := policy.Batch{Tokens: benchTokens(2, 33, cfg.VocabSize)}
	for i := 0; i < 3; i++ { // B starts at zero: train so the adapter changes the logits
		if _, err := m.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := ad.Save(filepath.Join(dir, "adapter")); err != nil {
		t.Fatal(err)
	}
	lp, err := m.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(map[string]any{"tokens": batch.Tokens, "logprobs": lp})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "troupe_logprobs.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
}
