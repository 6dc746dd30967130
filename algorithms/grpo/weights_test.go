package grpo

import (
	"errors"
	"math"
	"testing"
)

// TestLossTokenWeights checks the decoupled objective's per-token weights:
// weight 1 is the unweighted loss exactly, weight w scales a token's
// policy-gradient loss and gradient by w, 0 drops it, and bad weights fail.
func TestLossTokenWeights(t *testing.T) {
	cfg := DefaultConfig()
	base := Sequence{LogProbs: []float64{-1, -0.5, -2}, OldLogProbs: []float64{-1.1, -0.2, -2}, Advantage: 0.7}
	plain, err := Loss(cfg, []Sequence{base})
	if err != nil {
		t.Fatal(err)
	}
	ones := base
	ones.Weights = []float64{1, 1, 1}
	r1, err := Loss(cfg, []Sequence{ones})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Loss != plain.Loss {
		t.Fatalf("weights 1: loss %v, want %v", r1.Loss, plain.Loss)
	}
	w := base
	w.Weights = []float64{2, 0, 0.5}
	rw, err := Loss(cfg, []Sequence{w})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range w.Weights {
		if got, want := rw.Grads[0][i], s*plain.Grads[0][i]; math.Abs(got-want) > 1e-12 {
			t.Errorf("token %d: grad %v, want %v", i, got, want)
		}
	}
	var want float64
	n := float64(len(base.LogProbs))
	for i, lp := range base.LogProbs {
		want += w.Weights[i] * TokenLoss(cfg, lp, base.OldLogProbs[i], 0, false, base.Advantage).Loss / n
	}
	if math.Abs(rw.Loss-want) > 1e-12 {
		t.Fatalf("weighted loss %v, want %v", rw.Loss, want)
	}
	for _, bad := range [][]float64{{1, 1}, {1, -1, 1}, {1, math.NaN(), 1}} {
		s := base
		s.Weights = bad
		if _, err := Loss(cfg, []Sequence{s}); !errors.Is(err, ErrInput) {
			t.Errorf("weights %v: err %v, want ErrInput", bad, err)
		}
	}
}
