package policy

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"troupe/algorithms/policy/hf"
	"troupe/algorithms/policy/tokenizer"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// tiny is a from-scratch shape small enough for tests that train.
var tiny = Config{Layers: 2, Heads: 2, Width: 16, Context: 16, Vocab: 11}

// tinyShape is tiny's Llama config.
func tinyShape(t testing.TB) hf.Config {
	t.Helper()
	c, err := tiny.HF(0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func randSeqs(r *rand.Rand, B, minLen, maxLen, V int) [][]int32 {
	out := make([][]int32, B)
	for b := range out {
		n := minLen + r.IntN(maxLen-minLen+1)
		out[b] = make([]int32, n)
		for i := range out[b] {
			out[b][i] = int32(r.IntN(V))
		}
	}
	return out
}

// plainBackend hides everything beyond compute.Backend.
type plainBackend struct{ compute.Backend }

func TestConfigHF(t *testing.T) {
	c, err := Config{Layers: 2, Heads: 4, Width: 64, Context: 59, Vocab: 64}.HF(1)
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelType != hf.Llama || c.NumHiddenLayers != 2 || c.HiddenSize != 64 || c.NumAttentionHeads != 4 ||
		c.NumKeyValueHeads != 1 || c.HeadDim != 16 || c.IntermediateSize != 176 || c.MaxPositionEmbeddings != 59 ||
		c.VocabSize != 64 || !c.TieWordEmbeddings {
		t.Fatalf("config %+v", c)
	}
	if c, err = tiny.HF(0); err != nil || c.NumKeyValueHeads != tiny.Heads {
		t.Fatalf("kv heads 0: %d, %v", c.NumKeyValueHeads, err)
	}
	if _, err := (Config{Layers: 1, Heads: 3, Width: 16, Context: 8, Vocab: 8}).HF(0); !errors.Is(err, ErrConfig) {
		t.Fatalf("heads not dividing width accepted: %v", err)
	}
}

func TestTrainStepSteadyStateAllocations(t *testing.T) {
	// After the first step every buffer and kernel job exists: later steps
	// allocate only a few small objects (per-call views, gemm's sync.Pool
	// refilling after a GC), never per layer or per token.
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, layers := range []int{1, 4} {
		shape := tiny
		shape.Layers = layers
		cfg, err := shape.HF(0)
		if err != nil {
			t.Fatal(err)
		}
		m := mustLlama(t, cpu.New(), cfg, 71)
		batch := Batch{Tokens: randSeqs(rand.New(rand.NewPCG(7, 7)), 4, 17, 17, tiny.Vocab)}
		if _, err := m.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(5, func() {
			if _, err := m.TrainStep(batch); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 16 {
			t.Fatalf("%d layers: %.1f allocations per steady-state training step, want at most 16", layers, allocs)
		}
	}
}

func TestByteTokenizerModelLearnsText(t *testing.T) {
	// A byte-level model (vocab 260) learns a short string and regenerates
	// it greedily from BOS; generation stops at EOS.
	var bt tokenizer.Byte
	cfg, err := Config{Layers: 1, Heads: 2, Width: 32, Context: 16, Vocab: tokenizer.ByteVocab}.HF(0)
	if err != nil {
		t.Fatal(err)
	}
	m := mustLlama(t, cpu.New(), cfg, 81)
	m.Optim.LR = 1e-2
	text := "hello, agent"
	seq := append(bt.Encode(text, true), tokenizer.ByteEOS)
	for i := 0; i < 150; i++ {
		if _, err := m.TrainStep(Batch{Tokens: [][]int32{seq}}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := m.Generate([][]int32{{tokenizer.ByteBOS}}, GenerateOptions{MaxNewTokens: 15, Stop: []int32{tokenizer.ByteEOS}})
	if err != nil {
		t.Fatal(err)
	}
	if got := bt.Decode(out[0], true); got != text || out[0][len(out[0])-1] != tokenizer.ByteEOS {
		t.Fatalf("generated %q (%v), want %q then EOS", got, out[0], text)
	}
	// VocabLimit keeps sampling inside the first ids
	lim, err := m.Generate([][]int32{{tokenizer.ByteBOS}}, GenerateOptions{MaxNewTokens: 10, Temperature: 2, Seed: 5, VocabLimit: 50})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range lim[0] {
		if id >= 50 {
			t.Fatalf("sampled id %d beyond VocabLimit 50", id)
		}
	}
}

func TestPolicyGradientLearnsReward(t *testing.T) {
	// GRPO in miniature: sample a group of completions, reward those whose
	// first token is 7, push group-normalised advantages through
	// StepFromLogProbGrads (d loss/d logp = -advantage/count), and the
	// policy must come to prefer 7.
	m := mustLlama(t, cpu.New(), tinyShape(t), 91)
	m.Optim.LR = 1e-2
	prompt := []int32{1, 2}
	const G = 16
	probOf7 := func() float64 {
		lp, err := m.LogProbs(Batch{Tokens: [][]int32{{1, 2, 7}}})
		if err != nil {
			t.Fatal(err)
		}
		return math.Exp(float64(lp[0][1]))
	}
	before := probOf7()
	prompts := make([][]int32, G)
	for i := range prompts {
		prompts[i] = prompt
	}
	for it := 0; it < 15; it++ {
		outs, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 2, Temperature: 1, Seed: uint64(it)})
		if err != nil {
			t.Fatal(err)
		}
		rewards := make([]float64, G)
		var mean float64
		for i, o := range outs {
			if o[0] == 7 {
				rewards[i] = 1
			}
			mean += rewards[i] / G
		}
		var batch Batch
		var grads [][]float32
		for i, o := range outs {
			seq := append(append([]int32(nil), prompt...), o...)
			g := make([]float32, len(seq)-1)
			for t := len(prompt) - 1; t < len(g); t++ {
				g[t] = -float32(rewards[i]-mean) / float32(G*len(o))
			}
			batch.Tokens = append(batch.Tokens, seq)
			grads = append(grads, g)
		}
		if _, err := m.StepFromLogProbGrads(batch, grads); err != nil {
			t.Fatal(err)
		}
	}
	if after := probOf7(); after < 0.5 || after < 3*before {
		t.Fatalf("p(7 | prompt) %.3f -> %.3f, want it learned", before, after)
	}
}
