package policy

import (
	"encoding/json"
	"errors"
	"fmt"
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
	"troupe/gpu/compute/cpu/gemm"
)

// The PyTorch reference (testdata/llama/gen_lora.py) adds a LoRA adapter
// with random non-zero B to three of gen.py's models (all seven targets on
// llama_gqa; q and v with rsLoRA on qwen3_qknorm; five targets on the tied,
// biased qwen2_tied) and writes the adapter in PEFT's layout with log-probs,
// the gradient of L = -sum w·logp with respect to every lora_A and lora_B,
// and greedy continuations.

type loraRef struct {
	Case    string    `json:"case"`
	Base    string    `json:"base"`
	Tokens  [][]int32 `json:"tokens"`
	Lengths []int     `json:"lengths"`
	Loss    float64   `json:"loss"`
	MaxNew  int       `json:"max_new_tokens"`
	Greedy  []struct {
		Prompt    []int32 `json:"prompt"`
		NewTokens []int32 `json:"new_tokens"`
	} `json:"greedy"`
}

func loraRefCases(t *testing.T) []string {
	dirs, err := filepath.Glob(filepath.Join("testdata", "llama", "lora", "*", "reference.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no LoRA reference cases under testdata/llama/lora (%v)", err)
	}
	for i := range dirs {
		dirs[i] = filepath.Dir(dirs[i])
	}
	return dirs
}

func readLoRARef(t *testing.T, dir string) (*loraRef, *hf.Checkpoint) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref loraRef
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	ck, err := hf.Open(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return &ref, ck
}

// loadLoRARef loads the reference's base model with its adapter as "ref".
func loadLoRARef(t *testing.T, dir string, be compute.Backend) (*Llama, *Adapter, *loraRef, *hf.Checkpoint) {
	t.Helper()
	ref, ck := readLoRARef(t, dir)
	m, err := LoadLlama(filepath.Join("testdata", "llama", ref.Base), be)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	ad, err := m.LoadAdapter("ref", dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, ad, ref, ck
}

// refBatch is the reference's ragged batch, its loss weights and the
// log-prob gradients of L = -sum w·logp.
func refBatch(t *testing.T, ref *loraRef, ck *hf.Checkpoint) (Batch, [][]float32, int) {
	B, Tp := len(ref.Lengths), 0
	for _, n := range ref.Lengths {
		Tp = max(Tp, n)
	}
	w := readRefTensor(t, ck, "weights", B, Tp-1)
	batch := Batch{Tokens: make([][]int32, B)}
	g := make([][]float32, B)
	for b, n := range ref.Lengths {
		batch.Tokens[b] = ref.Tokens[b][:n]
		g[b] = make([]float32, n-1)
		for i := range g[b] {
			g[b][i] = -w[b*(Tp-1)+i]
		}
	}
	return batch, g, Tp
}

func TestLoRAMatchesPyTorchReference(t *testing.T) {
	for _, dir := range loraRefCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			for _, be := range []compute.Backend{cpu.New(), cpu.NewReference()} {
				m, ad, ref, ck := loadLoRARef(t, dir, be)
				name := ref.Case + " on " + be.Name()
				batch, g, Tp := refBatch(t, ref, ck)

				wantLP := readRefTensor(t, ck, "logprobs", len(ref.Lengths), Tp-1)
				lp, err := m.LogProbs(batch)
				if err != nil {
					t.Fatal(err)
				}
				var loss, worst float64
				for b := range lp {
					for p, v := range lp[b] {
						d := math.Abs(float64(v - wantLP[b*(Tp-1)+p]))
						worst = max(worst, d)
						if d > refLogProbTol {
							t.Fatalf("%s: log-prob [%d,%d] %v, reference %v", name, b, p, v, wantLP[b*(Tp-1)+p])
						}
						loss += float64(g[b][p]) * float64(v)
					}
				}
				if math.Abs(loss-ref.Loss) > 1e-4*math.Abs(ref.Loss) {
					t.Fatalf("%s: loss %v, reference %v", name, loss, ref.Loss)
				}
				t.Logf("%s: worst log-prob difference %.2g", name, worst)

				if err := m.ZeroGrad(); err != nil {
					t.Fatal(err)
				}
				if err := m.AccumulateLogProbGrads(batch, g); err != nil {
					t.Fatal(err)
				}
				if m.grads != nil || m.gv.all != [numKinds]compute.Buffer{} {
					t.Fatalf("%s: the frozen base has gradient buffers", name)
				}
				checkAdapterGrads(t, name, ad, ck, "grad.")

				// greedy continuations through the adapter, batched and alone
				prompts := make([][]int32, len(ref.Greedy))
				for i, gr := range ref.Greedy {
					prompts[i] = gr.Prompt
				}
				opt := GenerateOptions{MaxNewTokens: ref.MaxNew}
				out, err := m.Generate(prompts, opt)
				if err != nil {
					t.Fatal(err)
				}
				for i, gr := range ref.Greedy {
					one, err := m.generateNoCache(prompts[i:i+1], opt)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(out[i], gr.NewTokens) || !slices.Equal(one[0], gr.NewTokens) {
						t.Fatalf("%s: greedy continuation of %v: batched %v, alone without cache %v, reference %v", name, gr.Prompt, out[i], one[0], gr.NewTokens)
					}
				}

				// an update moves only the adapter; the base keeps no optimizer state
				w0, _ := m.Weights()
				a0, _ := ad.Weights()
				if _, err := m.Step(); err != nil {
					t.Fatal(err)
				}
				w1, _ := m.Weights()
				a1, _ := ad.Weights()
				if !slices.Equal(w0, w1) || slices.Equal(a0, a1) || m.mom != nil || m.vel != nil || ad.mom == nil || ad.Steps() != 1 {
					t.Fatalf("%s: Step changed the base (%v) or not the adapter (%v); base moments %v", name, !slices.Equal(w0, w1), !slices.Equal(a0, a1), m.mom != nil)
				}
			}
		})
	}
}

