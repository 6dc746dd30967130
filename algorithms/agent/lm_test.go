package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hftest"
)

// learnsAnswer warm-starts p on one answer and checks that greedy sampling
// then gives it.
func learnsAnswer(t *testing.T, p *Policy, prompt, answer string) {
	t.Helper()
	ctx := context.Background()
	st, err := p.SFT(ctx, SFTRequest{Examples: []Example{{prompt, answer}}, Epochs: 40, BatchSize: 1, LR: 1e-2})
	if err != nil {
		t.Fatal(err)
	}
	if st.LastLoss > st.FirstLoss/4 {
		t.Fatalf("SFT loss %v -> %v: did not learn", st.FirstLoss, st.LastLoss)
	}
	out, err := p.Sample(ctx, SampleRequest{Prompts: []string{prompt}, K: 1, Seed: 1, Temperature: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0][0].Text; got != answer {
		t.Fatalf("after SFT the policy answers %q, want %q", got, answer)
	}
	if lp := out[0][0].LogProbs; len(lp) != len(out[0][0].Tokens) {
		t.Fatalf("%d log-probs for %d tokens", len(lp), len(out[0][0].Tokens))
	}
}

// A from-scratch policy (the Llama family with the character tokenizer,
// grouped-query attention here) trains, samples, saves as a Hugging Face
// directory and is rebuilt from it.
func TestLlamaPolicyFromScratch(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig()
	cfg.KVHeads = 1
	p := newTiny(t, cfg)
	ws, err := p.Weights(ctx, struct{}{})
	if err != nil || ws.Family != "llama" || ws.Context != 64 {
		t.Fatalf("weights %+v, %v: want the llama family with context 64", ws, err)
	}
	learnsAnswer(t, p, "p a01 g22", "R")
	dir := filepath.Join(t.TempDir(), "planner")
	if _, err := p.Save(ctx, SaveRequest{Path: dir}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Fatalf("saved checkpoint is not a Hugging Face directory: %v", err)
	}
	want, _ := p.Weights(ctx, struct{}{})
	cfg.Checkpoint = dir
	q := newTiny(t, cfg)
	if got, _ := q.Weights(ctx, struct{}{}); got.Norm != want.Norm || got.Params != want.Params {
		t.Fatalf("rebuilt from %s: %+v, want %+v", dir, got, want)
	}
	other := newTiny(t, tinyConfig()) // two key/value heads: another shape
	if _, err := other.Load(ctx, dir); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("a model of another shape loaded the checkpoint: %v", err)
	}
}

// A pretrained Hugging Face model directory: the policy uses the model's
// own tokenizer, renders prompts through its chat template, stops at the
// end-of-turn token, and saves a directory that carries the tokenizer.
func TestPretrainedModelDirPolicy(t *testing.T) {
	ctx := context.Background()
	dir, err := hftest.Write(filepath.Join(t.TempDir(), "base"), hftest.Options{ModelType: "qwen2"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy(ctx, Config{Name: "tool", ModelDir: dir, MaxNewTokens: 12, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := p.promptTokens("go north")
	if err != nil {
		t.Fatal(err)
	}
	hc := p.tok.(*hfCodec)
	if got := hc.t.Decode(ids, false); !strings.HasSuffix(got, "<|im_start|>user\ngo north<|im_end|>\n<|im_start|>assistant\n") {
		t.Fatalf("prompt rendered as %q, want the chat template's user turn and generation prompt", got)
	}
	if hc.t.Decode([]int32{hc.end}, false) != hftest.ImEnd {
		t.Fatalf("answers end with token %d, want %s", hc.end, hftest.ImEnd)
	}
	learnsAnswer(t, p, "go north", "the north")
	out := filepath.Join(t.TempDir(), "trained")
	if _, err := p.Save(ctx, SaveRequest{Path: out}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatalf("saved directory lacks %s: %v", f, err)
		}
	}
	q, err := NewPolicy(ctx, Config{Name: "tool", ModelDir: out, MaxNewTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.Sample(ctx, SampleRequest{Prompts: []string{"go north"}, K: 1, Seed: 1, Temperature: 1e-6})
	if err != nil || got[0][0].Text != "the north" {
		t.Fatalf("reloaded policy answers %+v, %v", got, err)
	}
	if _, ok := q.Model().(*policy.Llama); !ok {
		t.Fatalf("model is a %T", q.Model())
	}
	// Without the chat template the prompt is the text itself.
	r, err := NewPolicy(ctx, Config{Name: "tool", ModelDir: dir, NoChat: true, MaxNewTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := r.promptTokens("go north"); r.tok.Decode(ids) != "go north" {
		t.Fatalf("NoChat prompt %q", r.tok.Decode(ids))
	}
}
