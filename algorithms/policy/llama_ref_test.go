package policy

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// The PyTorch reference (testdata/llama/gen.py: a plain float64
// implementation from the architecture's definition, independent of this
// package and of transformers) writes small Hugging Face model directories
// with the logits, next-token log-probs, every parameter's gradient of
// L = -sum w·logp and greedy continuations. These tests load each directory
// through LoadLlama and hold the float32 model to them.

// Tolerances: float32 against float64 over two or three layers; the fast
// backend's worst cases measure 1.2e-5 (logits) and 2.4e-6 (gradients).
const (
	refLogProbTol = 1e-4 // absolute, per log-prob
	refLogitTol   = 5e-5 // absolute, per logit (they are O(1))
	refGradTol    = 2e-5 // per element, relative to the tensor's largest |gradient|
)

type llamaRef struct {
	Case     string `json:"case"`
	Lengths  []int  `json:"lengths"`
	Tokens   [][]int32
	MaxNew   int       `json:"max_new_tokens"`
	Loss     float64   `json:"loss"`
	StoredDT string    `json:"stored_dtype"`
	InvFreq  []float64 `json:"rope_inv_freq"`
	Greedy   []struct {
		Prompt    []int32 `json:"prompt"`
		NewTokens []int32 `json:"new_tokens"`
	} `json:"greedy"`
}

func refCases(t *testing.T) []string {
	dirs, err := filepath.Glob(filepath.Join("testdata", "llama", "*", "reference.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no reference cases under testdata/llama (%v)", err)
	}
	for i := range dirs {
		dirs[i] = filepath.Dir(dirs[i])
	}
	return dirs
}

func readRef(t *testing.T, dir string) (*llamaRef, *hf.Checkpoint) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref llamaRef
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

func readRefTensor(t *testing.T, ck *hf.Checkpoint, name string, shape ...int) []float32 {
	t.Helper()
	x := make([]float32, numel(shape))
	if err := ck.ReadF32(name, shape, x); err != nil {
		t.Fatal(err)
	}
	return x
}

// logitsOf returns the logits (B,T,V) of batch's inputs (padded rows).
func (m *Llama) logitsOf(t *testing.T, batch Batch) ([]float32, int) {
	B, T, err := m.load(batch, false)
	if err != nil {
		t.Fatal(err)
	}
	m.forward(B, T)
	V, C := m.arch.V, m.arch.C
	out := make([]float32, B*T*V)
	lg := view(m.be, m.a.logits, 0, V)
	for r := 0; r < B*T; r++ {
		m.headMatmul(lg, view(m.be, m.a.lnf, r*C, C), 1)
		m.be.Download(out[r*V:(r+1)*V], lg)
	}
	if err := m.be.Sync(); err != nil {
		t.Fatal(err)
	}
	return out, T
}

func TestLlamaMatchesPyTorchReference(t *testing.T) {
	for _, dir := range refCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ref, ck := readRef(t, dir)
			for _, be := range []compute.Backend{cpu.New(), cpu.NewReference()} {
				m, err := LoadLlama(dir, be)
				if err != nil {
					t.Fatal(err)
				}
				checkAgainstRef(t, m, ref, ck)
				m.Free()
			}
		})
	}
}

func checkAgainstRef(t *testing.T, m *Llama, ref *llamaRef, ck *hf.Checkpoint) {
	name := ref.Case + " on " + m.be.Name()
	for i, f := range ref.InvFreq {
		if d := math.Abs(f - m.arch.invFreq[i]); d > 1e-6*f {
			t.Fatalf("%s: RoPE inverse frequency %d: %v, reference %v", name, i, m.arch.invFreq[i], f)
		}
	}
	batch, Tp := llamaRefBatch(t, ref, ck)
	B, V := len(ref.Lengths), m.VocabSize()

	// logits of every real position
	want := readRefTensor(t, ck, "logits", B, Tp, V)
	got, T := m.logitsOf(t, Batch{Tokens: batch.Tokens})
	var worst float64
	for b, n := range ref.Lengths {
		for p := 0; p < n-1; p++ { // inputs are tokens[:n-1]: the last token predicts nothing
			for v := 0; v < V; v++ {
				d := math.Abs(float64(got[(b*T+p)*V+v] - want[(b*Tp+p)*V+v]))
				worst = math.Max(worst, d)
				if d > refLogitTol {
					t.Fatalf("%s: logit [%d,%d,%d] %v, reference %v", name, b, p, v, got[(b*T+p)*V+v], want[(b*Tp+p)*V+v])
				}
			}
		}
	}
	t.Logf("%s: worst logit difference %.2g", name, worst)

	// log-probs, the loss, and the gradients of L = -sum w·logp, every tensor
	lpErr, lpAt, loss, gErr, gAt := refErrors(t, m, ref, ck)
	if lpErr > refLogProbTol {
		t.Fatalf("%s: %s", name, lpAt)
	}
	if math.Abs(loss-ref.Loss) > 1e-4*math.Abs(ref.Loss) {
		t.Fatalf("%s: loss %v, reference %v", name, loss, ref.Loss)
	}
	if gErr > refGradTol {
		t.Fatalf("%s: %s", name, gAt)
	}
	t.Logf("%s: worst log-prob difference %.2g, worst relative gradient difference %.2g", name, lpErr, gErr)

	// greedy continuations, batched with ragged prompts and one by one
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
		one, err := m.Generate(prompts[i:i+1], opt)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out[i], gr.NewTokens) || !slices.Equal(one[0], gr.NewTokens) {
			t.Fatalf("%s: greedy continuation of %v: batched %v, alone %v, reference %v", name, gr.Prompt, out[i], one[0], gr.NewTokens)
		}
	}
}