// checkAdapterGrads compares ad's gradients with the checkpoint's
// prefix+<PEFT name> tensors, per tensor relative to its largest value.
func checkAdapterGrads(t *testing.T, name string, ad *Adapter, ck *hf.Checkpoint, prefix string) {
	t.Helper()
	got, err := ad.Gradients()
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	off, r := 0, ad.cfg.Rank
	for l := 0; l < ad.m.arch.L; l++ {
		for tg, on := range ad.on {
			if !on {
				continue
			}
			in, out := ad.m.arch.loraDims(tg)
			for _, x := range []struct {
				ab    string
				shape []int
			}{{"A", []int{r, in}}, {"B", []int{out, r}}} {
				key := peftKey(l, tg, x.ab)
				want := readRefTensor(t, ck, prefix+key, x.shape...)
				var sc float64
				for _, v := range want {
					sc = max(sc, math.Abs(float64(v)))
				}
				for i, v := range want {
					d := math.Abs(float64(got[off+i] - v))
					worst = max(worst, d/sc)
					if d > refGradTol*sc {
						t.Fatalf("%s: gradient of %s [%d]: %v, reference %v (largest |reference| %v)", name, key, i, got[off+i], v, sc)
					}
				}
				off += len(want)
			}
		}
	}
	if off != ad.n {
		t.Fatalf("%s: compared %d of %d adapter gradients", name, off, ad.n)
	}
	t.Logf("%s: worst relative adapter gradient difference %.2g", name, worst)
}

// randomizeAdapter gives ad random weights (B non-zero, so it matters).
func randomizeAdapter(t testing.TB, ad *Adapter, seed uint64, std float64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	w := make([]float32, ad.NumParams())
	for i := range w {
		w[i] = float32(r.NormFloat64() * std)
	}
	if err := ad.SetWeights(w); err != nil {
		t.Fatal(err)
	}
}

// TestLoRAGradientsFiniteDifferences checks the adapter backward of every
// structural variant (all seven targets) against central differences on
// the reference backend, for both loss heads.
func TestLoRAGradientsFiniteDifferences(t *testing.T) {
	for name, cfg := range tinyVariants(t) {
		t.Run(name, func(t *testing.T) {
			m := mustLlama(t, cpu.NewReference(), cfg, 21)
			defer m.Free()
			perturb(t, m, 22, 0.3)
			lc := LoRAConfig{Rank: 3, Alpha: 5, Targets: loraTargets[:], RSLoRA: name == "qwen2-bias"}
			ad, err := m.AddAdapter("x", lc, 23)
			if err != nil {
				t.Fatal(err)
			}
			randomizeAdapter(t, ad, 24, 0.3)
			r := rand.New(rand.NewPCG(25, 25))
			batch := Batch{Tokens: randSeqs(r, 3, 3, 9, cfg.VocabSize)}
			g := randGrads(r, batch.Tokens)
			if err := m.ZeroGrad(); err != nil {
				t.Fatal(err)
			}
			if err := m.AccumulateLogProbGrads(batch, g); err != nil {
				t.Fatal(err)
			}
			grad, _ := ad.Gradients()
			w, _ := ad.Weights()
			var sc float64
			for _, v := range grad {
				sc = max(sc, math.Abs(float64(v)))
			}
			loss := func() float64 { return dotLogProbs(t, m, batch, g) }
			const eps = 1e-2
			for j := 0; j < 40; j++ {
				i := r.IntN(len(w))
				old := w[i]
				w[i] = old + eps
				ad.SetWeights(w)
				lp := loss()
				w[i] = old - eps
				ad.SetWeights(w)
				lm := loss()
				w[i] = old
				ad.SetWeights(w)
				fd := (lp - lm) / float64((old+eps)-(old-eps))
				if d := math.Abs(fd - float64(grad[i])); d > 3e-2*(sc+math.Abs(fd)) && d > 1e-4 {
					t.Fatalf("adapter index %d: finite difference %g, analytic %g (scale %g)", i, fd, grad[i], sc)
				}
			}
		})
	}
}

