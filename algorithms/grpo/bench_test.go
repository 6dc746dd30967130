package grpo

import (
	"math/rand"
	"testing"
)

// BenchmarkLoss: 64 completions × 64 tokens with the KL term, per call.
func BenchmarkLoss(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	seqs := make([]Sequence, 64)
	for i := range seqs {
		s := Sequence{Advantage: rng.NormFloat64(), LogProbs: make([]float64, 64), OldLogProbs: make([]float64, 64), RefLogProbs: make([]float64, 64)}
		for t := range s.LogProbs {
			s.OldLogProbs[t] = -3 * rng.Float64()
			s.LogProbs[t] = s.OldLogProbs[t] + 0.4*(rng.Float64()-0.5)
			s.RefLogProbs[t] = s.LogProbs[t] + 0.2*(rng.Float64()-0.5)
		}
		seqs[i] = s
	}
	cfg := Config{Epsilon: 0.2, KLCoef: 0.04, Aggregation: TokenMean}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Loss(cfg, seqs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(64*64), "ns/token")
}
