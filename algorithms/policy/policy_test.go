package policy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

var tiny = Config{Layers: 2, Heads: 2, Width: 16, Context: 16, Vocab: 11}

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

func mustNew(t testing.TB, be compute.Backend, cfg Config, seed uint64) *Model {
	t.Helper()
	m, err := New(be, cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParamCounts(t *testing.T) {
	small := Config{Layers: 4, Heads: 4, Width: 128, Context: 64, Vocab: 64}
	big := Config{Layers: 6, Heads: 8, Width: 256, Context: 128, Vocab: 64}
	if got := small.NumParams(); got != 809728 {
		t.Fatalf("0.8M config: %d params", got)
	}
	if got := big.NumParams(); got != 4788224 {
		t.Fatalf("4.8M config: %d params", got)
	}
	// 6N + 12LCT rule of thumb
	if got, want := small.TrainFLOPsPerToken(64), 6*(4*12*128*128+64*128)+12*4*128*64; got != want {
		t.Fatalf("train FLOPs/token %d, want %d", got, want)
	}
	if err := (Config{Layers: 1, Heads: 3, Width: 16, Context: 8, Vocab: 8}).Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("heads not dividing width accepted: %v", err)
	}
}

func TestOverfitOneBatch(t *testing.T) {
	m := mustNew(t, cpu.New(), tiny, 1)
	m.Optim.LR = 1e-2
	m.Optim.WeightDecay = 0
	r := rand.New(rand.NewPCG(2, 2))
	batch := Batch{Tokens: randSeqs(r, 4, 10, 17, tiny.Vocab)}
	var st StepStats
	var err error
	first := 0.0
	for i := 0; i < 200; i++ {
		if st, err = m.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = st.Loss
		}
	}
	if first < 2 || st.Loss > 0.05 {
		t.Fatalf("loss %.4f -> %.4f, want from ~ln(11)=2.4 to < 0.05", first, st.Loss)
	}
	l, err := m.Loss(batch)
	if err != nil || math.Abs(l-st.Loss) > 0.05 {
		t.Fatalf("Loss() = %v, %v after training loss %v", l, err, st.Loss)
	}
	if m.Steps() != 200 {
		t.Fatalf("Steps() = %d", m.Steps())
	}
}

