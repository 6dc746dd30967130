package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// loadAll reads every expected tensor of a model directory.
func loadAll(t *testing.T, dir string) (Config, []Tensor) {
	t.Helper()
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var out []Tensor
	for _, e := range ExpectedTensors(cfg) {
		d := make([]float32, numel(e.Shape))
		if err := ck.ReadF32(e.Name, e.Shape, d); err != nil {
			t.Fatal(err)
		}
		out = append(out, Tensor{Name: e.Name, Shape: e.Shape, Data: d})
	}
	return cfg, out
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestSaveModelRoundTrip re-saves reference models in every dtype and
// layout and reads them back.
func TestSaveModelRoundTrip(t *testing.T) {
	for _, name := range []string{"qwen3_qknorm", "llama_mqa_tied_bias", "llama_v5_config", "qwen2_bf16"} {
		cfg, tensors := loadAll(t, filepath.Join(refDir, name))
		for _, opts := range []SaveOptions{{}, {DType: BF16}, {DType: F16, MaxShardBytes: 40000}, {DType: F32, MaxShardBytes: 1}} {
			t.Run(fmt.Sprintf("%s/%s/%d", name, opts.DType, opts.MaxShardBytes), func(t *testing.T) {
				dir := t.TempDir()
				if err := SaveModel(dir, cfg, tensors, opts); err != nil {
					t.Fatal(err)
				}
				cfg2, got := loadAll(t, dir)
				dt := opts.DType
				if dt == "" {
					dt = F32
				}
				if cfg2.DType != dt.ConfigName() {
					t.Errorf("dtype %q", cfg2.DType)
				}
				c1, c2 := cfg, cfg2
				c1.raw, c2.raw, c1.DType, c2.DType = nil, nil, "", ""
				if !reflect.DeepEqual(c1, c2) {
					t.Errorf("config changed:\n%+v\n%+v", c1, c2)
				}
				// Fields this package does not read survive.
				if string(cfg2.Raw("transformers_version")) != string(cfg.Raw("transformers_version")) || cfg2.Raw("initializer_range") == nil {
					t.Errorf("raw fields lost: %s", cfg2.Raw("transformers_version"))
				}
				for i, tt := range tensors {
					for j, v := range tt.Data {
						want := v
						switch dt {
						case BF16:
							want = math.Float32frombits(uint32(f32ToBF16(v)) << 16)
						case F16:
							want = f16ToF32(f32ToF16(v))
						}
						if got[i].Data[j] != want {
							t.Fatalf("%s[%d] = %v, want %v", tt.Name, j, got[i].Data[j], want)
						}
					}
				}
				files := listDir(t, dir)
				for _, f := range files {
					if strings.Contains(f, ".tmp-") {
						t.Errorf("temporary file %s left", f)
					}
				}
				if opts.MaxShardBytes == 0 {
					if !slices.Equal(files, []string{ConfigFile, WeightsFile}) {
						t.Errorf("files %v", files)
					}
					return
				}
				checkIndex(t, dir, tensors, dt, opts.MaxShardBytes)
			})
		}
	}
}

// checkIndex checks the shards and index.json against what transformers
// writes for the same state dict.
func checkIndex(t *testing.T, dir string, tensors []Tensor, dt DType, max int64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	// json.dumps(index, indent=2, sort_keys=True) + "\n"
	if !strings.HasPrefix(string(raw), "{\n  \"metadata\": {\n    \"total_parameters\": ") || !strings.HasSuffix(string(raw), "\n  }\n}\n") {
		t.Errorf("index layout:\n%.200s", raw)
	}
	var index struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	var params, size int64
	for _, tt := range tensors {
		params += int64(len(tt.Data))
		size += int64(len(tt.Data)) * int64(dt.Size())
	}
	if index.Metadata["total_parameters"] != params || index.Metadata["total_size"] != size || len(index.Metadata) != 2 {
		t.Errorf("metadata %v, want %d params %d bytes", index.Metadata, params, size)
	}
	// Re-derive the split independently: greedy in order, oversized alone.
	shards := map[string]int64{}
	for _, tt := range tensors {
		shards[index.WeightMap[tt.Name]] += int64(len(tt.Data)) * int64(dt.Size())
	}
	n := len(shards)
	for f, bytes := range shards {
		var i, of int
		if _, err := fmt.Sscanf(f, "model-%05d-of-%05d.safetensors", &i, &of); err != nil || of != n || i < 1 || i > n {
			t.Errorf("shard name %s (of %d)", f, n)
		}
		ck, err := Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if ck.Metadata()["format"] != "pt" {
			t.Errorf("%s metadata %v", f, ck.Metadata())
		}
		ck.Close()
		if bytes > max && len(ck.Names()) > 1 {
			t.Errorf("%s holds %d bytes in %d tensors, max %d", f, bytes, len(ck.Names()), max)
		}
	}
	if n < 2 {
		t.Errorf("%d shards", n)
	}
}

func TestSplitShards(t *testing.T) {
	mk := func(sizes ...int) []Tensor {
		var out []Tensor
		for i, s := range sizes {
			out = append(out, Tensor{Name: fmt.Sprint(i), Shape: []int{s}, Data: make([]float32, s)})
		}
		return out
	}
	names := func(shards [][]Tensor) string {
		var parts []string
		for _, s := range shards {
			var n []string
			for _, t := range s {
				n = append(n, t.Name)
			}
			parts = append(parts, strings.Join(n, ","))
		}
		return strings.Join(parts, " | ")
	}
	for _, tc := range []struct {
		sizes []int
		max   int64
		want  string
	}{
		{[]int{1, 1, 1}, 0, "0,1,2"},
		{[]int{1, 1, 1}, 8, "0,1 | 2"},
		{[]int{1, 1, 1}, 12, "0,1,2"},
		// huggingface_hub: a tensor over the limit gets its own shard,
		// listed before the one being filled.
		{[]int{1, 5, 1}, 8, "1 | 0,2"},
		{[]int{2, 1, 1}, 8, "0 | 1,2"},
		{[]int{2, 1, 2}, 8, "0 | 1 | 2"},
	} {
		if got := names(splitShards(mk(tc.sizes...), F32, tc.max)); got != tc.want {
			t.Errorf("%v max %d: %s, want %s", tc.sizes, tc.max, got, tc.want)
		}
	}
}

// TestSaveModelReplaces: a save over an earlier one with another layout
// leaves only the new files.
func TestSaveModelReplaces(t *testing.T) {
	cfg, tensors := loadAll(t, filepath.Join(refDir, "llama_gqa"))
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(dir, "model-00007-of-00009.safetensors"), []byte("stale"), 0o644)
	if err := SaveModel(dir, cfg, tensors, SaveOptions{MaxShardBytes: 50000}); err != nil {
		t.Fatal(err)
	}
	files := listDir(t, dir)
	if slices.Contains(files, "model-00007-of-00009.safetensors") || slices.Contains(files, WeightsFile) || !slices.Contains(files, IndexFile) {
		t.Errorf("after sharded save: %v", files)
	}
	if err := SaveModel(dir, cfg, tensors, SaveOptions{DType: BF16}); err != nil {
		t.Fatal(err)
	}
	files = listDir(t, dir)
	if !slices.Equal(files, []string{ConfigFile, WeightsFile, "tokenizer.json"}) {
		t.Errorf("after single save: %v", files)
	}
	if _, got := loadAll(t, dir); len(got) != len(tensors) {
		t.Error("reload failed")
	}
}

