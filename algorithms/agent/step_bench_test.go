package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
)

// BenchmarkATGRPOStep is one AT-GRPO training step of the main job
// (planpath 6×6, 8 grids, K = 4, per-role 2-layer width-64 policies in this
// process, warm-started briefly so that episodes look like training's),
// with the update as one optimiser step on the whole batch (the update
// before PPO mini-batches) and as PPO mini-batches of 16 samples (now the
// default). Both sub-benchmarks start from the same weights and train the
// same way, so their ratio is the cost of the mini-batches. Metrics:
// tokens/s (generated + trained), s/step, and update-s/step: the wall time
// of the two policies' updates (which run at the same time) summed.
func BenchmarkATGRPOStep(b *testing.B) {
	ctx := context.Background()
	ecfg := envs.Config{Width: 6, Height: 6}
	obs, _ := envs.MaxObsLen("planpath", ecfg)
	act, _ := envs.MaxActionLen("planpath", ecfg)
	seeds := make([]int64, 150)
	for i := range seeds {
		seeds[i] = int64(i)
	}
	ex, _, err := envs.Transcripts("planpath", ecfg, seeds, envs.TranscriptOptions{Noise: 0.2, NoiseSeed: 1})
	if err != nil {
		b.Fatal(err)
	}
	warm := map[string][]float32{}
	for _, role := range []string{"tool", "planner"} {
		p := newBenchRole(b, role, obs+act+3, act+1, WholeBatch)
		var exs []Example
		for _, e := range ex {
			if e.Role == role {
				exs = append(exs, Example{Prompt: e.Obs, Answer: e.Action})
			}
		}
		if _, err := p.SFT(ctx, SFTRequest{Examples: exs, Epochs: 3, BatchSize: 32, LR: 2e-3, Seed: 1}); err != nil {
			b.Fatal(err)
		}
		w, err := p.model.Weights()
		if err != nil {
			b.Fatal(err)
		}
		warm[role] = w
	}
	for _, bc := range []struct {
		name string
		mb   int
	}{{"update=whole-batch", WholeBatch}, {"update=minibatch16", DefaultMiniBatch}} {
		b.Run(bc.name, func(b *testing.B) {
			pols := map[string]rl.Policy{}
			var ps []*Policy
			var (
				mu  sync.Mutex
				upd time.Duration
			)
			for _, role := range []string{"tool", "planner"} {
				p := newBenchRole(b, role, obs+act+3, act+1, bc.mb)
				if err := p.model.SetWeights(warm[role]); err != nil {
					b.Fatal(err)
				}
				pols[role] = &timedUpdate{Local: Local{P: p}, mu: &mu, d: &upd}
				ps = append(ps, p)
			}
			tr := &atgrpo.Trainer{
				Config:   atgrpo.Config{K: 4, Alpha: 1, Envs: 8, MaxTurns: 64, Advantage: grpo.StdNormalized, Seed: 1},
				Policies: atgrpo.PerRole(pols),
				NewEnv:   func(_ int, seed int64) (envs.Env, error) { return envs.New("planpath", ecfg, seed) },
			}
			tokens := func() int64 {
				var n int64
				for _, p := range ps {
					n += p.gen + p.train
				}
				return n
			}
			t0 := tokens()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := tr.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(tokens()-t0)/sec, "tokens/s")
			b.ReportMetric(sec/float64(b.N), "s/step")
			b.ReportMetric(upd.Seconds()/float64(b.N), "update-s/step")
		})
	}
}

func newBenchRole(b *testing.B, role string, ctxLen, maxNew, mb int) *Policy {
	optim := policy.DefaultOptim()
	optim.LR, optim.WeightDecay = 3e-4, 0
	p, err := NewPolicy(context.Background(), Config{Name: role, Model: policy.Config{Layers: 2, Heads: 4, Width: 64, Context: ctxLen},
		Seed: 2, Optim: optim, Loss: grpo.Config{Epsilon: 0.2, Aggregation: grpo.TokenMean}, MiniBatch: mb, MaxNewTokens: maxNew})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// timedUpdate adds the wall time of every Update to d.
type timedUpdate struct {
	Local
	mu *sync.Mutex
	d  *time.Duration
}

func (t *timedUpdate) Update(ctx context.Context, batch []rl.Sample) (rl.UpdateStats, error) {
	t0 := time.Now()
	st, err := t.Local.Update(ctx, batch)
	t.mu.Lock()
	*t.d += time.Since(t0)
	t.mu.Unlock()
	return st, err
}
