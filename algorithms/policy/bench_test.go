package policy

import (
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute/cpu"
	"troupe/gpu/compute/cpu/gemm"
)

// The benchmark configs (llm.c reference: 4.7K and 808 tokens/s
// with 2 threads on this machine kind).
var (
	cfg08 = Config{Layers: 4, Heads: 4, Width: 128, Context: 64, Vocab: 64}
	cfg48 = Config{Layers: 6, Heads: 8, Width: 256, Context: 128, Vocab: 64}
)

const benchBatch = 8

// cpuTime is the process's user+system CPU time. The build machine is
// shared, so wall-clock rates swing with other load; work per CPU-second
// (reported as .../cpu-s) is the steadier figure, and 2x it is what two
// otherwise idle cores would give if the step kept both busy.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fullBatch(cfg Config, B int, seed uint64) Batch {
	r := rand.New(rand.NewPCG(seed, 1))
	return Batch{Tokens: randSeqs(r, B, cfg.Context+1, cfg.Context+1, cfg.Vocab)}
}

func benchTrain(b *testing.B, cfg Config) { benchTrainOn(b, cpu.New(), cfg) }

// benchTrainOn is benchTrain on the backend be.
func benchTrainOn(b *testing.B, be *cpu.Backend, cfg Config) {
	m := mustNew(b, be, cfg, 1)
	batch := fullBatch(cfg, benchBatch, 2)
	if _, err := m.TrainStep(batch); err != nil { // allocate everything
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if _, err := m.TrainStep(batch); err != nil {
			b.Fatal(err)
		}
	}
	tok := float64(b.N * benchBatch * cfg.Context)
	b.ReportMetric(tok/(cpuTime()-c0).Seconds(), "tokens/cpu-s")
	b.ReportMetric(tok/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(tok*float64(cfg.TrainFLOPsPerToken(cfg.Context))/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkTrain08M: forward + backward + AdamW, 0.8M params, batch 8×64.
func BenchmarkTrain08M(b *testing.B) { benchTrain(b, cfg08) }

// BenchmarkTrain48M: forward + backward + AdamW, 4.8M params, batch 8×128.
func BenchmarkTrain48M(b *testing.B) { benchTrain(b, cfg48) }

func benchGenerate(b *testing.B, cfg Config, B int) {
	m := mustNew(b, cpu.New(), cfg, 1)
	prompts := make([][]int32, B)
	for i := range prompts {
		prompts[i] = []int32{1}
	}
	opt := GenerateOptions{MaxNewTokens: cfg.Context - 1, Temperature: 1, TopK: 20, Seed: 3}
	b.ResetTimer()
	n := 0
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		out, err := m.Generate(prompts, opt)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range out {
			n += len(o)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(n)/(cpuTime()-c0).Seconds(), "tokens/cpu-s")
}

// Generation with the KV cache: new tokens per second over full-context
// completions from a one-token prompt.
func BenchmarkGenerate08MBatch1(b *testing.B)  { benchGenerate(b, cfg08, 1) }
func BenchmarkGenerate08MBatch32(b *testing.B) { benchGenerate(b, cfg08, 32) }
func BenchmarkGenerate48MBatch1(b *testing.B)  { benchGenerate(b, cfg48, 1) }
func BenchmarkGenerate48MBatch32(b *testing.B) { benchGenerate(b, cfg48, 32) }

// BenchmarkTrainMemory48M measures the heap of the 4.8M config's training
// step. With the GC off, HeapAlloc after building the model and running two
// steps counts every byte allocated, garbage included, so it bounds the peak
// heap from above. "need" is what the parameters, gradients, both AdamW
// moments and llm.c's activation set take; own-acts is this
// implementation's smaller activation set.
func BenchmarkTrainMemory48M(b *testing.B) {
	cfg := cfg48
	batch := fullBatch(cfg, benchBatch, 2)
	for i := 0; i < b.N; i++ {
		runtime.GC()
		old := debug.SetGCPercent(-1)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m := mustNew(b, cpu.New(), cfg, 1)
		for s := 0; s < 2; s++ {
			if _, err := m.TrainStep(batch); err != nil {
				b.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		debug.SetGCPercent(old)
		peak := float64(after.HeapAlloc - before.HeapAlloc)
		P := float64(cfg.NumParams())
		need := 4 * (4*P + float64(cfg.LLMCActivationFloats(benchBatch, cfg.Context)))
		own := 4 * (4*P + float64(cfg.activationFloats(benchBatch, cfg.Context)))
		b.ReportMetric(peak/(1<<20), "peak-MiB")
		b.ReportMetric(need/(1<<20), "need-MiB")
		b.ReportMetric(peak/need, "peak/need")
		b.ReportMetric(peak/own, "peak/own-acts")
		runtime.KeepAlive(m)
	}
}

// BenchmarkTrainISA: the end-to-end training steps of the GPT configs and of
// the Llama family (SmolLM2-135M shape) under every matmul micro-kernel this
// CPU runs (cpu.Config.ISA: avx512, avx2, go), in one run, so a kernel
// change shows in tokens/s beside the one it replaced.
func BenchmarkTrainISA(b *testing.B) {
	for _, isa := range gemm.ISAs() {
		if isa == "go" {
			continue // minutes per step at these sizes; its tests cover it
		}
		backend := func(b *testing.B) *cpu.Backend {
			be, err := cpu.NewWithConfig(cpu.Config{ISA: isa})
			must(b, err)
			return be
		}
		b.Run(isa+"/gpt-0.8M", func(b *testing.B) { benchTrainOn(b, backend(b), cfg08) })
		b.Run(isa+"/gpt-4.8M", func(b *testing.B) { benchTrainOn(b, backend(b), cfg48) })
		b.Run(isa+"/smollm2-135m-4x128", func(b *testing.B) {
			benchLlamaTrainOn(b, backend(b), smolLM2Config(b), 4, 128, hf.F32)
		})
	}
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}
