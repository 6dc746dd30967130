package agent

import (
	"context"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/algorithms/envs"
	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
)

// benchPolicy is the training scripts' model: 2 layers, width 64, context 59
// (planpath 6×6), sampling 2-token answers.
func benchPolicy(b *testing.B) (*Policy, []string) {
	return benchPolicyIn(b, context.Background())
}

// benchPolicyIn builds the policy in ctx (which may carry a placement).
func benchPolicyIn(b *testing.B, ctx context.Context) (*Policy, []string) {
	p, err := NewPolicy(ctx, Config{Name: "shared", Model: policy.Config{Layers: 2, Heads: 4, Width: 64, Context: 59}, Seed: 1, MaxNewTokens: 2})
	if err != nil {
		b.Fatal(err)
	}
	var prompts []string
	for s := int64(0); len(prompts) < 32; s++ {
		e, err := envs.New("planpath", envs.Config{}, s)
		if err != nil {
			b.Fatal(err)
		}
		prompts = append(prompts, e.Observe("tool"))
	}
	return p, prompts
}

// BenchmarkSample: 32 planpath prompts × K=4 (one AT-GRPO Sample call),
// generation plus the scoring pass; tokens = prompt + completion tokens.
func BenchmarkSample(b *testing.B) {
	p, prompts := benchPolicy(b)
	ctx := context.Background()
	b.ResetTimer()
	tok := 0
	for i := 0; i < b.N; i++ {
		out, err := p.Sample(ctx, SampleRequest{Prompts: prompts, K: 4, Seed: int64(i)})
		if err != nil {
			b.Fatal(err)
		}
		for j, o := range out {
			for _, c := range o {
				tok += len(prompts[j]) + 2 + len(c.Tokens)
			}
		}
	}
	b.ReportMetric(float64(tok)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkUpdate: one GRPO update on 128 samples (forward, loss, backward,
// AdamW), on the bare CPU backend and metered as a simulated GPU (what a
// policy actor placed on a simulated GPU runs), so the metering's overhead
// shows beside it in the same run.
func BenchmarkUpdate(b *testing.B) {
	b.Run("cpu", func(b *testing.B) { benchUpdate(b, context.Background()) })
	b.Run("metered", func(b *testing.B) {
		benchUpdate(b, actors.WithSelf(context.Background(), &actors.ActorInfo{ID: "bench", Name: "bench", Node: "bench-node", GPUs: []int{0}, SimulatedGPUs: true}))
	})
}

func benchUpdate(b *testing.B, ctx context.Context) {
	p, prompts := benchPolicyIn(b, ctx)
	if ws, _ := p.Weights(ctx, struct{}{}); b.N == 1 {
		b.Logf("backend: %s", ws.Backend)
	}
	out, err := p.Sample(ctx, SampleRequest{Prompts: prompts, K: 4, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	var batch []rl.Sample
	tok := 0
	for j, o := range out {
		for k, c := range o {
			batch = append(batch, rl.Sample{Prompt: prompts[j], Completion: c, Advantage: float64(k) - 1.5})
			tok += len(prompts[j]) + 2 + len(c.Tokens)
		}
	}
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		if _, err := p.Update(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(tok*b.N)/b.Elapsed().Seconds(), "tokens/s")
	// Per CPU-second of this process: steadier than wall time on a shared
	// machine.
	b.ReportMetric(float64(tok*b.N)/(processCPU()-cpu0).Seconds(), "tokens/cpu-s")
}

// processCPU is the CPU time this process has used (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUpdateMiniBatch: the same GRPO update on 128 samples as one
// optimiser step on the whole batch (the update before PPO mini-batches)
// and as PPO mini-batches of 16 (8 optimiser steps, the default), from the
// same weights every iteration.
func BenchmarkUpdateMiniBatch(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		mb   int
	}{{"whole-batch", WholeBatch}, {"minibatch16", DefaultMiniBatch}} {
		b.Run(bc.name, func(b *testing.B) {
			p, prompts := benchPolicy(b)
			p.cfg.MiniBatch = bc.mb
			out, err := p.Sample(ctx, SampleRequest{Prompts: prompts, K: 4, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			var batch []rl.Sample
			tok := 0
			for j, o := range out {
				for k, c := range o {
					batch = append(batch, rl.Sample{Prompt: prompts[j], Completion: c, Advantage: float64(k) - 1.5})
					tok += len(prompts[j]) + 2 + len(c.Tokens)
				}
			}
			w0, err := p.model.Weights()
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if err := p.model.SetWeights(w0); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := p.Update(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(tok*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
