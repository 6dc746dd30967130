package hftest

import (
	"testing"

	"troupe/algorithms/policy/tokenizer"
)

func TestWriteOpensAndTokenizes(t *testing.T) {
	dir, err := Write(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Vocab() != Vocab {
		t.Fatalf("vocab %d, want %d", tok.Vocab(), Vocab)
	}
	s, err := tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: "the map"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nthe map<|im_end|>\n<|im_start|>assistant\n"
	if s != want {
		t.Fatalf("chat template rendered %q, want %q", s, want)
	}
	ids := tok.Encode(s, false)
	if got := tok.Decode(ids, false); got != s {
		t.Fatalf("round trip %q", got)
	}
	if id, ok := tok.EOS(); !ok || tok.Decode([]int32{id}, false) != ImEnd {
		t.Fatalf("eos %d %v", id, ok)
	}
	if th, ok := tok.TokenID("Ġthe"); !ok || th != 258 {
		t.Fatalf("merged token Ġthe = %d %v", th, ok)
	}
}