func TestLossWeightsMask(t *testing.T) {
	// Training with weight only on the last prediction must learn it
	// without caring about the others.
	m := mustNew(t, cpu.New(), tiny, 3)
	m.Optim.LR = 1e-2
	seq := []int32{1, 2, 3, 4, 5, 6}
	w := []float32{0, 0, 0, 0, 1}
	for i := 0; i < 60; i++ {
		if _, err := m.TrainStep(Batch{Tokens: [][]int32{seq}, Weights: [][]float32{w}}); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := m.LogProbs(Batch{Tokens: [][]int32{seq}})
	if err != nil {
		t.Fatal(err)
	}
	if lp[0][4] < -0.1 {
		t.Fatalf("weighted position not learned: log p = %v", lp[0][4])
	}
	if _, err := m.TrainStep(Batch{Tokens: [][]int32{seq}, Weights: [][]float32{{0, 0, 0, 0, 0}}}); !errors.Is(err, ErrBatch) {
		t.Fatalf("all-zero weights: %v", err)
	}
}

func TestBatchErrors(t *testing.T) {
	m := mustNew(t, cpu.New(), tiny, 1)
	for name, b := range map[string]Batch{
		"empty":      {},
		"short":      {Tokens: [][]int32{{1}}},
		"long":       {Tokens: [][]int32{make([]int32, tiny.Context+2)}},
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

func TestBatchedLogProbsMatchSingle(t *testing.T) {
	// Padding to the longest sequence must not change any row.
	m := mustNew(t, cpu.New(), tiny, 4)
	r := rand.New(rand.NewPCG(5, 5))
	seqs := randSeqs(r, 5, 2, 17, tiny.Vocab)
	all, err := m.LogProbs(Batch{Tokens: seqs})
	if err != nil {
		t.Fatal(err)
	}
	for b, s := range seqs {
		one, err := m.LogProbs(Batch{Tokens: [][]int32{s}})
		if err != nil {
			t.Fatal(err)
		}
		if len(one[0]) != len(s)-1 || len(all[b]) != len(s)-1 {
			t.Fatalf("row %d: lengths %d %d for %d tokens", b, len(one[0]), len(all[b]), len(s))
		}
		for i := range one[0] {
			if math.Abs(float64(one[0][i]-all[b][i])) > 1e-4 {
				t.Fatalf("row %d pos %d: batched %v single %v", b, i, all[b][i], one[0][i])
			}
		}
	}
}

// randomizeWeights gives a model large enough weights that gradients are
// far from zero (GPT-2 init makes most of them tiny).
func randomizeWeights(t *testing.T, m *Model, seed uint64, std float64) {
	r := rand.New(rand.NewPCG(seed, 9))
	w, _ := m.Weights()
	for i := range w {
		w[i] += float32(r.NormFloat64() * std)
	}
	if err := m.SetWeights(w); err != nil {
		t.Fatal(err)
	}
}

func (m *Model) gradients(t *testing.T) []float32 {
	g := make([]float32, m.cfg.NumParams())
	m.be.Download(g, m.grads)
	if err := m.be.Sync(); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestModelGradientsFiniteDifferences checks the whole backward pass, both
// loss heads, by central differences on the reference backend (float64
// accumulation keeps the differences clean).
func TestModelGradientsFiniteDifferences(t *testing.T) {
	cfg := Config{Layers: 2, Heads: 2, Width: 8, Context: 7, Vocab: 7}
	for _, mk := range []func() *cpu.Backend{cpu.NewReference, cpu.New} {
		be := mk()
		m := mustNew(t, be, cfg, 11)
		randomizeWeights(t, m, 12, 0.3)
		r := rand.New(rand.NewPCG(13, 13))
		batch := Batch{Tokens: randSeqs(r, 3, 3, 8, cfg.Vocab)}
		grads := make([][]float32, 3)
		for b, s := range batch.Tokens {
			grads[b] = make([]float32, len(s)-1)
			for i := range grads[b] {
				grads[b][i] = float32(r.NormFloat64())
			}
		}
		objective := func() float64 {
			lp, err := m.LogProbs(batch)
			if err != nil {
				t.Fatal(err)
			}
			var s float64
			for b := range lp {
				for i, v := range lp[b] {
					s += float64(grads[b][i]) * float64(v)
				}
			}
			return s
		}
		if err := m.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
		if err := m.AccumulateLogProbGrads(batch, grads); err != nil {
			t.Fatal(err)
		}
		checkModelFD(t, be.Name()+" logprob", m, m.gradients(t), objective, r)

		// cross-entropy head with weights
		batch.Weights = make([][]float32, 3)
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
			if _, _, err := m.load(batch); err != nil {
				t.Fatal(err)
			}
			m.forward(m.a.B, m.a.T)
			s, _, err := m.ceLoss(m.a.B, m.a.T)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		checkModelFD(t, be.Name()+" crossentropy", m, m.gradients(t), ce, r)
	}
}

func checkModelFD(t *testing.T, name string, m *Model, grad []float32, loss func() float64, r *rand.Rand) {
	t.Helper()
	w, _ := m.Weights()
	var sc float64
	for _, g := range grad {
		sc = math.Max(sc, math.Abs(float64(g)))
	}
	// check coordinates in every tensor group
	off := 0
	const eps = 1e-2
	for gi, n := range m.sizes {
		for k := 0; k < 4; k++ {
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
				t.Fatalf("%s: group %s index %d: finite difference %g, analytic %g (scale %g)", name, m.groups[gi].name, i-off, fd, grad[i], sc)
			}
		}
		off += n
	}
}

// plainBackend hides the optional compute.MatmulTransposer extension, to test
// the decoding fallback.
type plainBackend struct{ compute.Backend }

func TestKVCacheMatchesNoCache(t *testing.T) {
	cfg := Config{Layers: 2, Heads: 2, Width: 16, Context: 20, Vocab: 13}
	for _, be := range []compute.Backend{cpu.New(), cpu.NewReference(), plainBackend{cpu.New()}} {
		m := mustNew(t, be, cfg, 21)
		randomizeWeights(t, m, 22, 0.2) // sharper, non-uniform logits
		prompts := [][]int32{{1, 2, 3}, {4}, {5, 6, 7, 8, 9, 10, 11}, {12, 0}}
		for round, opt := range []GenerateOptions{
			{MaxNewTokens: 12, Temperature: 0},
			{MaxNewTokens: 10, Temperature: 1, Seed: 7},
			{MaxNewTokens: 30, Temperature: 0.8, TopK: 4, Seed: 8, Stop: []int32{3}},
			{MaxNewTokens: 12, Temperature: 0},
		} {
			if round == 3 { // weights changed since the last call: the decode copies must follow
				if _, err := m.TrainStep(Batch{Tokens: prompts[2:3]}); err != nil {
					t.Fatal(err)
				}
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
					t.Fatalf("%s %+v row %d: cache %v, no cache %v", be.Name(), opt, b, got[b], want[b])
				}
				if len(got[b]) == 0 || len(got[b])+len(prompts[b]) > cfg.Context {
					t.Fatalf("row %d: %d tokens after a %d-token prompt", b, len(got[b]), len(prompts[b]))
				}
				if i := slices.Index(got[b], 3); opt.Stop != nil && i >= 0 && i != len(got[b])-1 {
					t.Fatalf("row %d continued past stop token: %v", b, got[b])
				}
			}
		}
	}
}

func TestGenerateDeterministic(t *testing.T) {
	m := mustNew(t, cpu.New(), tiny, 31)
	randomizeWeights(t, m, 32, 0.2)
	prompts := [][]int32{{1, 2}, {1, 2}, {3}}
	opt := GenerateOptions{MaxNewTokens: 10, Temperature: 1, TopK: 5, Seed: 42}
	a, err := m.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Generate(prompts, opt)
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Fatalf("same seed, different text: %v vs %v", a[i], b[i])
		}
	}
	opt.Seed = 43
	c, _ := m.Generate(prompts, opt)
	if slices.Equal(a[0], c[0]) && slices.Equal(a[1], c[1]) && slices.Equal(a[2], c[2]) {
		t.Fatalf("different seeds gave identical samples %v", a)
	}
	// top-k 1 is greedy
	g1, _ := m.Generate(prompts, GenerateOptions{MaxNewTokens: 10, Temperature: 1, TopK: 1, Seed: 1})
	g0, _ := m.Generate(prompts, GenerateOptions{MaxNewTokens: 10})
	for i := range g1 {
		if !slices.Equal(g0[i], g1[i]) {
			t.Fatalf("top-k 1 %v != greedy %v", g1[i], g0[i])
		}
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	m := mustNew(t, cpu.New(), tiny, 41)
	var buf bytes.Buffer
	if err := m.Save(&buf, map[string]string{"tokenizer": "abc", "vocab": "ignored"}); err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	if hl := binary.LittleEndian.Uint64(raw); (8+hl)%8 != 0 || !bytes.Contains(raw[8:8+hl], []byte(`"dtype":"F32"`)) {
		t.Fatalf("header length %d not aligned or no F32 dtype", hl)
	}
	m2, meta, err := Load(bytes.NewReader(raw), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	if meta["tokenizer"] != "abc" || m2.Config() != tiny {
		t.Fatalf("metadata %v config %+v", meta, m2.Config())
	}
	w1, _ := m.Weights()
	w2, _ := m2.Weights()
	if !slices.Equal(w1, w2) {
		t.Fatal("weights differ after round trip")
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := m.SaveFile(path, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadFile(path, cpu.New()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadFile(path+".missing", cpu.New()); err == nil {
		t.Fatal("missing file loaded")
	}
}

func validCheckpoint(t testing.TB) []byte {
	m := mustNew(t, cpu.New(), Config{Layers: 1, Heads: 1, Width: 4, Context: 3, Vocab: 5}, 1)
	var buf bytes.Buffer
	if err := m.Save(&buf, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSafetensorsCorrupt(t *testing.T) {
	good := validCheckpoint(t)
	hl := int(binary.LittleEndian.Uint64(good))
	header := string(good[8 : 8+hl])
	rebuild := func(h string) []byte {
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		out = append(out, h...)
		return append(out, good[8+hl:]...)
	}
	cases := map[string][]byte{
		"empty":       nil,
		"short":       good[:5],
		"huge header": append(binary.LittleEndian.AppendUint64(nil, 1<<40), good[8:]...),
		"truncated":   good[:len(good)-4],
		"extra data":  append(append([]byte(nil), good...), 0, 0, 0, 0),
		"not json":    rebuild(strings.Repeat("x", hl)),
		"dtype":       rebuild(strings.Replace(header, `"F32"`, `"F16"`, 1)),
		"no metadata": rebuild(strings.Replace(header, `"__metadata__"`, `"__other__"`, 1)),
		"bad config":  rebuild(strings.Replace(header, `"heads":"1"`, `"heads":"3"`, 1)),
		"missing":     rebuild(strings.Replace(header, `"wte.weight"`, `"wte.weights"`, 1)),
		"garbage":     rebuild(strings.TrimRight(header, " ") + "}}"),
	}
	// overlapping offsets: point wpe at wte's bytes
	if i := strings.Index(header, `"wpe.weight":`); i >= 0 {
		j := strings.Index(header[i:], `"data_offsets":[`) + i + len(`"data_offsets":[`)
		k := strings.Index(header[j:], "]") + j
		cases["overlap"] = rebuild(header[:j] + "0,48" + strings.Repeat(" ", k-j-4) + header[k:])
		cases["bad offsets"] = rebuild(header[:j] + "8,4" + strings.Repeat(" ", k-j-3) + header[k:])
	} else {
		t.Fatal("wpe.weight not in header")
	}
	for name, data := range cases {
		if _, err := DecodeSafetensors(data); !errors.Is(err, ErrCheckpoint) {
			t.Errorf("%s: got %v, want ErrCheckpoint", name, err)
		}
	}
	if _, err := DecodeSafetensors(good); err != nil {
		t.Fatalf("valid checkpoint rejected: %v", err)
	}
}

func FuzzDecodeSafetensors(f *testing.F) {
	good := validCheckpoint(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 2), '{', '}'))
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 4), []byte("null")...))
	f.Fuzz(func(t *testing.T, data []byte) {
		ck, err := DecodeSafetensors(data)
		if err != nil {
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("error without ErrCheckpoint: %v", err)
			}
			return
		}
		if len(ck.Weights) != ck.Config.NumParams() {
			t.Fatalf("decoded %d weights for %d params", len(ck.Weights), ck.Config.NumParams())
		}
	})
}

func TestCloneAndWeights(t *testing.T) {
	m := mustNew(t, cpu.New(), tiny, 51)
	c, err := m.Clone(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.Clone(cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	// training the original must not move the clones
	if _, err := m.TrainStep(Batch{Tokens: [][]int32{{1, 2, 3, 4}}}); err != nil {
		t.Fatal(err)
	}
	wm, _ := m.Weights()
	wc, _ := c.Weights()
	wo, _ := other.Weights()
	if slices.Equal(wm, wc) || !slices.Equal(wc, wo) {
		t.Fatal("clone shares weights with the original or clones differ")
	}
	if err := c.CopyWeightsFrom(m); err != nil {
		t.Fatal(err)
	}
	if wc, _ = c.Weights(); !slices.Equal(wm, wc) {
		t.Fatal("CopyWeightsFrom did not copy")
	}
	if err := m.SetWeights(wm[:10]); !errors.Is(err, ErrBatch) {
		t.Fatalf("short SetWeights: %v", err)
	}
	bad := mustNew(t, cpu.New(), Config{Layers: 1, Heads: 1, Width: 4, Context: 3, Vocab: 5}, 1)
	if err := bad.CopyWeightsFrom(m); !errors.Is(err, ErrConfig) {
		t.Fatalf("config mismatch: %v", err)
	}
}

func TestStepFromLogProbGradsRaisesLogProb(t *testing.T) {
	// Ascending log p of a completion (d loss/d logp = -1) must make it likelier.
	m := mustNew(t, cpu.New(), tiny, 61)
	m.Optim.LR = 3e-3
	batch := Batch{Tokens: [][]int32{{1, 2, 3, 4, 5}}}
	before, _ := m.LogProbs(batch)
	grads := [][]float32{{0, 0, -1, -1}}
	for i := 0; i < 10; i++ {
		st, err := m.StepFromLogProbGrads(batch, grads)
		if err != nil {
			t.Fatal(err)
		}
		if st.Tokens != 4 || st.GradNorm <= 0 {
			t.Fatalf("stats %+v", st)
		}
	}
	after, _ := m.LogProbs(batch)
	if after[0][2] <= before[0][2]+0.5 || after[0][3] <= before[0][3]+0.5 {
		t.Fatalf("log-probs %v -> %v", before[0], after[0])
	}
}

func TestTokenizers(t *testing.T) {
	var bt ByteTokenizer
	s := "héllo\n"
	if got := bt.Decode(append(append([]int32{bt.BOS()}, bt.Encode(s)...), bt.EOS())); got != s {
		t.Fatalf("byte round trip %q", got)
	}
	if bt.Vocab() != 260 {
		t.Fatal("byte vocab")
	}
	ct, err := NewCharTokenizer(DefaultAlphabet)
	if err != nil {
		t.Fatal(err)
	}
	if ct.Vocab() != 64 {
		t.Fatalf("default alphabet vocab %d, want 64", ct.Vocab())
	}
	ids := ct.Encode("go 2 x=1; Z")
	if got := ct.Decode(ids); got != "go 2 x=1; ?" {
		t.Fatalf("char round trip %q", got)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= ct.Vocab() || id == ct.BOS() || id == ct.EOS() || id == ct.PAD() || id == ct.SEP() {
			t.Fatalf("bad id %d", id)
		}
	}
	if _, err := NewCharTokenizer("abca"); !errors.Is(err, ErrTokenizer) {
		t.Fatal("duplicate accepted")
	}
	if _, err := NewCharTokenizer(""); !errors.Is(err, ErrTokenizer) {
		t.Fatal("empty accepted")
	}
}

func TestTrainStepSteadyStateAllocations(t *testing.T) {
	// After the first step every buffer, view and kernel job exists: later
	// steps allocate nothing (gemm's sync.Pool may refill after a GC).
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	m := mustNew(t, cpu.New(), tiny, 71)
	batch := Batch{Tokens: randSeqs(rand.New(rand.NewPCG(7, 7)), 4, 17, 17, tiny.Vocab)}
	if _, err := m.TrainStep(batch); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := m.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("%.1f allocations per steady-state training step, want 0", allocs)
	}
}

func TestByteTokenizerModelLearnsText(t *testing.T) {
	// A byte-level model (vocab 260) learns a short string and regenerates
	// it greedily from BOS; generation stops at EOS.
	var bt ByteTokenizer
	cfg := Config{Layers: 1, Heads: 2, Width: 32, Context: 16, Vocab: ByteVocab}
	m := mustNew(t, cpu.New(), cfg, 81)
	m.Optim.LR = 1e-2
	text := "hello, agent"
	seq := append(append([]int32{bt.BOS()}, bt.Encode(text)...), bt.EOS())
	for i := 0; i < 150; i++ {
		if _, err := m.TrainStep(Batch{Tokens: [][]int32{seq}}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := m.Generate([][]int32{{bt.BOS()}}, GenerateOptions{MaxNewTokens: 15, Stop: []int32{bt.EOS()}})
	if err != nil {
		t.Fatal(err)
	}
	if got := bt.Decode(out[0]); got != text || out[0][len(out[0])-1] != bt.EOS() {
		t.Fatalf("generated %q (%v), want %q then EOS", got, out[0], text)
	}
	// VocabLimit keeps sampling inside the first ids
	lim, err := m.Generate([][]int32{{bt.BOS()}}, GenerateOptions{MaxNewTokens: 10, Temperature: 2, Seed: 5, VocabLimit: 50})
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
	m := mustNew(t, cpu.New(), tiny, 91)
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
