package agent

import (
	"context"
	"errors"
	"math"
	"testing"

	"troupe/algorithms/grpo"
	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
)

// ppoBatch samples 4 prompts × 8 completions from p and gives them
// alternating advantages ±1.
func ppoBatch(t *testing.T, p *Policy) []rl.Sample {
	t.Helper()
	prompts := []string{"p a01 g22", "t a00 g11", "p a12 g00", "t a21 g02"}
	out, err := p.Sample(context.Background(), SampleRequest{Prompts: prompts, K: 8, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	var batch []rl.Sample
	for i, o := range out {
		for j, c := range o {
			batch = append(batch, rl.Sample{Prompt: prompts[i], Completion: c, Advantage: float64(2*(j%2) - 1)})
		}
	}
	return batch
}

// TestPPOMiniBatchesMoveOffPolicy: with the whole batch in one step the
// update is on-policy (ratio 1: no clipping, approximate KL 0); with
// mini-batches of 8 the batch of 32 takes 4 optimiser steps per epoch, the
// later mini-batches are scored by moved weights, and at a large learning
// rate the clip acts.
func TestPPOMiniBatchesMoveOffPolicy(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig()
	cfg.Optim = policy.DefaultOptim()
	cfg.Optim.LR = 5e-2
	cfg.MiniBatch = WholeBatch
	whole := newTiny(t, cfg)
	st, err := whole.Update(ctx, ppoBatch(t, whole))
	if err != nil {
		t.Fatal(err)
	}
	if st.OptSteps != 1 || st.ClipFrac != 0 || st.ApproxKL > 1e-6 || math.Abs(st.RatioMean-1) > 1e-4 || st.GradNorm <= 0 {
		t.Fatalf("whole batch: %+v", st)
	}
	cfg.MiniBatch, cfg.Epochs = 8, 2
	mini := newTiny(t, cfg)
	st, err = mini.Update(ctx, ppoBatch(t, mini))
	if err != nil {
		t.Fatal(err)
	}
	if st.OptSteps != 8 || st.Samples != 32 || st.Sequences != 32 {
		t.Fatalf("mini-batches: %d steps, %d samples, %d sequences; want 8, 32, 32", st.OptSteps, st.Samples, st.Sequences)
	}
	if st.ClipFrac <= 0 || st.ApproxKL <= 1e-6 {
		t.Fatalf("mini-batches at lr 5e-2 never left the sampling policy: clip %v, approx KL %v", st.ClipFrac, st.ApproxKL)
	}
	if mini.model.Steps() != 8 {
		t.Fatalf("model took %d steps, want 8", mini.model.Steps())
	}
}

// TestPPOMicroBatchesDoNotChangeTheStep: gradient accumulation over
// micro-batches gives the same weights as one pass, for every aggregation.
func TestPPOMicroBatchesDoNotChangeTheStep(t *testing.T) {
	ctx := context.Background()
	for _, agg := range []grpo.Aggregation{grpo.TokenMean, grpo.SeqMean, grpo.ConstantNorm} {
		var ws [][]float32
		for _, micro := range []int{64, 3} {
			cfg := tinyConfig()
			cfg.MiniBatch, cfg.MicroBatch = 16, micro
			cfg.Loss = grpo.Config{Epsilon: 0.2, Aggregation: agg, ConstNorm: 3}
			p := newTiny(t, cfg)
			if _, err := p.Update(ctx, ppoBatch(t, p)); err != nil {
				t.Fatal(err)
			}
			w, err := p.model.Weights()
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		for i := range ws[0] {
			if d := math.Abs(float64(ws[0][i] - ws[1][i])); d > 1e-5 {
				t.Fatalf("%v: weight %d differs by %g between micro-batches 64 and 3", agg, i, d)
			}
		}
	}
}

// TestPPOShuffleIsSeeded: shuffled mini-batches are reproducible and differ
// from the buffer's order.
func TestPPOShuffleIsSeeded(t *testing.T) {
	ctx := context.Background()
	run := func(shuffle bool) []float32 {
		cfg := tinyConfig()
		cfg.MiniBatch, cfg.Shuffle = 8, shuffle
		p := newTiny(t, cfg)
		if _, err := p.Update(ctx, ppoBatch(t, p)); err != nil {
			t.Fatal(err)
		}
		w, _ := p.model.Weights()
		return w
	}
	a, b, c := run(true), run(true), run(false)
	same, diff := true, false
	for i := range a {
		same = same && a[i] == b[i]
		diff = diff || a[i] != c[i]
	}
	if !same || !diff {
		t.Fatalf("shuffled runs equal: %v; shuffled differs from ordered: %v", same, diff)
	}
}

func TestGreedyAndNoLogProbs(t *testing.T) {
	ctx := context.Background()
	p := newTiny(t, tinyConfig())
	prompts := []string{"p a01 g22", "t a00 g11"}
	a, err := p.Sample(ctx, SampleRequest{Prompts: prompts, K: 3, Seed: 1, Greedy: true, NoLogProbs: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Sample(ctx, SampleRequest{Prompts: prompts, K: 1, Seed: 99, Greedy: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		for _, c := range a[i] {
			if c.Text != b[i][0].Text || c.LogProbs != nil {
				t.Fatalf("greedy completions differ across seeds or carry log-probs: %+v vs %+v", c, b[i][0])
			}
		}
		if len(b[i][0].LogProbs) != len(b[i][0].Tokens) {
			t.Fatalf("scored greedy completion %+v", b[i][0])
		}
	}
}

func TestMiniBatchConfigError(t *testing.T) {
	cfg := tinyConfig()
	cfg.MiniBatch = -2
	if _, err := NewPolicy(context.Background(), cfg); !errors.Is(err, ErrConfig) {
		t.Fatalf("mini-batch -2: %v", err)
	}
}
