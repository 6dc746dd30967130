package rl

import (
	"context"
	"math"
	"testing"

	"troupe/algorithms/grpo"
)

func TestDeriveSeed(t *testing.T) {
	a, b := DeriveSeed(1, 2, 3), DeriveSeed(1, 2, 3)
	if a != b {
		t.Fatal("DeriveSeed not deterministic")
	}
	seen := map[int64]bool{}
	for _, s := range []int64{DeriveSeed(1), DeriveSeed(2), DeriveSeed(1, 0), DeriveSeed(1, 1), DeriveSeed(1, 0, 1), DeriveSeed(1, 1, 0)} {
		if seen[s] {
			t.Fatalf("collision in derived seeds: %d", s)
		}
		seen[s] = true
	}
}

func TestScripted(t *testing.T) {
	p := NewScripted(map[string][]string{"q": {"a", "b"}}, "z")
	out, err := p.Sample(context.Background(), []string{"q", "other"}, 3, 9)
	if err != nil {
		t.Fatal(err)
	}
	if out[0][0].Text != "a" || out[0][1].Text != "b" || out[0][2].Text != "a" || out[1][2].Text != "z" {
		t.Errorf("scripted texts %+v", out)
	}
	if p.Sampled() != 6 || p.Calls()[0].Seed != 9 {
		t.Errorf("recorded %d samples, calls %+v", p.Sampled(), p.Calls())
	}
	if _, err := p.Sample(context.Background(), []string{"q"}, 0, 0); err == nil {
		t.Error("k=0 accepted")
	}
}

// TestTabularGradient checks the logit gradient Tabular applies against a
// finite difference of grpo.Loss through the softmax.
func TestTabularGradient(t *testing.T) {
	cfg := grpo.Config{Epsilon: 0.2, Aggregation: grpo.TokenMean, KLCoef: 0.1}
	p, err := NewTabular([]string{"x", "y", "z"}, 1e-3, 1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.logits["s"] = []float64{0.3, -0.2, 0.5}
	batch := []Sample{
		{Prompt: "s", Completion: Completion{Tokens: []int{0}}, OldLogProbs: []float32{-1.3}, RefLogProbs: []float32{-1.0}, Advantage: 1.5},
		{Prompt: "s", Completion: Completion{Tokens: []int{2}}, OldLogProbs: []float32{-0.9}, RefLogProbs: []float32{-1.2}, Advantage: -0.7},
		{Prompt: "s", Completion: Completion{Tokens: []int{1}}, OldLogProbs: []float32{-1.4}, Advantage: 0.4},
	}
	loss := func(z []float64) float64 {
		pr := softmax(z)
		seqs := make([]grpo.Sequence, len(batch))
		for i, s := range batch {
			seq, err := s.Sequence([]float64{math.Log(pr[s.Completion.Tokens[0]])})
			if err != nil {
				t.Fatal(err)
			}
			seqs[i] = seq
		}
		r, err := grpo.Loss(cfg, seqs)
		if err != nil {
			t.Fatal(err)
		}
		return r.Loss
	}
	z0 := append([]float64(nil), p.logits["s"]...)
	if _, err := p.Update(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	for j := range z0 {
		analytic := (z0[j] - p.logits["s"][j]) / p.LR
		const h = 1e-6
		zp := append([]float64(nil), z0...)
		zm := append([]float64(nil), z0...)
		zp[j] += h
		zm[j] -= h
		fd := (loss(zp) - loss(zm)) / (2 * h)
		if math.Abs(fd-analytic) > 1e-6 {
			t.Errorf("logit %d: applied gradient %v, finite difference %v", j, analytic, fd)
		}
	}
	if _, err := p.Update(context.Background(), []Sample{{Prompt: "s", Completion: Completion{Tokens: []int{7}, LogProbs: []float32{-1}}}}); err == nil {
		t.Error("out-of-range token accepted")
	}
}

func TestTabularSampleDeterministic(t *testing.T) {
	p, _ := NewTabular([]string{"a", "b", "c"}, 0.1, 1, grpo.DefaultConfig())
	a, _ := p.Sample(context.Background(), []string{"s"}, 8, 42)
	b, _ := p.Sample(context.Background(), []string{"s"}, 8, 42)
	for j := range a[0] {
		if a[0][j].Text != b[0][j].Text {
			t.Fatal("same seed, different samples")
		}
		if math.Abs(float64(a[0][j].LogProbs[0])-math.Log(1.0/3)) > 1e-6 {
			t.Fatalf("uniform log-prob %v", a[0][j].LogProbs[0])
		}
	}
	lp, err := p.LogProbs(context.Background(), []string{"s"}, []Completion{a[0][0]})
	if err != nil || lp[0][0] != a[0][0].LogProbs[0] {
		t.Fatalf("LogProbs %v %v", lp, err)
	}
}

func TestSequences(t *testing.T) {
	batch := []Sample{
		{Completion: Completion{LogProbs: []float32{-1, -2}}, Advantage: 0.5},
		{Completion: Completion{LogProbs: []float32{-3}}, OldLogProbs: []float32{-4}, RefLogProbs: []float32{-5}, Advantage: -1},
	}
	seqs, err := Sequences(batch, [][]float64{{-1.5, -2}, {-3}})
	if err != nil {
		t.Fatal(err)
	}
	if seqs[0].OldLogProbs[1] != -2 || seqs[0].RefLogProbs != nil || seqs[1].OldLogProbs[0] != -4 || seqs[1].RefLogProbs[0] != -5 || seqs[1].Advantage != -1 {
		t.Errorf("sequences %+v", seqs)
	}
	if _, err := Sequences(batch, [][]float64{{-1}, {-3}}); err == nil {
		t.Error("length mismatch accepted")
	}
	if _, err := Sequences(batch, nil); err == nil {
		t.Error("row count mismatch accepted")
	}
}
