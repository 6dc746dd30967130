package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"troupe/algorithms/policy/hf"
	"troupe/algorithms/policy/hftest"
)

func TestModelInspect(t *testing.T) {
	dir, err := hftest.Write(t.TempDir(), hftest.Options{ModelType: "qwen2"})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := runModel([]string{"inspect", "--json", dir}, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var info ModelInfo
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		t.Fatal(err)
	}
	cfg, _ := hftest.Config(hftest.Options{ModelType: "qwen2"})
	if info.ModelType != "qwen2" || info.Params != cfg.NumParams() || info.StoredBytes != 4*cfg.NumParams() ||
		!info.ChatTemplate || info.TokenizerVocab != hftest.Vocab || !info.QKVBias || len(info.EOS) == 0 || info.EOS[0] != hftest.ImEnd {
		t.Fatalf("inspect: %+v", info)
	}
	out.Reset()
	if err := runModel([]string{"inspect", dir}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"qwen2", "parameters", "memory to train", "chat template true"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out.String())
		}
	}
	if err := runModel([]string{"inspect", t.TempDir()}, &out, &errb); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("a directory without config.json: %v", err)
	}
}

// reference is the part of a PyTorch reference case (algorithms/policy/
// testdata/llama, written by gen.py) the CLI is checked against.
type reference struct {
	Tokens  [][]int32 `json:"tokens"`
	Lengths []int     `json:"lengths"`
	Greedy  []struct {
		Prompt    []int32 `json:"prompt"`
		NewTokens []int32 `json:"new_tokens"`
	} `json:"greedy"`
}

