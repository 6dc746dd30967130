package hf

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// refDir holds the PyTorch reference cases (make testdata-llama).
const refDir = "../testdata/llama"

func refCases(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(refDir)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(refDir, e.Name(), ConfigFile)); err == nil {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) < 9 {
		t.Fatalf("%d reference cases in %s, want 9 (run make testdata-llama)", len(dirs), refDir)
	}
	return dirs
}

type refJSON struct {
	Case         string      `json:"case"`
	StoredDType  string      `json:"stored_dtype"`
	Tokens       [][]int     `json:"tokens"`
	Lengths      []int       `json:"lengths"`
	Loss         float64     `json:"loss"`
	RopeInvFreq  []float64   `json:"rope_inv_freq"`
	MaxNewTokens int         `json:"max_new_tokens"`
	MinTop2Gap   float64     `json:"min_top2_gap"`
	Greedy       []refGreedy `json:"greedy"`
}

type refGreedy struct {
	Prompt    []int   `json:"prompt"`
	NewTokens []int   `json:"new_tokens"`
	MinGap    float64 `json:"min_top2_gap"`
}

// TestReferenceCases opens every reference model the way the model loader
// will, so the generator and this package agree on names, shapes, dtypes,
// config defaults and RoPE frequencies; and checks the reference outputs
// have the layout the model's tests read.
func TestReferenceCases(t *testing.T) {
	features := map[string]bool{}
	for _, name := range refCases(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(refDir, name)
			cfg, err := LoadConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			rep := CheckTensors(cfg, ck)
			if err := rep.Err(); err != nil {
				t.Fatal(err)
			}
			if len(rep.Ignored) != 0 {
				t.Errorf("ignored tensors %v", rep.Ignored)
			}
			var ref refJSON
			data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &ref); err != nil {
				t.Fatal(err)
			}
			var sum float64
			for _, e := range ExpectedTensors(cfg) {
				info, _ := ck.Info(e.Name)
				if string(info.DType) != ref.StoredDType {
					t.Errorf("%s: dtype %s, reference.json says %s", e.Name, info.DType, ref.StoredDType)
				}
				if want := DType(ref.StoredDType).ConfigName(); cfg.DType != want {
					t.Errorf("config dtype %q, want %q", cfg.DType, want)
				}
				buf := make([]float32, numel(e.Shape))
				if err := ck.ReadF32(e.Name, e.Shape, buf); err != nil {
					t.Fatal(err)
				}
				for _, v := range buf {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("%s: %v", e.Name, v)
					}
					sum += math.Abs(float64(v))
				}
			}
			if sum == 0 {
				t.Fatal("all weights zero")
			}

			// RoPE frequencies: the generator's float64 values.
			inv := cfg.RopeInvFreq()
			if len(inv) != len(ref.RopeInvFreq) {
				t.Fatalf("%d inverse frequencies, reference %d", len(inv), len(ref.RopeInvFreq))
			}
			for i := range inv {
				if d := math.Abs(inv[i]-ref.RopeInvFreq[i]) / ref.RopeInvFreq[i]; d > 1e-13 {
					t.Errorf("inv_freq[%d] = %v, reference %v", i, inv[i], ref.RopeInvFreq[i])
				}
			}

			// Reference outputs.
			out, err := Open(filepath.Join(dir, "reference.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			B, T := len(ref.Tokens), len(ref.Tokens[0])
			if B != len(ref.Lengths) || ref.Lengths[0] != T {
				t.Fatalf("tokens %dx%d, lengths %v", B, T, ref.Lengths)
			}
			want := map[string][]int{
				"logits":   {B, T, cfg.VocabSize},
				"logprobs": {B, T - 1},
				"weights":  {B, T - 1},
			}
			for _, e := range ExpectedTensors(cfg) {
				want["grad."+e.Name] = e.Shape
			}
			if got := out.Names(); !slices.Equal(got, sortedNames(want)) {
				t.Fatalf("reference tensors %v, want %v", got, sortedNames(want))
			}
			lp := make([]float32, B*(T-1))
			w := make([]float32, B*(T-1))
			if err := out.ReadF32("logprobs", want["logprobs"], lp); err != nil {
				t.Fatal(err)
			}
			if err := out.ReadF32("weights", want["weights"], w); err != nil {
				t.Fatal(err)
			}
			var loss float64
			for b := 0; b < B; b++ {
				for tt := 0; tt < T-1; tt++ {
					i := b*(T-1) + tt
					if tt >= ref.Lengths[b]-1 && (lp[i] != 0 || w[i] != 0) {
						t.Fatalf("row %d position %d is padding but logprob %v weight %v", b, tt, lp[i], w[i])
					}
					if tt < ref.Lengths[b]-1 && !(lp[i] < 0) {
						t.Fatalf("row %d position %d: logprob %v", b, tt, lp[i])
					}
					loss -= float64(w[i]) * float64(lp[i])
				}
			}
			if math.Abs(loss-ref.Loss) > 1e-4*math.Abs(ref.Loss) {
				t.Errorf("loss from the stored logprobs and weights %v, reference.json %v", loss, ref.Loss)
			}
			if ref.MaxNewTokens != 8 || len(ref.Greedy) < 2 || ref.MinTop2Gap <= 1e-3 {
				t.Errorf("greedy: %d new tokens, %d prompts, gap %v", ref.MaxNewTokens, len(ref.Greedy), ref.MinTop2Gap)
			}
			for _, g := range ref.Greedy {
				if len(g.NewTokens) != ref.MaxNewTokens {
					t.Errorf("greedy continuation of %d tokens", len(g.NewTokens))
				}
			}

			// What the case covers, for the check below.
			features[cfg.ModelType] = true
			if cfg.NumKeyValueHeads == 1 {
				features["mqa"] = true
			}
			if cfg.NumKeyValueHeads > 1 && cfg.NumKeyValueHeads < cfg.NumAttentionHeads {
				features["gqa"] = true
			}
			if cfg.TieWordEmbeddings {
				features["tied"] = true
			}
			if cfg.OBias() && cfg.MLPBiases() {
				features["llama biases"] = true
			}
			if cfg.QKNorm() && cfg.HeadDim != cfg.HiddenSize/cfg.NumAttentionHeads {
				features["qwen3 head_dim"] = true
			}
			if cfg.RopeScaling != nil {
				features["llama3 rope"] = true
				if T <= cfg.RopeScaling.OriginalMaxPositionEmbeddings {
					t.Errorf("llama3 case: sequences of %d do not pass original_max_position_embeddings %d", T, cfg.RopeScaling.OriginalMaxPositionEmbeddings)
				}
			}
			if len(ck.Files()) > 1 {
				features["sharded"] = true
			}
			features[ref.StoredDType] = true
			if cfg.Raw("rope_parameters") != nil && cfg.Raw("dtype") != nil {
				features["v5 config"] = true
			}
		})
	}
	for _, f := range []string{"llama", "qwen2", "qwen3", "mqa", "gqa", "tied", "llama biases", "qwen3 head_dim",
		"llama3 rope", "sharded", "F32", "BF16", "F16", "v5 config"} {
		if !features[f] {
			t.Errorf("no reference case covers %s", f)
		}
	}
}

func sortedNames(m map[string][]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestReferenceShardOrder checks the sharded case really stores tensors out
// of header order (the point of that case).
func TestReferenceShardOrder(t *testing.T) {
	dir := filepath.Join(refDir, "llama_sharded")
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if n := len(ck.Files()); n < 2 {
		t.Fatalf("%d files", n)
	}
	for _, f := range ck.files {
		// header order is the JSON order; compare with data offsets
		var headerOrder []string
		n := int(f.data[0]) | int(f.data[1])<<8 | int(f.data[2])<<16 | int(f.data[3])<<24
		decodeObject(f.data[8:8+n], func(key string, _ json.RawMessage) error {
			if key != "__metadata__" {
				headerOrder = append(headerOrder, key)
			}
			return nil
		})
		offs := make([]int64, len(headerOrder))
		for i, name := range headerOrder {
			offs[i] = ck.tensors[name].off
		}
		if slices.IsSorted(offs) {
			t.Errorf("%s: data in header order", f.name)
		}
	}
}
