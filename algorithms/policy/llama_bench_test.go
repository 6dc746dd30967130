package policy

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute/cpu"
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
		b.Run(shape.name+"/prefill-1x512", func(b *testing.B) { benchLlamaPrefill(b, shape.cfg(b), 512, hf.F32) })
		// mixed precision (SetComputeDType(BF16)); the peer is PyTorch's autocast
		b.Run(shape.name+"/prefill-1x512-bf16", func(b *testing.B) { benchLlamaPrefill(b, shape.cfg(b), 512, hf.BF16) })
		for _, B := range []int{1, 32} {
			// the default: one copy of the weights, read as stored
			b.Run(shape.name+"/decode-batch"+strconv.Itoa(B), func(b *testing.B) { benchLlamaDecode(b, shape.cfg(b), B, 32, false, hf.F32) })
			// DecodeTransposed: a second, transposed copy of the weights
			b.Run(shape.name+"/decode-batch"+strconv.Itoa(B)+"-transposed", func(b *testing.B) { benchLlamaDecode(b, shape.cfg(b), B, 32, true, hf.F32) })
			// mixed precision: the matmuls read the BF16 copies
			b.Run(shape.name+"/decode-batch"+strconv.Itoa(B)+"-bf16", func(b *testing.B) { benchLlamaDecode(b, shape.cfg(b), B, 32, false, hf.BF16) })
		}
		b.Run(shape.name+"/train-4x128", func(b *testing.B) { benchLlamaTrain(b, shape.cfg(b), 4, 128, hf.F32) })
		b.Run(shape.name+"/train-4x128-bf16", func(b *testing.B) { benchLlamaTrain(b, shape.cfg(b), 4, 128, hf.BF16) })
	}
}

func benchModel(b *testing.B, cfg hf.Config) *Llama { return benchModelDT(b, cfg, hf.F32) }

// benchModelDT is benchModel computing in dt (SetComputeDType).
func benchModelDT(b *testing.B, cfg hf.Config, dt hf.DType) *Llama {
	return benchModelOn(b, cpu.New(), cfg, dt)
}