func ids(xs []int32) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// TestGenerateAndLogprobsMatchPyTorch runs `troupe generate` and `troupe
// logprobs` on the plain-PyTorch reference checkpoints: greedy tokens must
// be identical and log-probs within 1e-4.
func TestGenerateAndLogprobsMatchPyTorch(t *testing.T) {
	for _, c := range []string{"llama_gqa", "qwen3_qknorm", "llama_sharded", "qwen2_bf16"} {
		t.Run(c, func(t *testing.T) {
			dir := filepath.Join("..", "..", "algorithms", "policy", "testdata", "llama", c)
			b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
			if err != nil {
				t.Fatal(err)
			}
			var ref reference
			if err := json.Unmarshal(b, &ref); err != nil {
				t.Fatal(err)
			}
			ck, err := hf.Open(filepath.Join(dir, "reference.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			B, T := len(ref.Tokens), len(ref.Tokens[0])
			want := make([]float32, B*(T-1))
			if err := ck.ReadF32("logprobs", []int{B, T - 1}, want); err != nil {
				t.Fatal(err)
			}
			for _, g := range ref.Greedy {
				var out, errb bytes.Buffer
				err := runGenerate([]string{"--model", dir, "--backend", "cpu", "--prompt-ids", ids(g.Prompt),
					"--max-new-tokens", fmt.Sprint(len(g.NewTokens)), "--json"}, &out, &errb)
				if err != nil {
					t.Fatalf("generate: %v: %s", err, errb.String())
				}
				var res GenerateOutput
				if err := json.Unmarshal(out.Bytes(), &res); err != nil {
					t.Fatal(err)
				}
				if ids(res.IDs) != ids(g.NewTokens) {
					t.Fatalf("greedy from %v: troupe %v, PyTorch %v", g.Prompt, res.IDs, g.NewTokens)
				}
			}
			row := ref.Tokens[1][:ref.Lengths[1]]
			split := len(row) / 2
			var out, errb bytes.Buffer
			err = runLogprobs([]string{"--model", dir, "--backend", "cpu", "--prompt-ids", ids(row[:split]),
				"--completion-ids", ids(row[split:]), "--json"}, &out, &errb)
			if err != nil {
				t.Fatalf("logprobs: %v: %s", err, errb.String())
			}
			var res LogprobsOutput
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			if len(res.Logprobs) != len(row)-split {
				t.Fatalf("%d log-probs for %d completion tokens", len(res.Logprobs), len(row)-split)
			}
			for i, lp := range res.Logprobs {
				w := want[1*(T-1)+split-1+i]
				if math.Abs(float64(lp-w)) > 1e-4 {
					t.Fatalf("log-prob of completion token %d: troupe %v, PyTorch %v", i, lp, w)
				}
			}
			// --bf16: mixed precision, within PyTorch autocast's error on
			// these models (0.03-0.12, testdata/llama/autocast.json)
			out.Reset()
			err = runLogprobs([]string{"--model", dir, "--backend", "cpu", "--bf16", "--prompt-ids", ids(row[:split]),
				"--completion-ids", ids(row[split:]), "--json"}, &out, &errb)
			if err != nil {
				t.Fatalf("logprobs --bf16: %v: %s", err, errb.String())
			}
			var resBF LogprobsOutput
			if err := json.Unmarshal(out.Bytes(), &resBF); err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(resBF.Backend, "bf16") || len(resBF.Logprobs) != len(res.Logprobs) {
				t.Fatalf("--bf16: backend %q, %d log-probs", resBF.Backend, len(resBF.Logprobs))
			}
			for i, lp := range resBF.Logprobs {
				if w := want[1*(T-1)+split-1+i]; math.Abs(float64(lp-w)) > 0.25 {
					t.Fatalf("--bf16: log-prob of completion token %d: troupe %v, PyTorch (float64) %v", i, lp, w)
				}
			}
		})
	}
}

// TestPaddedVocabMatchesPyTorch checks the tools on a model whose
// vocab_size (272) exceeds its tokenizer (267 ids), as real checkpoints'
// do: logprobs scores ids between the two, greedy generate chooses every row
// as transformers' generate(do_sample=False) does, and --tokenizer-ids-only
// keeps to the tokenizer's ids. The references are plain PyTorch
// (algorithms/policy/testdata/llama/gen_padded.py); the tokenizer is
// hftest's, written beside a copy of the reference model.
func TestPaddedVocabMatchesPyTorch(t *testing.T) {
	ref := filepath.Join("..", "..", "algorithms", "policy", "testdata", "llama", "padded", "qwen2")
	b, err := os.ReadFile(filepath.Join(ref, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	type greedy []struct {
		Prompt    []int32 `json:"prompt"`
		NewTokens []int32 `json:"new_tokens"`
	}
	var r struct {
		TokenizerVocab  int       `json:"tokenizer_vocab"`
		Tokens          [][]int32 `json:"tokens"`
		Greedy          greedy    `json:"greedy"`
		GreedyTokenizer greedy    `json:"greedy_tokenizer"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.TokenizerVocab != hftest.Vocab {
		t.Fatalf("reference made for a %d-id tokenizer, hftest's has %d", r.TokenizerVocab, hftest.Vocab)
	}
	dir, err := hftest.Write(t.TempDir(), hftest.Options{ModelType: "qwen2", NoChat: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(ref, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	padded := func(xs []int32) bool {
		for _, x := range xs {
			if int(x) >= hftest.Vocab {
				return true
			}
		}
		return false
	}
	gen := func(prompt []int32, extra ...string) []int32 {
		t.Helper()
		var out, errb bytes.Buffer
		args := append([]string{"--model", dir, "--backend", "cpu", "--prompt-ids", ids(prompt), "--max-new-tokens", "8", "--json"}, extra...)
		if err := runGenerate(args, &out, &errb); err != nil {
			t.Fatalf("generate %v: %v: %s", extra, err, errb.String())
		}
		var res GenerateOutput
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		return res.IDs
	}
	sawPadded, sawDiff := false, false
	for i, g := range r.Greedy {
		if got := gen(g.Prompt); ids(got) != ids(g.NewTokens) {
			t.Errorf("greedy from %v: troupe %v, PyTorch (every row) %v", g.Prompt, got, g.NewTokens)
		}
		m := r.GreedyTokenizer[i]
		got := gen(m.Prompt, "--tokenizer-ids-only")
		if ids(got) != ids(m.NewTokens) || padded(got) {
			t.Errorf("--tokenizer-ids-only from %v: troupe %v, PyTorch (ids below %d) %v", m.Prompt, got, r.TokenizerVocab, m.NewTokens)
		}
		sawPadded = sawPadded || padded(g.NewTokens)
		sawDiff = sawDiff || ids(g.NewTokens) != ids(m.NewTokens)
	}
	if !sawPadded || !sawDiff {
		t.Fatalf("the reference never chooses a padding row (%v) or never differs when masked (%v): the test cannot fail", sawPadded, sawDiff)
	}
	ck, err := hf.Open(filepath.Join(ref, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	B, T := len(r.Tokens), len(r.Tokens[0])
	want := make([]float32, B*(T-1))
	if err := ck.ReadF32("logprobs", []int{B, T - 1}, want); err != nil {
		t.Fatal(err)
	}
	for b, row := range r.Tokens {
		split := T / 2
		if !padded(row[split:]) {
			t.Fatalf("row %d's completion %v holds no padding id", b, row[split:])
		}
		var out, errb bytes.Buffer
		if err := runLogprobs([]string{"--model", dir, "--backend", "cpu", "--prompt-ids", ids(row[:split]),
			"--completion-ids", ids(row[split:]), "--json"}, &out, &errb); err != nil {
			t.Fatalf("logprobs of row %d: %v: %s", b, err, errb.String())
		}
		var res LogprobsOutput
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Logprobs) != T-split {
			t.Fatalf("%d log-probs for %d completion tokens", len(res.Logprobs), T-split)
		}
		for i, lp := range res.Logprobs {
			if w := want[b*(T-1)+split-1+i]; math.Abs(float64(lp-w)) > 1e-4 {
				t.Errorf("row %d, completion token %d (id %d): troupe %v, PyTorch %v", b, i, row[split+i], lp, w)
			}
		}
	}
	// Beyond vocab_size is still refused, with the model's size named.
	var out, errb bytes.Buffer
	err = runLogprobs([]string{"--model", dir, "--backend", "cpu", "--prompt-ids", "1", "--completion-ids", "272"}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "0..271") {
		t.Fatalf("id 272 of a 272-row model: %v", err)
	}
}

// On a model directory with a tokenizer and chat template, text in and out.
func TestGenerateChat(t *testing.T) {
	dir, err := hftest.Write(t.TempDir(), hftest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	args := []string{"--model", dir, "--backend", "cpu", "--chat", "--prompt", "the map", "--max-new-tokens", "5", "--json"}
	if err := runGenerate(args, &out, &errb); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var a GenerateOutput
	json.Unmarshal(out.Bytes(), &a)
	if len(a.IDs) == 0 || len(a.IDs) > 5 || a.Backend != "cpu" || len(a.PromptIDs) < 10 {
		t.Fatalf("generate: %+v", a)
	}
	out.Reset()
	if err := runLogprobs([]string{"--model", dir, "--backend", "cpu", "--prompt", "the map", "--completion", " the", "--json"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var l LogprobsOutput
	json.Unmarshal(out.Bytes(), &l)
	if len(l.CompletionIDs) != 1 || len(l.Logprobs) != 1 || l.Logprobs[0] >= 0 {
		t.Fatalf("logprobs: %+v", l)
	}
	for _, bad := range [][]string{
		{"--model", dir, "--backend", "cpu"},                                    // no prompt
		{"--model", dir, "--backend", "tpu", "--prompt", "x"},                   // bad backend
		{"--model", dir, "--backend", "cpu", "--prompt-ids", "1,99999"},         // id out of range
		{"--model", dir, "--backend", "cpu", "--prompt", "x", "--top-p", "1.5"}, // bad sampling
	} {
		if err := runGenerate(bad, &out, &errb); err == nil {
			t.Errorf("generate %v: no error", bad)
		}
	}
}

// troupe eval --model DIR plays episodes with a pretrained model directory
// acting for every role, its prompts rendered through the chat template.
func TestEvalPretrainedModel(t *testing.T) {
	dir, err := hftest.Write(t.TempDir(), hftest.Options{Context: 512})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	err = runEval(context.Background(), []string{"--env", "planpath", "--size", "5", "--episodes", "2", "--model", dir, "--greedy", "--json"}, &out, &errb)
	if err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var res struct {
		Episodes int               `json:"episodes"`
		Policies map[string]string `json:"policies"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Episodes != 2 {
		t.Fatalf("eval: %s, %v", out.String(), err)
	}
}
