package policy

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/cpu"
)

// Benchmarks of the Llama family at real model shapes with random weights:
// SmolLM2-135M (llama) and Qwen2.5-0.5B (qwen2, q/k/v biases). Each
// reports tokens/s (wall), tokens/cpu-s and peak-MiB, the process's peak
// resident memory (VmHWM) during the benchmark, reset at its start (Linux
// clear_refs; 0 elsewhere). The PyTorch peer is testdata/llama/bench_torch.py.
//
//	go test -run '^$' -bench 'Llama/smollm2' -benchtime 2x ./algorithms/policy

func smolLM2Config(b *testing.B) hf.Config {
	c, err := hf.NewConfig(hf.Llama)
	if err != nil {
		b.Fatal(err)
	}
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 49152, 576, 1536, 30
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 9, 3, 64
	c.MaxPositionEmbeddings, c.RopeTheta, c.RMSNormEps, c.TieWordEmbeddings = 8192, 100000, 1e-5, true
	return c
}

func qwen25Config(b *testing.B) hf.Config {
	c, err := hf.NewConfig(hf.Qwen2)
	if err != nil {
		b.Fatal(err)
	}
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 151936, 896, 4864, 24
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 14, 2, 64
	c.MaxPositionEmbeddings, c.RopeTheta, c.RMSNormEps, c.TieWordEmbeddings = 32768, 1e6, 1e-6, true
	c.SlidingWindow, c.UseSlidingWindow, c.MaxWindowLayers, c.LayerTypes = 0, false, 24, nil
	return c
}

// resetPeakRSS makes VmHWM start again from the current resident size.
func resetPeakRSS() {
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS is VmHWM in MiB (0 if unknown).
func peakRSS() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if f := bytes.Fields(line); len(f) >= 2 && string(f[0]) == "VmHWM:" {
			kb, _ := strconv.Atoi(string(f[1]))
			return float64(kb) / 1024
		}
	}
	return 0
}

func BenchmarkLlama(b *testing.B) {
	for _, shape := range []struct {
		name string
		cfg  func(*testing.B) hf.Config
	}{{"smollm2-135m", smolLM2Config}, {"qwen2.5-0.5b", qwen25Config}} {
		b.Run(shape.name+"/prefill-1x512", func(b *testing.B) { benchLlamaPrefill(b, shape.cfg(b), 512) })
		for _, B := range []int{1, 32} {
			b.Run(shape.name+"/decode-batch"+strconv.Itoa(B), func(b *testing.B) { benchLlamaDecode(b, shape.cfg(b), B, 32) })
		}
		b.Run(shape.name+"/train-4x128", func(b *testing.B) { benchLlamaTrain(b, shape.cfg(b), 4, 128) })
	}
}

func benchModel(b *testing.B, cfg hf.Config) *Llama {
	resetPeakRSS()
	m, err := NewLlama(cpu.New(), cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func reportLlama(b *testing.B, tokens int, c0 float64) {
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(tokens)/(cpuTime().Seconds()-c0), "tokens/cpu-s")
	b.ReportMetric(peakRSS(), "peak-MiB")
}

// benchLlamaPrefill: one T-token prompt through the prefill (KV cache
// filled) and the first sampled token.
func benchLlamaPrefill(b *testing.B, cfg hf.Config, T int) {
	m := benchModel(b, cfg)
	defer m.Free()
	prompt := make([]int32, T)
	for i := range prompt {
		prompt[i] = int32(i * 7 % cfg.VocabSize)
	}
	opt := GenerateOptions{MaxNewTokens: 1}
	if _, err := m.Generate([][]int32{prompt}, opt); err != nil { // allocate
		b.Fatal(err)
	}
	b.ResetTimer()
	c0 := cpuTime().Seconds()
	for i := 0; i < b.N; i++ {
		if _, err := m.Generate([][]int32{prompt}, opt); err != nil {
			b.Fatal(err)
		}
	}
	reportLlama(b, b.N*T, c0)
}

// benchLlamaDecode: B rows of a 16-token prompt, n new tokens each
// (greedy: the model's speed, not the sampler's); tokens/s counts new
// tokens, the prefill included in the time.
func benchLlamaDecode(b *testing.B, cfg hf.Config, B, n int) {
	m := benchModel(b, cfg)
	defer m.Free()
	prompts := make([][]int32, B)
	for i := range prompts {
		prompts[i] = make([]int32, 16)
		for j := range prompts[i] {
			prompts[i][j] = int32((i*31 + j*7) % cfg.VocabSize)
		}
	}
	opt := GenerateOptions{MaxNewTokens: n}
	if _, err := m.Generate(prompts, opt); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	c0 := cpuTime().Seconds()
	tok := 0
	for i := 0; i < b.N; i++ {
		out, err := m.Generate(prompts, opt)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range out {
			tok += len(o)
		}
	}
	reportLlama(b, tok, c0)
}

// benchLlamaTrain: full fine-tuning steps (forward, backward, AdamW) on
// B×T tokens.
func benchLlamaTrain(b *testing.B, cfg hf.Config, B, T int) {
	m := benchModel(b, cfg)
	defer m.Free()
	seqs := make([][]int32, B)
	for i := range seqs {
		seqs[i] = make([]int32, T+1)
		for j := range seqs[i] {
			seqs[i][j] = int32((i*131 + j*17) % cfg.VocabSize)
		}
	}
	batch := Batch{Tokens: seqs}
	if _, err := m.TrainStep(batch); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	c0 := cpuTime().Seconds()
	for i := 0; i < b.N; i++ {
		if _, err := m.TrainStep(batch); err != nil {
			b.Fatal(err)
		}
	}
	reportLlama(b, b.N*B*T, c0)
	b.ReportMetric(float64(b.N*B*T)*float64(m.TrainFLOPsPerToken(T))/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