// benchModelOn is benchModelDT on the backend be.
func benchModelOn(b *testing.B, be *cpu.Backend, cfg hf.Config, dt hf.DType) *Llama {
	resetPeakRSS()
	m, err := NewLlama(be, cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.SetComputeDType(dt); err != nil {
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
func benchLlamaPrefill(b *testing.B, cfg hf.Config, T int, dt hf.DType) {
	m := benchModelDT(b, cfg, dt)
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
// tokens, the prefill included in the time. Each iteration also times the
// prefill alone (the same call with one new token), so that step-ms is a
// decode step in steady state, (t(n) - t(1))/(n-1), and weight-GB/s the
// matrices it reads (the head included, in the compute dtype) over
// step-ms: the figure to hold against BenchmarkStreamCopy.
func benchLlamaDecode(b *testing.B, cfg hf.Config, B, n int, transposed bool, dt hf.DType) {
	m := benchModelDT(b, cfg, dt)
	defer m.Free()
	m.DecodeTransposed = transposed
	prompts := make([][]int32, B)
	for i := range prompts {
		prompts[i] = make([]int32, 16)
		for j := range prompts[i] {
			prompts[i][j] = int32((i*31 + j*7) % cfg.VocabSize)
		}
	}
	gen := func(n int) (int, time.Duration, float64) {
		c0, t0 := cpuTime().Seconds(), time.Now()
		out, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: n})
		if err != nil {
			b.Fatal(err)
		}
		return countTokens(out), time.Since(t0), cpuTime().Seconds() - c0
	}
	gen(n)
	b.ResetTimer()
	tok, cpu := 0, 0.0
	var tn, t1 time.Duration
	for i := 0; i < b.N; i++ {
		_, d1, _ := gen(1)
		k, dn, c := gen(n)
		tok, tn, t1, cpu = tok+k, tn+dn, t1+d1, cpu+c
	}
	b.StopTimer()
	b.ReportMetric(float64(tok)/tn.Seconds(), "tokens/s")
	b.ReportMetric(float64(tok)/cpu, "tokens/cpu-s")
	b.ReportMetric(peakRSS(), "peak-MiB")
	step := (tn - t1).Seconds() / float64(b.N*(n-1))
	b.ReportMetric(step*1e3, "step-ms")
	size := 4
	if dt == hf.BF16 {
		size = 2
	}
	bytes := 0
	for _, k := range m.ampKinds() {
		bytes += size * m.sizes[k]
	}
	b.ReportMetric(float64(bytes)/step/1e9, "weight-GB/s")
}

// benchLlamaTrain: full fine-tuning steps (forward, backward, AdamW) on
// B×T tokens.
func benchLlamaTrain(b *testing.B, cfg hf.Config, B, T int, dt hf.DType) {
	benchLlamaTrainOn(b, cpu.New(), cfg, B, T, dt)
}

// benchLlamaTrainOn is benchLlamaTrain on the backend be.
func benchLlamaTrainOn(b *testing.B, be *cpu.Backend, cfg hf.Config, B, T int, dt hf.DType) {
	m := benchModelOn(b, be, cfg, dt)
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

// BenchmarkLlamaLoad reads a SmolLM2-135M-shaped model directory (BF16, as
// checkpoints are published) into a model: MB/s of weights produced and
// peak-MiB against weights-MiB, the model's own float32 weights. The
// memory-mapped file's pages count toward the resident peak while mapped.
func BenchmarkLlamaLoad(b *testing.B) {
	cfg := smolLM2Config(b)
	dir := b.TempDir()
	m, err := NewLlama(cpu.New(), cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.SaveAs(dir, hf.SaveOptions{DType: hf.BF16}); err != nil {
		b.Fatal(err)
	}
	weights := float64(m.NumParams()) * 4 / (1 << 20)
	m.Free()
	m = nil
	b.ResetTimer()
	var peak float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		resetPeakRSS()
		b.StartTimer()
		l, err := LoadLlama(dir, cpu.New())
		if err != nil {
			b.Fatal(err)
		}
		peak = max(peak, peakRSS())
		l.Free()
	}
	b.ReportMetric(weights*float64(b.N)/b.Elapsed().Seconds(), "MiB/s")
	b.ReportMetric(peak, "peak-MiB")
	b.ReportMetric(weights, "weights-MiB")
}

// BenchmarkLoRA measures LoRA beside full fine-tuning and separate models,
// each pair in the same run:
//
//	train-full / train-lora-r16: SmolLM2-135M, a training step on 4×128
//	tokens, all weights vs rank-16 adapters on all seven projections.
//	qwen2.5-0.5b/train-bf16-2xlora-r16: a BF16 base with two rank-16
//	adapters, two rows of each in a 4×128 step; reports need-MiB (what
//	MemoryBytes counts: base, adapters, their gradients and moments,
//	activations and scratch) beside peak-MiB.
//	sample-2roles-shared / sample-2roles-separate: 16 rows per role, 32
//	new tokens each, through one base with two adapters (one call with
//	rows naming their adapter) vs two full models (the adapters merged).
//
//	go test -run '^$' -bench 'LoRA' -benchtime 2x ./algorithms/policy
func BenchmarkLoRA(b *testing.B) {
	b.Run("smollm2-135m/train-full-4x128", func(b *testing.B) { benchLlamaTrain(b, smolLM2Config(b), 4, 128, hf.F32) })
	b.Run("smollm2-135m/train-lora-r16-4x128", func(b *testing.B) {
		benchLoRATrain(b, smolLM2Config(b), false, []string{"a"}, 4, 128)
	})
	b.Run("smollm2-135m/train-bf16-lora-r16-4x128", func(b *testing.B) {
		benchLoRATrain(b, smolLM2Config(b), true, []string{"a"}, 4, 128)
	})
	b.Run("qwen2.5-0.5b/train-bf16-2xlora-r16-4x128", func(b *testing.B) {
		benchLoRATrain(b, qwen25Config(b), true, []string{"planner", "tool"}, 4, 128)
	})
	b.Run("smollm2-135m/sample-2roles-shared", func(b *testing.B) { benchLoRASample(b, smolLM2Config(b), true) })
	b.Run("smollm2-135m/sample-2roles-separate", func(b *testing.B) { benchLoRASample(b, smolLM2Config(b), false) })
}

// loraBenchModel is a random base (BF16 if asked) with rank-16 adapters on
// all projections, B random so they matter; the peak RSS is reset after
// the base is built, so it counts training, not construction.
func loraBenchModel(b *testing.B, cfg hf.Config, bf16 bool, names []string) *Llama {
	m, err := NewLlama(cpu.New(), cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	if bf16 {
		if err := m.SetBaseDType(hf.BF16); err != nil {
			b.Fatal(err)
		}
	}
	for i, n := range names {
		ad, err := m.AddAdapter(n, DefaultLoRA(), uint64(i+2))
		if err != nil {
			b.Fatal(err)
		}
		randomizeAdapter(b, ad, uint64(i+10), 0.01)
	}
	resetPeakRSS()
	return m
}

func benchLoRATrain(b *testing.B, cfg hf.Config, bf16 bool, names []string, B, T int) {
	m := loraBenchModel(b, cfg, bf16, names)
	defer m.Free()
	batch := Batch{Tokens: make([][]int32, B), Adapters: make([]string, B)}
	for i := range batch.Tokens {
		batch.Tokens[i] = make([]int32, T+1)
		for j := range batch.Tokens[i] {
			batch.Tokens[i][j] = int32((i*131 + j*17) % cfg.VocabSize)
		}
		batch.Adapters[i] = names[i%len(names)]
	}
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
	need := float64(m.MemoryBytes()) / (1 << 20)
	b.ReportMetric(need, "need-MiB")
	if p := peakRSS(); p > 0 {
		b.ReportMetric(p/need, "peak/need")
	}
}

// benchLoRASample: two roles of 16 rows each, 32 new tokens per row.
func benchLoRASample(b *testing.B, cfg hf.Config, shared bool) {
	const rows, n = 16, 32
	m := loraBenchModel(b, cfg, false, []string{"planner", "tool"})
	defer m.Free()
	prompts := make([][]int32, 2*rows)
	names := make([]string, 2*rows)
	for i := range prompts {
		prompts[i] = make([]int32, 16)
		for j := range prompts[i] {
			prompts[i][j] = int32((i*31 + j*7) % cfg.VocabSize)
		}
		names[i] = []string{"planner", "tool"}[i%2]
	}
	var gen func() int
	if shared {
		gen = func() int {
			out, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: n, Adapters: names})
			if err != nil {
				b.Fatal(err)
			}
			return countTokens(out)
		}
	} else {
		var models [2]*Llama
		for i, name := range []string{"planner", "tool"} {
			c, err := m.MergedClone(name, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Free()
			models[i] = c
		}
		m.Free() // only the two full models remain
		resetPeakRSS()
		gen = func() int {
			tok := 0
			for i, c := range models {
				var ps [][]int32
				for j := i; j < len(prompts); j += 2 {
					ps = append(ps, prompts[j])
				}
				out, err := c.Generate(ps, GenerateOptions{MaxNewTokens: n})
				if err != nil {
					b.Fatal(err)
				}
				tok += countTokens(out)
			}
			return tok
		}
	}
	gen()
	b.ResetTimer()
	c0 := cpuTime().Seconds()
	tok := 0
	for i := 0; i < b.N; i++ {
		tok += gen()
	}
	reportLlama(b, tok, c0)
}

func countTokens(out [][]int32) int {
	n := 0
	for _, o := range out {
		n += len(o)
	}
	return n
}

// BenchmarkBF16Base measures a BF16 base both ways in one run: widened
// into float32 scratch before every use (widen) and multiplied in place by
// the backend's BF16 kernels (kernel, compute.BF16Matmuler):
//
//	smollm2-135m/decode-batch1: one 16-token prompt, 32 new tokens, no
//	adapter; weight-GB/s is the BF16 matrices' bytes (the tied head
//	included) times the passes over them (one per new token, the prefill
//	being the first) over the wall time, prefill and all.
//	…/train-…: BenchmarkLoRA's BF16 rows (4×128-token LoRA steps).
//
//	go test -run '^$' -bench 'BF16Base' -benchtime 2x ./algorithms/policy
func BenchmarkBF16Base(b *testing.B) {
	defer func(k bool) { bf16Kernels = k }(bf16Kernels)
	modes := []struct {
		name    string
		kernels bool
	}{{"widen", false}, {"kernel", true}}
	for _, mode := range modes {
		b.Run("smollm2-135m/decode-batch1/"+mode.name, func(b *testing.B) {
			bf16Kernels = mode.kernels
			benchBF16Decode(b, smolLM2Config(b), 32)
		})
	}
	for _, mode := range modes {
		b.Run("smollm2-135m/train-lora-r16-4x128/"+mode.name, func(b *testing.B) {
			bf16Kernels = mode.kernels
			benchLoRATrain(b, smolLM2Config(b), true, []string{"a"}, 4, 128)
		})
	}
	for _, mode := range modes {
		b.Run("qwen2.5-0.5b/train-2xlora-r16-4x128/"+mode.name, func(b *testing.B) {
			bf16Kernels = mode.kernels
			benchLoRATrain(b, qwen25Config(b), true, []string{"planner", "tool"}, 4, 128)
		})
	}
}

func benchBF16Decode(b *testing.B, cfg hf.Config, n int) {
	m := loraBenchModel(b, cfg, true, nil)
	defer m.Free()
	if (m.bf.mm != nil) != bf16Kernels {
		b.Fatalf("BF16 kernels in use %v, want %v", m.bf.mm != nil, bf16Kernels)
	}
	prompt := make([]int32, 16)
	for j := range prompt {
		prompt[j] = int32(j * 7 % cfg.VocabSize)
	}
	opt := GenerateOptions{MaxNewTokens: n}
	if _, err := m.Generate([][]int32{prompt}, opt); err != nil {
		b.Fatal(err)
	}
	bytes := m.bf16Bytes()
	if !m.arch.tied { // the embedding is read a row a token, not whole
		bytes -= 2 * len(m.bf.mats[kEmbed])
	}
	b.ResetTimer()
	c0 := cpuTime().Seconds()
	tok := 0
	for i := 0; i < b.N; i++ {
		out, err := m.Generate([][]int32{prompt}, opt)
		if err != nil {
			b.Fatal(err)
		}
		tok += countTokens(out)
	}
	reportLlama(b, tok, c0)
	b.ReportMetric(float64(tok)*float64(bytes)/b.Elapsed().Seconds()/1e9, "weight-GB/s")
}
