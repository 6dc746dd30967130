package policy

import (
	"errors"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// tinyHF is a small config of model type typ with a head size independent
// of hidden/heads and grouped-query attention; mod adjusts it.
func tinyHF(t testing.TB, typ string, mod func(c *hf.Config)) hf.Config {
	t.Helper()
	c, err := hf.NewConfig(typ)
	if err != nil {
		t.Fatal(err)
	}
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 13, 16, 24, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 4, 2, 6
	c.MaxPositionEmbeddings = 24
	c.RopeTheta = 100
	c.SlidingWindow, c.UseSlidingWindow, c.LayerTypes = 0, false, nil
	if mod != nil {
		mod(&c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// tinyVariants covers every structural option of the family.
func tinyVariants(t testing.TB) map[string]hf.Config {
	return map[string]hf.Config{
		"llama-gqa-tied": tinyHF(t, hf.Llama, func(c *hf.Config) { c.TieWordEmbeddings = true }),
		"llama-mqa-biases-llama3": tinyHF(t, hf.Llama, func(c *hf.Config) {
			c.NumKeyValueHeads, c.AttentionBias, c.MLPBias, c.TieWordEmbeddings = 1, true, true, false
			c.RopeScaling = &hf.RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8}
		}),
		"qwen2-bias":   tinyHF(t, hf.Qwen2, func(c *hf.Config) { c.TieWordEmbeddings = true }),
		"qwen3-qknorm": tinyHF(t, hf.Qwen3, func(c *hf.Config) { c.NumKeyValueHeads, c.TieWordEmbeddings = 4, false }),
	}
}

func mustLlama(t testing.TB, be compute.Backend, cfg hf.Config, seed uint64) *Llama {
	t.Helper()
	m, err := NewLlama(be, cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// perturb adds N(0, std) noise to every weight, so gradients are far from
// zero and logits far from uniform.
func perturb(t testing.TB, m LM, seed uint64, std float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 9))
	w, err := m.Weights()
	if err != nil {
		t.Fatal(err)
	}
	for i := range w {
		w[i] += float32(r.NormFloat64() * std)
	}
	if err := m.SetWeights(w); err != nil {
		t.Fatal(err)
	}
}

func (m *Llama) gradients(t testing.TB) []float32 {
	g := make([]float32, m.nparams)
	m.be.Download(g, m.grads)
	if err := m.be.Sync(); err != nil {
		t.Fatal(err)
	}
	return g
}

func randGrads(r *rand.Rand, seqs [][]int32) [][]float32 {
	g := make([][]float32, len(seqs))
	for b, s := range seqs {
		g[b] = make([]float32, len(s)-1)
		for i := range g[b] {
			g[b][i] = float32(r.NormFloat64())
		}
	}
	return g
}

func dotLogProbs(t testing.TB, m LM, batch Batch, g [][]float32) float64 {
	lp, err := m.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for b := range lp {
		for i, v := range lp[b] {
			s += float64(g[b][i]) * float64(v)
		}
	}
	return s
}

// TestLlamaGradientsFiniteDifferences checks the whole backward pass of
// every variant, both loss heads, against central differences on the
// reference backend, at coordinates in every tensor kind.
func TestLlamaGradientsFiniteDifferences(t *testing.T) {
	for name, cfg := range tinyVariants(t) {
		t.Run(name, func(t *testing.T) {
			m := mustLlama(t, cpu.NewReference(), cfg, 11)
			perturb(t, m, 12, 0.3)
			r := rand.New(rand.NewPCG(13, 13))
			batch := Batch{Tokens: randSeqs(r, 3, 3, 9, cfg.VocabSize)}
			g := randGrads(r, batch.Tokens)
			if err := m.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
			if err := m.AccumulateLogProbGrads(batch, g); err != nil {
				t.Fatal(err)
			}
			checkLlamaFD(t, "logprob", m, m.gradients(t), func() float64 { return dotLogProbs(t, m, batch, g) }, r)

			batch.Weights = make([][]float32, len(batch.Tokens))
			for b, s := range batch.Tokens {
				batch.Weights[b] = make([]float32, len(s)-1)
				for i := range batch.Weights[b] {
					batch.Weights[b][i] = float32(r.IntN(3))
				}
			}
			if err := m.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := m.AccumulateCE(batch, 1); err != nil {
				t.Fatal(err)
			}
			ce := func() float64 {
				B, T, err := m.load(batch, false)
				if err != nil {
					t.Fatal(err)
				}
				m.forward(B, T)
				s, _, err := m.ceLoss(B * T)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			checkLlamaFD(t, "crossentropy", m, m.gradients(t), ce, r)
		})
	}
}

func checkLlamaFD(t *testing.T, name string, m *Llama, grad []float32, loss func() float64, r *rand.Rand) {
	t.Helper()
	w, _ := m.Weights()
	var sc float64
	for _, g := range grad {
		sc = math.Max(sc, math.Abs(float64(g)))
	}
	off := 0
	const eps = 1e-2
	for k, n := range m.sizes {
		for j := 0; j < 4 && n > 0; j++ {
			i := off + r.IntN(n)
			old := w[i]
			w[i] = old + eps
			m.SetWeights(w)
			lp := loss()
			w[i] = old - eps
			m.SetWeights(w)
			lm := loss()
			w[i] = old
			m.SetWeights(w)
			fd := (lp - lm) / float64((old+eps)-(old-eps))
			if d := math.Abs(fd - float64(grad[i])); d > 3e-2*(sc+math.Abs(fd)) && d > 1e-4 {
				t.Fatalf("%s: %s index %d: finite difference %g, analytic %g (scale %g)", name, m.kinds[k].hf, i-off, fd, grad[i], sc)
			}
		}
		off += n
	}
}

// TestLlamaHeadChunks: splitting the output head into row chunks (a large
// vocabulary) gives the same log-probs and gradients as one chunk.
func TestLlamaHeadChunks(t *testing.T) {
	cfg := tinyVariants(t)["qwen3-qknorm"]
	r := rand.New(rand.NewPCG(3, 3))
	batch := Batch{Tokens: randSeqs(r, 3, 4, 9, cfg.VocabSize)}
	g := randGrads(r, batch.Tokens)
	run := func() ([][]float32, []float32) {
		m := mustLlama(t, cpu.New(), cfg, 5)
		perturb(t, m, 6, 0.2)
		lp, err := m.LogProbs(batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
		if err := m.AccumulateLogProbGrads(batch, g); err != nil {
			t.Fatal(err)
		}
		return lp, m.gradients(t)
	}
	lp1, g1 := run()
	old := headBudget
	headBudget = 3 * cfg.VocabSize // three rows per chunk
	defer func() { headBudget = old }()
	lp2, g2 := run()
	for b := range lp1 {
		for i := range lp1[b] {
			if d := math.Abs(float64(lp1[b][i] - lp2[b][i])); d > 1e-5 {
				t.Fatalf("row %d pos %d: log-prob %v in one chunk, %v in chunks", b, i, lp1[b][i], lp2[b][i])
			}
		}
	}
	for i := range g1 {
		if d := math.Abs(float64(g1[i] - g2[i])); d > 1e-4*(1+math.Abs(float64(g1[i]))) {
			t.Fatalf("gradient %d: %v in one chunk, %v in chunks", i, g1[i], g2[i])
		}
	}
}

func TestLlamaBatchedLogProbsMatchSingle(t *testing.T) {
	for name, cfg := range tinyVariants(t) {
		m := mustLlama(t, cpu.New(), cfg, 4)
		perturb(t, m, 5, 0.2)
		r := rand.New(rand.NewPCG(5, 5))
		seqs := randSeqs(r, 5, 2, cfg.MaxPositionEmbeddings+1, cfg.VocabSize)
		all, err := m.LogProbs(Batch{Tokens: seqs})
		if err != nil {
			t.Fatal(err)
		}
		for b, s := range seqs {
			one, err := m.LogProbs(Batch{Tokens: [][]int32{s}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range one[0] {
				if d := math.Abs(float64(one[0][i] - all[b][i])); d > 1e-5 {
					t.Fatalf("%s row %d pos %d: batched %v single %v", name, b, i, all[b][i], one[0][i])
				}
			}
		}
	}
}

func TestLlamaKVCacheMatchesNoCache(t *testing.T) {
	oldBudget := prefillBudget
	defer func() { prefillBudget = oldBudget }()
	for name, cfg := range tinyVariants(t) {
		backends := []compute.Backend{cpu.New()}
		if name == "qwen3-qknorm" { // the other backends once, on the variant with the most ops
			backends = append(backends, cpu.NewReference(), plainBackend{cpu.New()})
		}
		for _, be := range backends {
			m := mustLlama(t, be, cfg, 21)
			perturb(t, m, 22, 0.3)
			m.DecodeTransposed = true // until round 5
			prompts := [][]int32{{1, 2, 3}, {4}, {5, 6, 7, 8, 9, 10, 11}, {12, 0}, make([]int32, 23)}
			// Rounds 1 and 3-5 reuse the KV cache kept from a call with
			// more positions (Llama.kept): a wider stride and stale values
			// past each row's positions.
			for round, opt := range []GenerateOptions{
				{MaxNewTokens: 12, Temperature: 0},
				{MaxNewTokens: 10, Temperature: 1, Seed: 7},
				{MaxNewTokens: 30, Temperature: 0.8, TopK: 4, Seed: 8, Stop: []int32{3}},
				{MaxNewTokens: 9, Temperature: 1.2, TopP: 0.7, Seed: 9},
				{MaxNewTokens: 9, Temperature: 0.9, TopK: 6, TopP: 0.8, Seed: 10, VocabLimit: 11},
				{MaxNewTokens: 12, Temperature: 0},
			} {
				switch round {
				case 2: // prompts prefilled in several row groups
					prefillBudget = cfg.NumAttentionHeads * 7 * 7 * 2
				case 5: // weights changed since the last call: the decode copies must follow
					prefillBudget = oldBudget
					if _, err := m.TrainStep(Batch{Tokens: prompts[2:3]}); err != nil {
						t.Fatal(err)
					}
					m.DecodeTransposed = false
				}
				got, err := m.Generate(prompts, opt)
				if err != nil {
					t.Fatal(err)
				}
				want, err := m.generateNoCache(prompts, opt)
				if err != nil {
					t.Fatal(err)
				}
				for b := range got {
					if !slices.Equal(got[b], want[b]) {
						t.Fatalf("%s %s %+v row %d: cache %v, no cache %v", name, be.Name(), opt, b, got[b], want[b])
					}
					if len(got[b])+len(prompts[b]) > m.ContextLen() || (len(prompts[b]) < m.ContextLen() && len(got[b]) == 0) {
						t.Fatalf("%s row %d: %d tokens after a %d-token prompt", name, b, len(got[b]), len(prompts[b]))
					}
					if i := slices.Index(got[b], 3); opt.Stop != nil && i >= 0 && i != len(got[b])-1 {
						t.Fatalf("row %d continued past stop token: %v", b, got[b])
					}
					for _, id := range got[b] {
						if opt.VocabLimit > 0 && int(id) >= opt.VocabLimit {
							t.Fatalf("row %d sampled %d beyond VocabLimit %d", b, id, opt.VocabLimit)
						}
					}
				}
			}
		}
	}
}

func TestLlamaGenerateSeeds(t *testing.T) {
	m := mustLlama(t, cpu.New(), tinyVariants(t)["qwen2-bias"], 31)
	perturb(t, m, 32, 0.3)
	prompts := [][]int32{{1, 2}, {1, 2}, {3}}
	opt := GenerateOptions{MaxNewTokens: 10, Temperature: 1, TopP: 0.95, Seed: 42}
	a, err := m.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Generate(prompts, opt)
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Fatalf("same seed, row %d: %v then %v", i, a[i], b[i])
		}
	}
	if slices.Equal(a[0], a[1]) {
		t.Fatalf("rows 0 and 1 share a seed stream: %v", a[0])
	}
	opt.Seed = 43
	c, _ := m.Generate(prompts, opt)
	if slices.Equal(a[0], c[0]) && slices.Equal(a[2], c[2]) {
		t.Fatal("another seed gives the same completions")
	}
	// top-k 1 is greedy
	g1, _ := m.Generate(prompts, GenerateOptions{MaxNewTokens: 10, Temperature: 1, TopK: 1, Seed: 1})
	g0, _ := m.Generate(prompts, GenerateOptions{MaxNewTokens: 10})
	for i := range g1 {
		if !slices.Equal(g0[i], g1[i]) {
			t.Fatalf("top-k 1 %v != greedy %v", g1[i], g0[i])
		}
	}
	for _, bad := range []GenerateOptions{{MaxNewTokens: -1}, {TopP: 1.5}, {TopK: -1}} {
		if _, err := m.Generate(prompts, bad); !errors.Is(err, ErrBatch) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
}

// TestSamplerTopP checks the nucleus against its definition on a fixed
// distribution: the sampler draws only from the smallest top set of mass
// >= TopP, in proportion.
func TestSamplerTopP(t *testing.T) {
	// probabilities 0.4, 0.3, 0.2, 0.1 (ids 3, 0, 2, 1)
	logits := []float32{float32(math.Log(0.3)), float32(math.Log(0.1)), float32(math.Log(0.2)), float32(math.Log(0.4))}
	for _, tc := range []struct {
		p    float32
		want map[int32]float64
	}{
		{0.5, map[int32]float64{3: 4.0 / 7, 0: 3.0 / 7}},
		{0.39, map[int32]float64{3: 1}},
		{0.75, map[int32]float64{3: 4.0 / 9, 0: 3.0 / 9, 2: 2.0 / 9}},
	} {
		s := newSampler(GenerateOptions{Temperature: 1, TopP: tc.p, Seed: 1}, 1)
		n := 20000
		count := map[int32]int{}
		for i := 0; i < n; i++ {
			count[s.sample(0, logits)]++
		}
		for id, c := range count {
			want, ok := tc.want[id]
			if !ok {
				t.Fatalf("top-p %v sampled %d outside the nucleus", tc.p, id)
			}
			if got := float64(c) / float64(n); math.Abs(got-want) > 0.02 {
				t.Fatalf("top-p %v: id %d frequency %.3f, want %.3f", tc.p, id, got, want)
			}
		}
	}
	// top-k selection keeps the k best, ties by id
	idx := topKIndices(nil, []float32{1, 5, 3, 5, 2, 0}, 3, func(x, y int) int {
		l := []float32{1, 5, 3, 5, 2, 0}
		if l[x] != l[y] {
			if l[x] > l[y] {
				return -1
			}
			return 1
		}
		return x - y
	})
	if !slices.Equal(idx, []int{1, 3, 2}) {
		t.Fatalf("topKIndices: %v", idx)
	}
}

func TestLlamaTrainingLearns(t *testing.T) {
	cfg := tinyVariants(t)["llama-mqa-biases-llama3"]
	m := mustLlama(t, cpu.New(), cfg, 1)
	m.Optim.LR = 1e-2
	m.Optim.WeightDecay = 0
	r := rand.New(rand.NewPCG(2, 2))
	batch := Batch{Tokens: randSeqs(r, 4, 10, 17, cfg.VocabSize)}
	var first, last float64
	for i := 0; i < 150; i++ {
		st, err := m.TrainStep(batch)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = st.Loss
		}
		last = st.Loss
	}
	if first < 2 || last > 0.1 {
		t.Fatalf("loss %.4f -> %.4f, want from ~ln(13)=2.6 to < 0.1", first, last)
	}
	if m.Steps() != 150 {
		t.Fatalf("Steps() = %d", m.Steps())
	}
	// masked SFT: only the weighted prediction is learned
	seq := []int32{1, 2, 3, 4, 5, 6}
	for i := 0; i < 60; i++ {
		if _, err := m.TrainStep(Batch{Tokens: [][]int32{seq}, Weights: [][]float32{{0, 0, 0, 0, 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := m.LogProbs(Batch{Tokens: [][]int32{seq}})
	if err != nil || lp[0][4] < -0.1 {
		t.Fatalf("weighted position not learned: %v %v", lp, err)
	}
	if _, err := m.TrainStep(Batch{Tokens: [][]int32{seq}, Weights: [][]float32{{0, 0, 0, 0, 0}}}); !errors.Is(err, ErrBatch) {
		t.Fatalf("all-zero weights: %v", err)
	}
	// a policy-gradient step raising log p of a completion
	before, _ := m.LogProbs(Batch{Tokens: [][]int32{{7, 8, 9}}})
	if _, err := m.StepFromLogProbGrads(Batch{Tokens: [][]int32{{7, 8, 9}}}, [][]float32{{-1, -1}}); err != nil {
		t.Fatal(err)
	}
	after, _ := m.LogProbs(Batch{Tokens: [][]int32{{7, 8, 9}}})
	if after[0][0]+after[0][1] <= before[0][0]+before[0][1] {
		t.Fatalf("log p %v -> %v after ascending it", before, after)
	}
}

func TestLlamaBatchErrors(t *testing.T) {
	cfg := tinyVariants(t)["qwen2-bias"]
	m := mustLlama(t, cpu.New(), cfg, 1)
	for name, b := range map[string]Batch{
		"empty":      {},
		"short":      {Tokens: [][]int32{{1}}},
		"long":       {Tokens: [][]int32{make([]int32, cfg.MaxPositionEmbeddings+2)}},
		"token":      {Tokens: [][]int32{{1, 99}}},
		"negative":   {Tokens: [][]int32{{1, -1}}},
		"weights":    {Tokens: [][]int32{{1, 2, 3}}, Weights: [][]float32{{1}}},
		"weightrows": {Tokens: [][]int32{{1, 2, 3}}, Weights: [][]float32{}},
	} {
		if _, err := m.LogProbs(b); !errors.Is(err, ErrBatch) {
			t.Errorf("%s: got %v, want ErrBatch", name, err)
		}
	}
	if _, err := m.StepFromLogProbGrads(Batch{Tokens: [][]int32{{1, 2, 3}}}, [][]float32{{1}}); !errors.Is(err, ErrBatch) {
		t.Errorf("grad shape: %v", err)
	}
	if _, err := m.Generate([][]int32{{}}, GenerateOptions{MaxNewTokens: 1}); !errors.Is(err, ErrBatch) {
		t.Errorf("empty prompt: %v", err)
	}
}

func TestLlamaCloneAndLM(t *testing.T) {
	cfg := tinyVariants(t)["qwen3-qknorm"]
	var m LM = mustLlama(t, cpu.New(), cfg, 51)
	c, err := m.CloneLM(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.CloneLM(cpu.NewReference())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TrainStep(Batch{Tokens: [][]int32{{1, 2, 3, 4}}}); err != nil {
		t.Fatal(err)
	}
	wm, _ := m.Weights()
	wc, _ := c.Weights()
	wo, _ := other.Weights()
	if slices.Equal(wm, wc) || !slices.Equal(wc, wo) {
		t.Fatal("clone shares weights with the original or clones differ")
	}
	if err := other.CopyWeightsFrom(m); err != nil {
		t.Fatal(err)
	}
	if wo, _ = other.Weights(); !slices.Equal(wm, wo) {
		t.Fatal("CopyWeightsFrom across backends did not copy")
	}
	small := mustLlama(t, cpu.New(), tinyHF(t, hf.Qwen3, func(c *hf.Config) { c.NumHiddenLayers = 1 }), 1)
	if err := c.CopyWeightsFrom(small); !errors.Is(err, ErrConfig) {
		t.Fatalf("shape mismatch: %v", err)
	}
	if m.Family() != "qwen3" || m.ContextLen() != cfg.MaxPositionEmbeddings || m.VocabSize() != cfg.VocabSize || int64(m.NumParams()) != cfg.NumParams() {
		t.Fatalf("family %s context %d vocab %d params %d (config says %d)", m.Family(), m.ContextLen(), m.VocabSize(), m.NumParams(), cfg.NumParams())
	}
	o := m.Optimizer()
	o.LR = 0.5
	m.SetOptimizer(o)
	if m.Optimizer().LR != 0.5 {
		t.Fatal("SetOptimizer")
	}
	// the same model back through its Source
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.SaveCheckpoint(dir, map[string]string{"alphabet": "ab"}); err != nil {
		t.Fatal(err)
	}
	r, err := FromHF(dir).Resolve()
	if err != nil {
		t.Fatal(err)
	}
	meta := r.Meta
	back, err := r.Load(cpu.New(), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if meta["alphabet"] != "ab" || back.Family() != "qwen3" || back.ContextLen() != m.ContextLen() || back.VocabSize() != m.VocabSize() {
		t.Fatalf("checkpoint loaded as %s, metadata %v", back.Family(), meta)
	}
	if err := back.CopyWeightsFrom(m); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadLlama(filepath.Join(t.TempDir(), "none"), cpu.New()); !errors.Is(err, ErrSource) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing checkpoint: %v", err)
	}
	for _, x := range []LM{m, c, other, small, back} {
		x.Free()
	}
}

func TestLlamaSaveLoadRoundTrip(t *testing.T) {
	for name, cfg := range tinyVariants(t) {
		m := mustLlama(t, cpu.New(), cfg, 61)
		perturb(t, m, 62, 0.1)
		dir := filepath.Join(t.TempDir(), name)
		if err := m.SaveCheckpoint(dir, map[string]string{"policy": "shared"}); err != nil {
			t.Fatal(err)
		}
		r, err := FromHF(dir).Resolve()
		if err != nil {
			t.Fatal(err)
		}
		meta := r.Meta
		m2, err := r.Load(cpu.New(), LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if meta["policy"] != "shared" || !m2.arch.same(&m.arch) {
			t.Fatalf("%s: metadata %v, shape %s vs %s", name, meta, m2.arch.describe(), m.arch.describe())
		}
		w1, _ := m.Weights()
		w2, _ := m2.Weights()
		if !slices.Equal(w1, w2) {
			t.Fatalf("%s: weights differ after an F32 round trip", name)
		}
		// BF16 keeps the top 16 bits, rounded
		bdir := dir + "-bf16"
		if err := m.SaveAs(bdir, hf.SaveOptions{DType: hf.BF16}); err != nil {
			t.Fatal(err)
		}
		mb, err := LoadLlama(bdir, cpu.NewReference())
		if err != nil {
			t.Fatal(err)
		}
		wb, _ := mb.Weights()
		for i := range w1 {
			if d := math.Abs(float64(w1[i] - wb[i])); d > math.Abs(float64(w1[i]))/256 {
				t.Fatalf("%s: BF16 weight %d: %v -> %v", name, i, w1[i], wb[i])
			}
		}
		// a base held in BF16 saves what it holds
		if err := mb.SetBaseDType(hf.BF16); err != nil {
			t.Fatal(err)
		}
		if err := mb.Save(bdir + "-again"); err != nil {
			t.Fatal(err)
		}
		again, err := LoadLlama(bdir+"-again", cpu.New())
		if err != nil {
			t.Fatal(err)
		}
		if wa, _ := again.Weights(); !slices.Equal(wa, wb) {
			t.Fatalf("%s: a BF16 base saved and loaded changed", name)
		}
	}
}

// TestLlamaLoadBrokenDirs: every unusable model directory gives an error
// naming what is wrong, never a panic.
func TestLlamaLoadBrokenDirs(t *testing.T) {
	cfg := tinyVariants(t)["qwen2-bias"]
	m := mustLlama(t, cpu.New(), cfg, 1)
	good := filepath.Join(t.TempDir(), "good")
	if err := m.Save(good); err != nil {
		t.Fatal(err)
	}
	config, err := os.ReadFile(filepath.Join(good, hf.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := m.Weights()
	all, err := m.tensors(w)
	if err != nil {
		t.Fatal(err)
	}
	// write makes a directory from good's config (edited) and tensors
	// (filtered or reshaped).
	write := func(t *testing.T, cfgEdit func(string) string, ts []hf.Tensor) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, hf.ConfigFile), []byte(cfgEdit(string(config))), 0o644); err != nil {
			t.Fatal(err)
		}
		if ts != nil {
			if err := hf.WriteSafetensors(filepath.Join(dir, hf.WeightsFile), ts, hf.F32, map[string]string{"format": "pt"}); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	same := func(s string) string { return s }
	without := func(name string) []hf.Tensor {
		var out []hf.Tensor
		for _, x := range all {
			if x.Name != name {
				out = append(out, x)
			}
		}
		return out
	}
	reshaped := func(name string) []hf.Tensor {
		out := slices.Clone(all)
		for i, x := range out {
			if x.Name == name {
				out[i].Shape = []int{x.Shape[1], x.Shape[0]}
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
		want []string // substrings of the error
	}{
		{"no dir", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nothing") }, []string{"config.json"}},
		{"no weights", func(t *testing.T) string { return write(t, same, nil) }, []string{"safetensors"}},
		{"missing tensor", func(t *testing.T) string { return write(t, same, without("model.layers.1.self_attn.k_proj.bias")) },
			[]string{"model.layers.1.self_attn.k_proj.bias"}},
		{"wrong shape", func(t *testing.T) string { return write(t, same, reshaped("model.layers.0.mlp.up_proj.weight")) },
			[]string{"model.layers.0.mlp.up_proj.weight", "24"}},
		{"unknown model_type", func(t *testing.T) string {
			return write(t, func(s string) string { return strings.Replace(s, `"qwen2"`, `"gpt_neox"`, 1) }, all)
		}, []string{"gpt_neox"}},
		{"truncated weights", func(t *testing.T) string {
			dir := write(t, same, all)
			f := filepath.Join(dir, hf.WeightsFile)
			st, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f, st.Size()-64); err != nil {
				t.Fatal(err)
			}
			return dir
		}, []string{hf.WeightsFile}},
		{"bad json", func(t *testing.T) string { return write(t, func(s string) string { return s[:len(s)/2] }, all) }, []string{"config.json"}},
		{"heads", func(t *testing.T) string {
			return write(t, func(s string) string {
				return strings.Replace(s, `"num_key_value_heads": 2`, `"num_key_value_heads": 3`, 1)
			}, all)
		}, []string{"num_key_value_heads"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			_, err := LoadLlama(dir, cpu.New())
			if !errors.Is(err, ErrSource) {
				t.Fatalf("not ErrSource: %v", err)
			}
			t.Log(err)
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	if _, err := LoadLlama(good, cpu.New()); err != nil {
		t.Fatalf("good dir: %v", err)
	}
}