// TestLoRANewAdapterIsIdentity: PEFT's init (B = 0) leaves the outputs
// exactly as the base's.
func TestLoRANewAdapterIsIdentity(t *testing.T) {
	cfg := tinyVariants(t)["qwen3-qknorm"]
	m := mustLlama(t, cpu.New(), cfg, 1)
	defer m.Free()
	perturb(t, m, 2, 0.3)
	r := rand.New(rand.NewPCG(3, 3))
	batch := Batch{Tokens: randSeqs(r, 3, 3, 9, cfg.VocabSize)}
	base, err := m.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := m.AddAdapter("a", DefaultLoRA(), 4)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.LogProbs(batch)
	if err != nil {
		t.Fatal(err)
	}
	if !equal2(base, got) {
		t.Fatalf("a fresh adapter changed the log-probs")
	}
	// A is kaiming-uniform: within ±1/sqrt(in), not all zero
	w, _ := ad.Weights()
	in, _ := m.arch.loraDims(tQ)
	a := w[:16*in]
	var nz int
	for _, v := range a {
		if math.Abs(float64(v)) > 1/math.Sqrt(float64(in))+1e-7 {
			t.Fatalf("A entry %v beyond the kaiming-uniform bound", v)
		}
		if v != 0 {
			nz++
		}
	}
	if nz < len(a)*9/10 {
		t.Fatalf("A has %d non-zeros of %d", nz, len(a))
	}
}

func equal2[T comparable](a, b [][]T) bool {
	return slices.EqualFunc(a, b, func(x, y []T) bool { return slices.Equal(x, y) })
}

// twoAdapterModel is a tiny model with adapters "a" (all targets) and "b"
// (q, v; other rank and scaling), both randomised.
func twoAdapterModel(t *testing.T, be compute.Backend) *Llama {
	cfg := tinyVariants(t)["llama-mqa-biases-llama3"]
	m := mustLlama(t, be, cfg, 31)
	perturb(t, m, 32, 0.3)
	a, err := m.AddAdapter("a", LoRAConfig{Rank: 4, Alpha: 8, Targets: loraTargets[:]}, 33)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.AddAdapter("b", LoRAConfig{Rank: 2, Alpha: 3, Targets: []string{"v_proj", "q_proj"}, RSLoRA: true}, 34)
	if err != nil {
		t.Fatal(err)
	}
	randomizeAdapter(t, a, 35, 0.2)
	randomizeAdapter(t, b, 36, 0.2)
	return m
}