func TestSaveModelRejects(t *testing.T) {
	cfg, tensors := loadAll(t, filepath.Join(refDir, "llama_gqa"))
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		tensors []Tensor
		opts    SaveOptions
		want    string
	}{
		{"missing", tensors[1:], SaveOptions{}, "1 missing (model.embed_tokens.weight)"},
		{"extra", append(slices.Clone(tensors), Tensor{Name: "x", Shape: []int{1}, Data: []float32{0}}), SaveOptions{}, "1 unexpected (x)"},
		{"misshaped", append([]Tensor{{Name: tensors[0].Name, Shape: []int{2, 2}, Data: make([]float32, 4)}}, tensors[1:]...), SaveOptions{}, "misshaped (model.embed_tokens.weight: shape [2,2], want [128,48])"},
		{"short data", append([]Tensor{{Name: tensors[0].Name, Shape: tensors[0].Shape, Data: make([]float32, 4)}}, tensors[1:]...), SaveOptions{}, "data has 4"},
		{"dtype", tensors, SaveOptions{DType: "I8"}, `dtype "I8"`},
	} {
		err := SaveModel(dir, cfg, tc.tensors, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if tc.name == "missing" && !errors.Is(err, ErrCheckpoint) {
			t.Errorf("missing: not ErrCheckpoint")
		}
	}
	if files := listDir(t, dir); len(files) != 0 {
		t.Errorf("rejected saves left %v", files)
	}
	bad := cfg
	bad.HiddenAct = "relu"
	if err := SaveModel(dir, bad, tensors, SaveOptions{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("bad config: %v", err)
	}
}

func TestCheckTensorsIgnores(t *testing.T) {
	cfg, tensors := loadAll(t, filepath.Join(refDir, "qwen2_tied"))
	if !cfg.TieWordEmbeddings {
		t.Fatal("not tied")
	}
	extra := append(slices.Clone(tensors),
		Tensor{Name: "lm_head.weight", Shape: tensors[0].Shape},
		Tensor{Name: "model.layers.0.self_attn.rotary_emb.inv_freq", Shape: []int{6}})
	rep := CheckTensors(cfg, tensorList(extra))
	if !rep.OK() || len(rep.Ignored) != 2 {
		t.Errorf("%+v", rep)
	}
}
