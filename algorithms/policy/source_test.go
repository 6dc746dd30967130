package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute/cpu"
)

var (
	refBase    = filepath.Join("testdata", "llama", "llama_gqa")
	refAdapter = filepath.Join("testdata", "llama", "lora", "llama_gqa_all")
)

// weightsOf downloads a model's or an adapter's weights.
func weightsOf(t *testing.T, x interface{ Weights() ([]float32, error) }) []float32 {
	t.Helper()
	w, err := x.Weights()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestSourceFromScratch(t *testing.T) {
	cfg := tinyShape(t)
	want := mustLlama(t, cpu.New(), cfg, 5)
	r, err := FromScratch(cfg).Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if r.Dir != "" || r.Meta != nil || r.Adapter != nil || r.Config.HiddenSize != cfg.HiddenSize {
		t.Fatalf("resolved %+v", r)
	}
	// a from-scratch source loads as often as asked, each time from the seed
	for range 2 {
		m, err := r.Load(cpu.New(), LoadOptions{Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(weightsOf(t, m), weightsOf(t, want)) {
			t.Fatal("FromScratch's weights are not NewLlama's for the same seed")
		}
		m.Free()
	}
	bf, err := Load(FromScratch(cfg), cpu.New(), LoadOptions{Seed: 5, BF16Base: true})
	if err != nil {
		t.Fatal(err)
	}
	if bf.BaseDType() != hf.BF16 {
		t.Fatalf("BF16Base: base dtype %s", bf.BaseDType())
	}
	bad := cfg
	bad.NumKeyValueHeads = 3
	if _, err := FromScratch(bad).Resolve(); !errors.Is(err, ErrSource) || !errors.Is(err, hf.ErrConfig) {
		t.Fatalf("bad shape: %v", err)
	}
	if _, err := (Source{}).Resolve(); !errors.Is(err, ErrSource) {
		t.Fatalf("no source: %v", err)
	}
}

func TestSourceWithAdapter(t *testing.T) {
	base, err := LoadLlama(refBase, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	want, err := base.LoadAdapter("ref", refAdapter)
	if err != nil {
		t.Fatal(err)
	}
	src := WithAdapter(FromHF(refBase), refAdapter)
	r, err := src.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if r.Dir != refBase || r.Adapter == nil || r.Adapter.Dir != refAdapter || r.Adapter.Config.Rank != 4 || r.Source().String() != src.String() {
		t.Fatalf("resolved %+v from %s", r, src)
	}
	m, err := r.Load(cpu.New(), LoadOptions{Adapter: "planner"})
	if err != nil {
		t.Fatal(err)
	}
	if m.ActiveAdapter() != "planner" || !slices.Equal(m.Adapters(), []string{"planner"}) {
		t.Fatalf("adapters %v, active %q", m.Adapters(), m.ActiveAdapter())
	}
	if !slices.Equal(weightsOf(t, m.Adapter("planner")), weightsOf(t, want)) ||
		!slices.Equal(weightsOf(t, m), weightsOf(t, base)) {
		t.Fatal("WithAdapter loads other weights than LoadLlama and LoadAdapter")
	}
	// the files are closed once loaded: a model directory loads once
	if _, err := r.Load(cpu.New(), LoadOptions{}); err == nil {
		t.Fatal("a Resolved model directory loaded twice")
	}
	// PEFT's name by default
	d, err := Load(src, cpu.New(), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.ActiveAdapter() != "default" {
		t.Fatalf("adapter %q, want PEFT's default", d.ActiveAdapter())
	}
	// an adapter on a from-scratch base of the adapter's shape
	sm, err := Load(WithAdapter(FromScratch(base.Config()), refAdapter), cpu.New(), LoadOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(weightsOf(t, sm.Adapter("default")), weightsOf(t, want)) {
		t.Fatal("adapter on a from-scratch base")
	}
}

func TestSourceFromCheckpoint(t *testing.T) {
	r, err := FromCheckpoint(refAdapter, FromHF(refBase)).Resolve()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if r.Adapter == nil || r.Dir != refBase {
		t.Fatalf("an adapter checkpoint resolved as %+v", r)
	}
	// a model directory: the base is not needed
	if r, err = FromCheckpoint(refBase, Source{}).Resolve(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if r.Adapter != nil || r.Dir != refBase {
		t.Fatalf("a model checkpoint resolved as %+v", r)
	}
	empty := t.TempDir()
	_, err = FromCheckpoint(empty, FromHF(refBase)).Resolve()
	if !errors.Is(err, ErrSource) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), AdapterConfigFile) || !strings.Contains(err.Error(), hf.ConfigFile) {
		t.Fatalf("empty directory: %v", err)
	}
}

// TestSourceErrors: bad sources fail at Resolve, typed and naming the
// file, before any backend memory is spent.
func TestSourceErrors(t *testing.T) {
	copyDir := func(t *testing.T, src string, edit func(name string, b []byte) []byte) string {
		dst := t.TempDir()
		ents, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if b = edit(e.Name(), b); b != nil {
				if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		return dst
	}
	for _, tc := range []struct {
		name string
		src  func(t *testing.T) Source
		is   []error
		want []string // substrings of the error
	}{
		{"adapter without its base", func(t *testing.T) Source { return WithAdapter(Source{}, refAdapter) },
			[]error{ErrNoBase}, []string{refAdapter}},
		{"checkpoint adapter without its base", func(t *testing.T) Source { return FromCheckpoint(refAdapter, Source{}) },
			[]error{ErrNoBase}, []string{refAdapter}},
		{"no adapter", func(t *testing.T) Source { return WithAdapter(FromHF(refBase), t.TempDir()) },
			[]error{fs.ErrNotExist}, []string{AdapterConfigFile}},
		{"malformed adapter_config.json", func(t *testing.T) Source {
			return WithAdapter(FromHF(refBase), copyDir(t, refAdapter, func(n string, b []byte) []byte {
				if n == AdapterConfigFile {
					return b[:len(b)/2]
				}
				return b
			}))
		}, []error{ErrAdapter}, []string{AdapterConfigFile}},
		{"adapter of another base", func(t *testing.T) Source {
			return WithAdapter(FromHF(refBase), copyDir(t, refAdapter, func(n string, b []byte) []byte {
				if n == AdapterConfigFile {
					return []byte(strings.Replace(string(b), `"q_proj",`, `"q_proj", "lm_head",`, 1))
				}
				return b
			}))
		}, []error{ErrAdapter}, []string{"target_modules", "lm_head"}},
		{"adapter without weights", func(t *testing.T) Source {
			return WithAdapter(FromHF(refBase), copyDir(t, refAdapter, func(n string, b []byte) []byte {
				if n == AdapterWeightsFile {
					return nil
				}
				return b
			}))
		}, []error{fs.ErrNotExist}, []string{AdapterWeightsFile}},
		{"adapter on an adapter", func(t *testing.T) Source {
			return WithAdapter(WithAdapter(FromHF(refBase), refAdapter), refAdapter)
		}, nil, []string{"one adapter"}},
		{"malformed config.json", func(t *testing.T) Source {
			return FromHF(copyDir(t, refBase, func(n string, b []byte) []byte {
				if n == hf.ConfigFile {
					return b[:len(b)/2]
				}
				return b
			}))
		}, []error{hf.ErrConfig}, []string{hf.ConfigFile}},
		{"bad base under an adapter", func(t *testing.T) Source { return WithAdapter(FromHF(t.TempDir()), refAdapter) },
			[]error{fs.ErrNotExist}, []string{hf.ConfigFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.src(t).Resolve()
			if !errors.Is(err, ErrSource) {
				t.Fatalf("not ErrSource: %v", err)
			}
			t.Log(err)
			for _, e := range tc.is {
				if !errors.Is(err, e) {
					t.Errorf("error %q is not %v", err, e)
				}
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestAdapterLoad(t *testing.T) {
	m, err := LoadLlama(refBase, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.LoadAdapter("ref", refAdapter)
	if err != nil {
		t.Fatal(err)
	}
	cfg := want.Config()
	ad, err := m.AddAdapter("a", cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	if err := ad.Load(refAdapter); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(weightsOf(t, ad), weightsOf(t, want)) {
		t.Fatal("Adapter.Load did not read the adapter's weights")
	}
	other := cfg
	other.Alpha *= 2
	if other.Matches(cfg) || !cfg.Matches(LoRAConfig{Rank: cfg.Rank, Alpha: cfg.Alpha, Targets: slices.Clone(loraTargets[:])}) {
		t.Fatal("Matches")
	}
	b, err := m.AddAdapter("b", other, 9)
	if err != nil {
		t.Fatal(err)
	}
	before := weightsOf(t, b)
	if err := b.Load(refAdapter); !errors.Is(err, ErrAdapter) || !strings.Contains(err.Error(), "scaling") {
		t.Fatalf("an adapter of another scaling: %v", err)
	}
	if !slices.Equal(weightsOf(t, b), before) {
		t.Fatal("a refused Load changed the weights")
	}
}
