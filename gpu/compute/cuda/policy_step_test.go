//go:build cudaemu || cudagpu

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"troupe/algorithms/policy"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// checkPolicySteps trains the same small policy (algorithms/policy) for a few
// steps on be and on the CPU reference backend from identical weights and
// checks losses, gradient norms, log-probs and weights agree.
func checkPolicySteps(t *testing.T, be compute.Backend) {
	t.Helper()
	cfg := policy.Config{Layers: 1, Heads: 2, Width: 32, Context: 8, Vocab: 21}
	mc, err := policy.New(be, cfg, 42)
	if err != nil {
		t.Fatalf("policy on %s: %v", be.Name(), err)
	}
	defer mc.Free()
	mr, err := policy.New(cpu.NewReference(), cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Free()
	rng := rand.New(rand.NewPCG(3, 4))
	batch := policy.Batch{Tokens: make([][]int32, 3)}
	for b := range batch.Tokens {
		n := 5 + b*2 // ragged: 5, 7, 9 tokens (9 = Context+1)
		for range n {
			batch.Tokens[b] = append(batch.Tokens[b], int32(rng.IntN(cfg.Vocab)))
		}
	}
	for step := 1; step <= 2; step++ {
		sc, err := mc.TrainStep(batch)
		if err != nil {
			t.Fatalf("step %d on %s: %v", step, be.Name(), err)
		}
		sr, err := mr.TrainStep(batch)
		if err != nil {
			t.Fatalf("step %d on the reference: %v", step, err)
		}
		t.Logf("step %d: loss %.6f vs %.6f, grad norm %.6f vs %.6f", step, sc.Loss, sr.Loss, sc.GradNorm, sr.GradNorm)
		if d := math.Abs(sc.Loss - sr.Loss); d > 1e-4*math.Max(1, sr.Loss) {
			t.Errorf("step %d: loss %v, reference %v", step, sc.Loss, sr.Loss)
		}
		if d := math.Abs(sc.GradNorm - sr.GradNorm); d > 1e-4*math.Max(1, sr.GradNorm) {
			t.Errorf("step %d: grad norm %v, reference %v", step, sc.GradNorm, sr.GradNorm)
		}
		record("policy.TrainStep.loss", math.Abs(sc.Loss-sr.Loss), math.Abs(sc.Loss-sr.Loss)/sr.Loss)
	}
	wc, err := mc.Weights()
	if err != nil {
		t.Fatal(err)
	}
	wr, err := mr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	var maxAbs, maxRef float64
	for i := range wr {
		maxAbs = math.Max(maxAbs, math.Abs(float64(wc[i])-float64(wr[i])))
		maxRef = math.Max(maxRef, math.Abs(float64(wr[i])))
	}
	record("policy.TrainStep.weights(2 steps)", maxAbs, maxAbs/maxRef)
	if maxAbs > 1e-4 {
		t.Errorf("weights after 2 steps differ by up to %.3g (max |w| %.3g)", maxAbs, maxRef)
	}
	lc, err := mc.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	lr, err := mr.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	var maxLP float64
	for b := range lr {
		for i := range lr[b] {
			maxLP = math.Max(maxLP, math.Abs(float64(lc[b][i])-float64(lr[b][i])))
		}
	}
	record("policy.LogProbs", maxLP, 0)
	if maxLP > 1e-4 {
		t.Errorf("log-probs differ by up to %.3g", maxLP)
	}

	// Generation with the KV cache (AttentionDecode): the same seed gives the
	// same completions on both backends.
	prompts := [][]int32{{1, 2, 3}, {4}}
	opt := policy.GenerateOptions{MaxNewTokens: 4, Temperature: 0.8, TopK: 5, Seed: 11}
	gc, err := mc.Generate(prompts, opt)
	if err != nil {
		t.Fatalf("generate on %s: %v", be.Name(), err)
	}
	gr, err := mr.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(gc) != fmt.Sprint(gr) {
		t.Errorf("generation differs: %v on %s, %v on the reference", gc, be.Name(), gr)
	}
}
