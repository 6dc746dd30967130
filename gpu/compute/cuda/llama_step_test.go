//go:build cudaemu || cudagpu

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// tinyLlama is a small decoder that reaches every DecoderBackend op:
// Qwen3 (RMSNorm, RoPE, SwiGLU, per-head q/k RMSNorm, untied head) with
// grouped-query attention (4 query heads on 2 kv heads) and a head size (6)
// unrelated to width/heads (4). MQA, MHA, T=1 and longer rows are covered
// op by op (decoder_ops_test.go); one model keeps the emulator's time down.
func tinyLlama(t *testing.T) hf.Config {
	t.Helper()
	c, err := hf.NewConfig(hf.Qwen3)
	if err != nil {
		t.Fatal(err)
	}
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 13, 16, 24, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 4, 2, 6
	c.MaxPositionEmbeddings = 12
	c.RopeTheta = 100
	c.TieWordEmbeddings = false
	c.SlidingWindow, c.UseSlidingWindow, c.LayerTypes = 0, false, nil
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// checkLlamaSteps trains the same tiny Llama-family model (algorithms/policy)
// on be and on the CPU reference backend from identical, perturbed weights:
// a cross-entropy step and a log-prob-gradient step, then log-probs and
// seeded KV-cache generation. Losses, gradient norms, weights and
// log-probs agree within 1e-4 (README.md's tolerance).
func checkLlamaSteps(t *testing.T, be compute.Backend) {
	t.Helper()
	checkLlamaStepsOf(t, be, tinyLlama(t))
}

// checkLlamaStepsOf is checkLlamaSteps for a model of cfg (a context of at
// least 12 positions, a vocabulary of at least 10 ids).
func checkLlamaStepsOf(t *testing.T, be compute.Backend, cfg hf.Config) {
	t.Helper()
	mc, err := policy.NewLlama(be, cfg, 42)
	if err != nil {
		t.Fatalf("llama on %s: %v", be.Name(), err)
	}
	defer mc.Free()
	mr, err := policy.NewLlama(cpu.NewReference(), cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Free()
	// Perturb the weights so logits are far from uniform and every
	// gradient far from zero (the default init is N(0, 0.02)).
	w, err := mr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range w {
		w[i] += float32(rng.NormFloat64() * 0.3)
	}
	if err := mr.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	if err := mc.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	V := cfg.VocabSize
	batch := policy.Batch{Tokens: make([][]int32, 3)}
	for b := range batch.Tokens {
		n := 4 + b*4 // ragged: 4, 8, 12 tokens (12 = the context)
		for range n {
			batch.Tokens[b] = append(batch.Tokens[b], int32(rng.IntN(V)))
		}
	}
	closeTo := func(what string, got, want float64) {
		t.Helper()
		d := math.Abs(got - want)
		record("llama."+what, d, d/math.Max(math.Abs(want), 1e-30))
		if d > 1e-4*math.Max(1, math.Abs(want)) {
			t.Errorf("%s: %v on %s, reference %v", what, got, be.Name(), want)
		}
	}
	sc, err := mc.TrainStep(batch)
	if err != nil {
		t.Fatalf("train step on %s: %v", be.Name(), err)
	}
	sr, err := mr.TrainStep(batch)
	if err != nil {
		t.Fatalf("train step on the reference: %v", err)
	}
	t.Logf("train step: loss %.6f vs %.6f, grad norm %.6f vs %.6f", sc.Loss, sr.Loss, sc.GradNorm, sr.GradNorm)
	closeTo("TrainStep.loss", sc.Loss, sr.Loss)
	closeTo("TrainStep.gradnorm", sc.GradNorm, sr.GradNorm)
	// The policy-gradient path: d/dθ of sum g·logp.
	g := make([][]float32, len(batch.Tokens))
	for b, s := range batch.Tokens {
		g[b] = make([]float32, len(s)-1)
		for i := range g[b] {
			g[b][i] = float32(rng.NormFloat64())
		}
	}
	if sc, err = mc.StepFromLogProbGrads(batch, g); err != nil {
		t.Fatalf("log-prob step on %s: %v", be.Name(), err)
	}
	if sr, err = mr.StepFromLogProbGrads(batch, g); err != nil {
		t.Fatal(err)
	}
	t.Logf("log-prob step: grad norm %.6f vs %.6f", sc.GradNorm, sr.GradNorm)
	closeTo("StepFromLogProbGrads.gradnorm", sc.GradNorm, sr.GradNorm)

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
	record("llama.weights(2 steps)", maxAbs, maxAbs/maxRef)
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
	record("llama.LogProbs", maxLP, 0)
	if maxLP > 1e-4 {
		t.Errorf("log-probs differ by up to %.3g", maxLP)
	}

	// Generation with the KV cache (RopeForward and GQAttentionDecode at
	// per-row positions): ragged prompts, the same seed gives the same
	// completions on both backends.
	prompts := [][]int32{{1, 2, 3}, {4}, {5, 6, 7, 8, 9}}
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