// TestLoRAMixedBatch: rows naming different adapters (and the bare base)
// in one batch give what each row gives alone with its adapter: log-probs,
// gradients, and generation.
func TestLoRAMixedBatch(t *testing.T) {
	m := twoAdapterModel(t, cpu.New())
	defer m.Free()
	r := rand.New(rand.NewPCG(37, 37))
	names := []string{"b", "a", NoAdapter, "", "b", "a"} // "" is the active adapter, "a"
	seqs := randSeqs(r, len(names), 3, 10, m.VocabSize())
	g := randGrads(r, seqs)
	mixed, err := m.LogProbs(Batch{Tokens: seqs, Adapters: names})
	if err != nil {
		t.Fatal(err)
	}
	for b, n := range names {
		one, err := m.LogProbs(Batch{Tokens: seqs[b : b+1], Adapters: []string{n}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range one[0] {
			if d := math.Abs(float64(one[0][i] - mixed[b][i])); d > 1e-5 {
				t.Fatalf("row %d (%q) position %d: mixed %v, alone %v", b, n, i, mixed[b][i], one[0][i])
			}
		}
	}
	// the bare base row equals the model with no adapter active
	if err := m.SetActiveAdapter(""); err != nil {
		t.Fatal(err)
	}
	bare, _ := m.LogProbs(Batch{Tokens: seqs[2:3]})
	if !slices.Equal(bare[0], mixed[2]) {
		t.Fatalf("NoAdapter row differs from the bare base")
	}
	if err := m.SetActiveAdapter("a"); err != nil {
		t.Fatal(err)
	}

	// gradients: the mixed batch accumulates what per-adapter batches do
	grads := func(idx []int) map[string][]float32 {
		bt := Batch{}
		var gg [][]float32
		for _, b := range idx {
			bt.Tokens = append(bt.Tokens, seqs[b])
			bt.Adapters = append(bt.Adapters, names[b])
			gg = append(gg, g[b])
		}
		if err := m.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
		if err := m.AccumulateLogProbGrads(bt, gg); err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for _, n := range m.Adapters() {
			out[n], _ = m.Adapter(n).Gradients()
		}
		return out
	}
	all := grads([]int{0, 1, 2, 3, 4, 5})
	ga := grads([]int{1, 3, 5})
	gb := grads([]int{0, 4})
	for n, want := range map[string][]float32{"a": ga["a"], "b": gb["b"]} {
		for i, v := range want {
			if d := math.Abs(float64(all[n][i] - v)); d > 1e-5*(1+math.Abs(float64(v))) {
				t.Fatalf("adapter %s gradient %d: mixed batch %v, own rows %v", n, i, all[n][i], v)
			}
		}
	}
	if slices.ContainsFunc(ga["b"], func(x float32) bool { return x != 0 }) {
		t.Fatalf("rows of a gave b a gradient")
	}

	// generation: sampled, each row keeps its random stream and adapter
	prompts := make([][]int32, len(names))
	for b := range prompts {
		prompts[b] = seqs[b][:2]
	}
	opt := GenerateOptions{MaxNewTokens: 6, Temperature: 1, Seed: 9, Adapters: names}
	out, err := m.Generate(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := m.generateNoCache(prompts, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !equal2(out, ref) {
		t.Fatalf("mixed generation %v, without cache %v", out, ref)
	}
	// a row's stream is (Seed, row): a batch of one row 3 draws as row 0
	for b, n := range names {
		o := opt
		o.Adapters = []string{n}
		one, err := m.Generate(prompts[b:b+1], o)
		if err != nil {
			t.Fatal(err)
		}
		if b == 0 && !slices.Equal(one[0], out[0]) {
			t.Fatalf("row 0 alone %v, in the mixed batch %v", one[0], out[0])
		}
	}
}

// TestLoRAStepTouchesOneAdapter: an update from rows of one adapter changes
// only that adapter's weights and optimizer state.
func TestLoRAStepTouchesOneAdapter(t *testing.T) {
	m := twoAdapterModel(t, cpu.New())
	defer m.Free()
	r := rand.New(rand.NewPCG(41, 41))
	seqs := randSeqs(r, 3, 3, 9, m.VocabSize())
	b0, _ := m.Adapter("b").Weights()
	base0, _ := m.Weights()
	st, err := m.TrainStep(Batch{Tokens: seqs, Adapters: []string{"a", "a", "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if st.GradNorm == 0 {
		t.Fatal("zero gradient norm")
	}
	b1, _ := m.Adapter("b").Weights()
	base1, _ := m.Weights()
	ad, bd := m.Adapter("a"), m.Adapter("b")
	if !slices.Equal(b0, b1) || !slices.Equal(base0, base1) || bd.mom != nil || bd.Steps() != 0 || ad.Steps() != 1 {
		t.Fatalf("a step on a's rows touched b (weights %v, moments %v, steps %d) or the base (%v)",
			!slices.Equal(b0, b1), bd.mom != nil, bd.Steps(), !slices.Equal(base0, base1))
	}
	// a Step without a backward since ZeroGrad is an error, not a silent no-op
	if err := m.ZeroGrad(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(); !errors.Is(err, ErrBatch) {
		t.Fatalf("Step with no gradients: %v", err)
	}
}

// TestLoRATrainingLearns: SFT on the adapter alone lowers the loss of a
// fixed batch, and the model with the adapter equals one adapter-only copy
// trained the same way (one actor per role vs one adapter per role).
func TestLoRATrainingLearns(t *testing.T) {
	cfg := tinyVariants(t)["qwen2-bias"]
	r := rand.New(rand.NewPCG(51, 51))
	seqs := randSeqs(r, 4, 6, 12, cfg.VocabSize)
	shared := mustLlama(t, cpu.New(), cfg, 52)
	defer shared.Free()
	perturb(t, shared, 53, 0.3)
	solo, err := shared.Clone(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer solo.Free()
	for _, m := range []*Llama{shared, solo} {
		m.Optim.LR = 1e-2
		if _, err := m.AddAdapter("planner", DefaultLoRA(), 54); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := shared.AddAdapter("tool", DefaultLoRA(), 55); err != nil {
		t.Fatal(err)
	}
	var first, last float64
	for i := 0; i < 30; i++ {
		st, err := shared.TrainStep(Batch{Tokens: seqs, Adapters: []string{"planner", "planner", "planner", "planner"}})
		if err != nil {
			t.Fatal(err)
		}
		st2, err := solo.TrainStep(Batch{Tokens: seqs})
		if err != nil {
			t.Fatal(err)
		}
		if st.Loss != st2.Loss || st.GradNorm != st2.GradNorm {
			t.Fatalf("step %d: shared base loss %v norm %v, own model %v %v", i, st.Loss, st.GradNorm, st2.Loss, st2.GradNorm)
		}
		if i == 0 {
			first = st.Loss
		}
		last = st.Loss
	}
	if !(last < first*0.8) {
		t.Fatalf("loss %v -> %v: the adapter did not learn", first, last)
	}
	if m := shared.Adapter("tool"); m.Steps() != 0 {
		t.Fatalf("the unused adapter took %d steps", m.Steps())
	}
}

// TestLoRAMerge: a model with the adapter merged into its weights gives the
// adapter's outputs; the original is unchanged.
func TestLoRAMerge(t *testing.T) {
	m := twoAdapterModel(t, cpu.New())
	defer m.Free()
	r := rand.New(rand.NewPCG(61, 61))
	seqs := randSeqs(r, 3, 3, 9, m.VocabSize())
	for _, n := range []string{"a", "b"} {
		want, err := m.LogProbs(Batch{Tokens: seqs, Adapters: []string{n, n, n}})
		if err != nil {
			t.Fatal(err)
		}
		w0, _ := m.Weights()
		c, err := m.MergedClone(n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Adapters()) != 0 {
			t.Fatalf("merged clone keeps adapters %v", c.Adapters())
		}
		got, err := c.LogProbs(Batch{Tokens: seqs})
		if err != nil {
			t.Fatal(err)
		}
		c.Free()
		for b := range want {
			for i := range want[b] {
				if d := math.Abs(float64(got[b][i] - want[b][i])); d > 1e-4 {
					t.Fatalf("merged %s: row %d position %d: %v, with the adapter %v", n, b, i, got[b][i], want[b][i])
				}
			}
		}
		if w1, _ := m.Weights(); !slices.Equal(w0, w1) {
			t.Fatal("MergedClone changed the original")
		}
	}
	if err := m.MergeAdapter("a"); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(m.Adapters(), "a") || m.ActiveAdapter() != "" {
		t.Fatalf("after MergeAdapter: adapters %v, active %q", m.Adapters(), m.ActiveAdapter())
	}
}

// TestLoRASaveLoad: an adapter saved in PEFT's layout loads back bit for
// bit (also onto a model of the same base from another process: the files
// name no troupe internals), and the config is PEFT's.
func TestLoRASaveLoad(t *testing.T) {
	m := twoAdapterModel(t, cpu.New())
	defer m.Free()
	dir := t.TempDir()
	b := m.Adapter("b")
	b.cfg.BaseModel = "org/base"
	if err := b.Save(dir); err != nil {
		t.Fatal(err)
	}
	var pc map[string]any
	data, err := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &pc); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"peft_type": "LORA", "r": 2.0, "lora_alpha": 3.0, "task_type": "CAUSAL_LM", "bias": "none",
		"use_rslora": true, "fan_in_fan_out": false, "lora_dropout": 0.0, "base_model_name_or_path": "org/base"} {
		if pc[k] != v {
			t.Fatalf("adapter_config.json %s = %v, want %v", k, pc[k], v)
		}
	}
	if tm := pc["target_modules"].([]any); len(tm) != 2 || tm[0] != "q_proj" || tm[1] != "v_proj" {
		t.Fatalf("target_modules %v", tm)
	}
	ck, err := hf.Open(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	names := ck.Names()
	info, _ := ck.Info("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight")
	ck.Close()
	if len(names) != 2*2*2 || !slices.Equal(info.Shape, []int{m.arch.KVH * m.arch.HD, 2}) {
		t.Fatalf("saved tensors %v, v_proj B shape %v", names, info.Shape)
	}
	c, err := m.Clone(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	ld, err := c.LoadAdapter("b2", dir)
	if err != nil {
		t.Fatal(err)
	}
	w0, _ := b.Weights()
	w1, _ := ld.Weights()
	if !slices.Equal(w0, w1) || ld.Config().Scaling() != b.Config().Scaling() || ld.Config().BaseModel != "org/base" {
		t.Fatalf("loaded adapter differs: weights %v, scaling %v vs %v", slices.Equal(w0, w1), ld.Config().Scaling(), b.Config().Scaling())
	}
	// the clone carried both adapters over
	if !slices.Equal(c.Adapters(), []string{"a", "b", "b2"}) || c.ActiveAdapter() != "a" {
		t.Fatalf("clone adapters %v active %q", c.Adapters(), c.ActiveAdapter())
	}
}

func TestLoadAdapterErrors(t *testing.T) {
	src := filepath.Join("testdata", "llama", "lora", "llama_gqa_all")
	base := filepath.Join("testdata", "llama", "llama_gqa")
	cfgData, err := os.ReadFile(filepath.Join(src, AdapterConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	ck, err := hf.Open(filepath.Join(src, AdapterWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	var tensors []hf.Tensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		x := make([]float32, numel(info.Shape))
		if err := ck.ReadF32(n, info.Shape, x); err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, hf.Tensor{Name: n, Shape: info.Shape, Data: x})
	}
	ck.Close()
	edit := func(f func(map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(cfgData, &m)
		f(m)
		out, _ := json.Marshal(m)
		return out
	}
	write := func(t *testing.T, cfg []byte, ts []hf.Tensor) string {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, AdapterConfigFile), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		if ts != nil {
			if err := hf.WriteSafetensors(filepath.Join(d, AdapterWeightsFile), ts, hf.F32, nil); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	m, err := LoadLlama(base, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	other, err := LoadLlama(filepath.Join("testdata", "llama", "llama3_rope"), cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Free()
	for _, c := range []struct {
		name, want string
		m          *Llama
		dir        func(t *testing.T) string
	}{
		{"other base", "has shape", other, func(*testing.T) string { return src }},
		{"unknown module", `unknown module "c_attn"`, m, func(t *testing.T) string {
			return write(t, edit(func(x map[string]any) { x["target_modules"] = []string{"q_proj", "c_attn"} }), tensors)
		}},
		{"missing tensor", "missing tensor base_model.model.model.layers.1.mlp.down_proj.lora_B.weight", m, func(t *testing.T) string {
			return write(t, cfgData, slices.DeleteFunc(slices.Clone(tensors), func(x hf.Tensor) bool {
				return x.Name == "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"
			}))
		}},
		{"extra tensor", "unexpected tensors", m, func(t *testing.T) string {
			ts := append(slices.Clone(tensors), hf.Tensor{Name: "base_model.model.lm_head.lora_A.weight", Shape: []int{4, 48}, Data: make([]float32, 4*48)})
			return write(t, cfgData, ts)
		}},
		{"fewer targets than tensors", "unexpected tensors", m, func(t *testing.T) string {
			return write(t, edit(func(x map[string]any) { x["target_modules"] = []string{"q_proj"} }), tensors)
		}},
		{"rank", "has shape", m, func(t *testing.T) string {
			return write(t, edit(func(x map[string]any) { x["r"] = 8 }), tensors)
		}},
		{"dora", "use_dora", m, func(t *testing.T) string {
			return write(t, edit(func(x map[string]any) { x["use_dora"] = true }), tensors)
		}},
		{"bias", "bias", m, func(t *testing.T) string {
			return write(t, edit(func(x map[string]any) { x["bias"] = "all" }), tensors)
		}},
		{"peft type", "peft_type", m, func(t *testing.T) string {
			return write(t, edit(func(x map[string]any) { x["peft_type"] = "IA3" }), tensors)
		}},
		{"layers subset", "layers_to_transform", m, func(t *testing.T) string {
			return write(t, edit(func(x map[string]any) { x["layers_to_transform"] = []int{0} }), tensors)
		}},
		{"pattern on one layer", "in 1 of 2 layers", m, func(t *testing.T) string {
			return write(t, edit(func(x map[string]any) { x["target_modules"] = `.*layers\.0\..*q_proj` }), tensors)
		}},
		{"no weights file", AdapterWeightsFile, m, func(t *testing.T) string { return write(t, cfgData, nil) }},
		{"no config", AdapterConfigFile, m, func(t *testing.T) string { return t.TempDir() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.m.LoadAdapter("x", c.dir(t))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
			t.Log(err)
			if c.m.Adapter("x") != nil {
				t.Fatal("a failed load left an adapter behind")
			}
		})
	}
	// the regular expression and "all-linear" forms of target_modules
	for _, tm := range []any{`.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)`, "all-linear",
		[]string{"self_attn.q_proj", "k_proj", "v_proj", "o_proj", "mlp.gate_proj", "up_proj", "down_proj"}} {
		d := write(t, edit(func(x map[string]any) { x["target_modules"] = tm }), tensors)
		if _, err := m.LoadAdapter("ok", d); err != nil {
			t.Fatalf("target_modules %v: %v", tm, err)
		}
		m.RemoveAdapter("ok")
	}
	// names
	if _, err := m.AddAdapter("", DefaultLoRA(), 1); !errors.Is(err, ErrAdapter) {
		t.Fatalf("empty name: %v", err)
	}
	if _, err := m.LogProbs(Batch{Tokens: [][]int32{{1, 2}}, Adapters: []string{"nope"}}); !errors.Is(err, ErrAdapter) {
		t.Fatalf("unknown adapter row: %v", err)
	}
	if _, err := m.AddAdapter("z", LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"lm_head"}}, 1); !errors.Is(err, ErrAdapter) {
		t.Fatalf("lm_head target: %v", err)
	}
}

// TestNoAdaptersRejectsNames: a model without adapters says so when a row
// names one.
func TestNoAdaptersRejectsNames(t *testing.T) {
	m := mustLlama(t, cpu.New(), tinyShape(t), 1)
	defer m.Free()
	if _, err := m.LogProbs(Batch{Tokens: [][]int32{{1, 2, 3}}, Adapters: []string{"a"}}); !errors.Is(err, ErrAdapter) {
		t.Fatalf("LogProbs: %v", err)
	}
	if _, err := m.Generate([][]int32{{1}}, GenerateOptions{MaxNewTokens: 1, Adapters: []string{"a"}}); !errors.Is(err, ErrAdapter) {
		t.Fatalf("Generate: %v", err)
	}
}

func FuzzPEFTConfig(f *testing.F) {
	for _, dir := range []string{"llama_gqa_all", "qwen3_qknorm_qv_rslora", "qwen2_tied_bias"} {
		data, err := os.ReadFile(filepath.Join("testdata", "llama", "lora", dir, AdapterConfigFile))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"peft_type":"LORA","r":4,"lora_alpha":8,"target_modules":"all-linear"}`))
	f.Add([]byte(`{"peft_type":"LORA","r":4,"target_modules":".*(q|v)_proj"}`))
	f.Add([]byte(`{"peft_type":"LORA","r":-1,"target_modules":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parsePEFTConfig(data, 3)
		if err != nil {
			if !errors.Is(err, ErrAdapter) {
				t.Fatalf("error %v is not ErrAdapter", err)
			}
			return
		}
		if err := cfg.validate(); err != nil {
			t.Fatalf("accepted config fails validation: %v", err)
		}
		out, err := marshalPEFTConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		back, err := parsePEFTConfig(out, 3)
		if err != nil {
			t.Fatalf("re-reading our own config: %v\n%s", err, out)
		}
		if back.Rank != cfg.Rank || back.Alpha != cfg.Alpha || back.RSLoRA != cfg.RSLoRA || !slices.Equal(back.Targets, cfg.Targets) {
			t.Fatalf("round trip %+v -> %+v", cfg, back)
		}
	})
}

// TestBF16Base: a base kept in BF16 computes what the float32 model with
// the same (rounded) weights computes: log-probs, adapter gradients and
// greedy generation, with the head in several vocabulary chunks.
//
// Both ways the model can run are checked: widening into float32 scratch
// (bf16Kernels off, or a backend without compute.BF16Matmuler) must agree to
// float32 rounding; the backend's BF16 matmuls (gpu/compute/cpu) agree as closely
// where they read float32 activations, and to bf16LogProbTol and
// bf16GradTol where they round them to BF16 (AVX512_BF16, six or more
// rows; see bf16Tols).
func TestBF16Base(t *testing.T) {
	defer func(n int, k bool) { headRows, bf16Kernels = n, k }(headRows, bf16Kernels)
	headRows = 5 // vocabulary 13: chunks of 5, 5, 3
	for _, kernels := range []bool{false, true} {
		bf16Kernels = kernels
		for name, cfg := range tinyVariants(t) {
			t.Run(fmt.Sprintf("%s/kernels=%v", name, kernels), func(t *testing.T) { testBF16Base(t, cfg, kernels) })
		}
	}
}

func testBF16Base(t *testing.T, cfg hf.Config, kernels bool) {
	ref := mustLlama(t, cpu.New(), cfg, 71)
	defer ref.Free()
	perturb(t, ref, 72, 0.3)
	m, err := ref.Clone(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	if err := m.SetBaseDType(hf.BF16); err != nil {
		t.Fatal(err)
	}
	if m.BaseDType() != hf.BF16 || m.params.Len() >= m.nparams/4 {
		t.Fatalf("BF16 base keeps %d float32 weights of %d", m.params.Len(), m.nparams)
	}
	if (m.bf.mm != nil) != kernels {
		t.Fatalf("BF16 kernels in use %v, want %v", m.bf.mm != nil, kernels)
	}
	lpTol, gradTol := bf16Tols(kernels)
	// the reference: float32 weights rounded as the BF16 base holds them
	w, err := m.Weights()
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	if err := m.ZeroGrad(); !errors.Is(err, ErrConfig) {
		t.Fatalf("training a BF16 base without adapters: %v", err)
	}
	for _, x := range []*Llama{ref, m} {
		ad, err := x.AddAdapter("a", LoRAConfig{Rank: 2, Alpha: 4, Targets: loraTargets[:]}, 73)
		if err != nil {
			t.Fatal(err)
		}
		randomizeAdapter(t, ad, 74, 0.2)
	}
	r := rand.New(rand.NewPCG(75, 75))
	batch := Batch{Tokens: randSeqs(r, 3, 3, 9, cfg.VocabSize)}
	g := randGrads(r, batch.Tokens)
	var lps [2][][]float32
	var grads [2][]float32
	var outs [2][][]int32
	for i, x := range []*Llama{ref, m} {
		if lps[i], err = x.LogProbs(batch); err != nil {
			t.Fatal(err)
		}
		if err := x.ZeroGrad(); err != nil {
			t.Fatal(err)
		}
		if err := x.AccumulateLogProbGrads(batch, g); err != nil {
			t.Fatal(err)
		}
		grads[i], _ = x.Adapter("a").Gradients()
		prompts := [][]int32{batch.Tokens[0][:2], batch.Tokens[1][:3]}
		if outs[i], err = x.Generate(prompts, GenerateOptions{MaxNewTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	for b := range lps[0] {
		for j := range lps[0][b] {
			if d := math.Abs(float64(lps[0][b][j] - lps[1][b][j])); d > lpTol {
				t.Fatalf("log-prob [%d,%d]: BF16 base %v, float32 %v", b, j, lps[1][b][j], lps[0][b][j])
			}
		}
	}
	gmax := 0.0
	for _, x := range grads[0] {
		gmax = max(gmax, math.Abs(float64(x)))
	}
	for i := range grads[0] {
		if d := math.Abs(float64(grads[0][i] - grads[1][i])); d > 1e-5*(1+math.Abs(float64(grads[0][i])))+gradTol*gmax {
			t.Fatalf("adapter gradient %d: BF16 base %v, float32 %v", i, grads[1][i], grads[0][i])
		}
	}
	if !equal2(outs[0], outs[1]) {
		t.Fatalf("greedy: BF16 base %v, float32 %v", outs[1], outs[0])
	}
	if m.grads != nil || m.mom != nil {
		t.Fatal("the BF16 base has gradient or moment buffers")
	}
	// merging needs float32: MergedClone widens, MergeAdapter refuses
	if err := m.MergeAdapter("a"); !errors.Is(err, ErrConfig) {
		t.Fatalf("MergeAdapter on a BF16 base: %v", err)
	}
	c, err := m.MergedClone("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	if c.BaseDType() != hf.F32 {
		t.Fatal("merged clone is not float32")
	}
}

// bf16LogProbTol and bf16GradTol (of the largest gradient) bound how far a
// BF16 base on the backend's BF16 matmuls may be from its float32 twin
// where the kernels round the activations to BF16 (AVX512_BF16, products of
// six or more rows), as PyTorch's BF16 matmul does: a relative error of up
// to 2^-9 on every activation that enters a product. On the tiny perturbed
// test models the largest differences seen (Zen 4) are 0.023 in log-prob
// and 1.9% of the largest adapter gradient; the bounds leave twice that
// and are still far below what a wrong weight, layer or bias gives.
const bf16LogProbTol, bf16GradTol = 0.05, 0.05

// bf16Tols is the log-prob tolerance and the gradient tolerance (a fraction
// of the largest gradient, added to float32 rounding) for a BF16 base with
// or without the backend's BF16 kernels.
func bf16Tols(kernels bool) (lp, grad float64) {
	if kernels && gemm.BF16Native() {
		return bf16LogProbTol, bf16GradTol
	}
	return 1e-5, 0
}

// TestToBF16MatchesPyTorch: rounding to BF16 matches PyTorch's .to(bfloat16)
// on gen.py's table of ties, subnormals and overflow.
func TestToBF16MatchesPyTorch(t *testing.T) {
	ck, err := hf.Open(filepath.Join("testdata", "llama", "rounding.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	info, _ := ck.Info("f32")
	x := make([]float32, info.Shape[0])
	want := make([]float32, len(x))
	if err := ck.ReadF32("f32", info.Shape, x); err != nil {
		t.Fatal(err)
	}
	if err := ck.ReadF32("bf16", info.Shape, want); err != nil {
		t.Fatal(err)
	}
	h := make([]uint16, len(x))
	got := make([]float32, len(x))
	toBF16(h, x)
	fromBF16(got, h)
	for i := range x {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%v (%#x): BF16 %v, PyTorch %v", x[i], math.Float32bits(x[i]), got[i], want[i])
		}
	}
	nan := []float32{float32(math.NaN())}
	toBF16(h[:1], nan)
	fromBF16(got[:1], h[:1])
	if !math.IsNaN(float64(got[0])) {
		t.Fatalf("NaN rounds to %v", got[0])
	}
}

// FuzzLoadAdapter feeds arbitrary adapter_model.safetensors bytes (seeded
// with a real adapter and damaged copies) to LoadAdapter: an error or an
// adapter, never a panic, and a failed load leaves no adapter behind.
func FuzzLoadAdapter(f *testing.F) {
	src := filepath.Join("testdata", "llama", "lora", "llama_gqa_all")
	cfgData, err := os.ReadFile(filepath.Join(src, AdapterConfigFile))
	if err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(src, AdapterWeightsFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[:64])
	bad := slices.Clone(good)
	bad[len(bad)-3] ^= 0x7f // a weight's exponent bits: maybe non-finite
	f.Add(bad)
	m, err := LoadLlama(filepath.Join("testdata", "llama", "llama_gqa"), cpu.New())
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, AdapterConfigFile), cfgData, 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, AdapterWeightsFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		ad, err := m.LoadAdapter("f", dir)
		if err != nil {
			if m.Adapter("f") != nil {
				t.Fatal("a failed load left an adapter behind")
			}
			return
		}
		if ad.NumParams() == 0 {
			t.Fatal("empty adapter loaded")
		}
		if err := m.RemoveAdapter("f"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLoadBF16Base: a checkpoint stored in BF16 loads into a BF16 base
// without loss (the same weights as LoadLlama's float32 model) and matches
// the PyTorch reference's log-probs and greedy continuations.
func TestLoadBF16Base(t *testing.T) {
	dir := filepath.Join("testdata", "llama", "qwen2_bf16")
	ref, ck := readRef(t, dir)
	full, err := LoadLlama(dir, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	defer full.Free()
	defer func(k bool) { bf16Kernels = k }(bf16Kernels)
	for i, be := range []compute.Backend{cpu.New(), cpu.New(), cpu.NewReference()} {
		// the first cpu backend widens, the second multiplies BF16 weights
		bf16Kernels = i > 0
		tol, _ := bf16Tols(bf16Kernels)
		tol = max(tol, refLogProbTol)
		m, err := Load(FromHF(dir), be, LoadOptions{BF16Base: true})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free()
		w0, _ := full.Weights()
		w1, _ := m.Weights()
		if m.BaseDType() != hf.BF16 || !slices.Equal(w0, w1) {
			t.Fatalf("BF16 load: dtype %s, weights equal %v", m.BaseDType(), slices.Equal(w0, w1))
		}
		B, Tp := len(ref.Lengths), 0
		seqs := make([][]int32, B)
		for b, n := range ref.Lengths {
			Tp = max(Tp, n)
			seqs[b] = ref.Tokens[b][:n]
		}
		want := readRefTensor(t, ck, "logprobs", B, Tp-1)
		lp, err := m.LogProbs(Batch{Tokens: seqs})
		if err != nil {
			t.Fatal(err)
		}
		for b := range lp {
			for p, v := range lp[b] {
				if d := math.Abs(float64(v - want[b*(Tp-1)+p])); d > tol {
					t.Fatalf("%s: log-prob [%d,%d] %v, reference %v", be.Name(), b, p, v, want[b*(Tp-1)+p])
				}
			}
		}
		for _, gr := range ref.Greedy {
			out, err := m.Generate([][]int32{gr.Prompt}, GenerateOptions{MaxNewTokens: ref.MaxNew})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out[0], gr.NewTokens) {
				t.Fatalf("%s: greedy %v, reference %v", be.Name(), out[0], gr.NewTokens)
			}
		}
	}
}
