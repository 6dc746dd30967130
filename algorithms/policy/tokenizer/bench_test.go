package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// benchText is mixed prose, code, numbers and CJK, about 6 KB.
var benchText = strings.Repeat("The quick brown fox jumps over the lazy dog. It's 2024; we'll tokenize 3.14159 and 1,000,000 things.\n"+
	"def f(x):\n    return [t for t in x.split() if t]  # comment\n你好，世界！这是一个测试。 👍🏽 naïve café\n\n", 25)

func benchEncode(b *testing.B, style string, cold bool) {
	tok := load(b, style)
	n := len(tok.Encode(benchText, false))
	b.SetBytes(int64(len(benchText)))
	b.ResetTimer()
	for b.Loop() {
		if cold {
			tok.model.cacheMu.Lock()
			clear(tok.model.cache)
			tok.model.cacheMu.Unlock()
		}
		tok.Encode(benchText, false)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncode encodes with the word cache warm, as in steady use;
// BenchmarkEncodeCold clears it before each text, the peer that shows
// what the cache buys.
func BenchmarkEncode(b *testing.B) {
	for _, style := range []string{"gpt2", "qwen2", "llama3"} {
		b.Run(style, func(b *testing.B) { benchEncode(b, style, false) })
	}
}

func BenchmarkEncodeCold(b *testing.B) {
	for _, style := range []string{"gpt2", "qwen2", "llama3"} {
		b.Run(style, func(b *testing.B) { benchEncode(b, style, true) })
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := load(b, "llama3")
	ids := tok.Encode(benchText, false)
	b.SetBytes(int64(len(benchText)))
	for b.Loop() {
		tok.Decode(ids, false)
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkNewLarge loads a synthetic tokenizer.json the size of Qwen2's
// (151k tokens and merges, about 7 MB).
func BenchmarkNewLarge(b *testing.B) {
	data := largeTokenizerJSON(150000)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := NewHF(data, Config{}); err != nil {
			b.Fatal(err)
		}
	}
}

func largeTokenizerJSON(merges int) []byte {
	rng := rand.New(rand.NewPCG(5, 6))
	vocab := map[string]int{}
	var toks []string
	for b := range 256 {
		vocab[byteChar[b]] = len(toks)
		toks = append(toks, byteChar[b])
	}
	var ms [][2]string
	for len(ms) < merges {
		a, c := toks[rng.IntN(len(toks))], toks[rng.IntN(len(toks))]
		if len(a)+len(c) > 24 {
			continue
		}
		if _, dup := vocab[a+c]; dup {
			continue
		}
		vocab[a+c] = len(toks)
		toks = append(toks, a+c)
		ms = append(ms, [2]string{a, c})
	}
	f := map[string]any{
		"added_tokens":  []any{map[string]any{"id": len(toks), "content": "<|endoftext|>", "special": true}},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Split", "pattern": map[string]any{"Regex": Qwen2Pattern}, "behavior": "Isolated", "invert": false}, map[string]any{"type": "ByteLevel", "use_regex": false}}},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": ms},
	}
	data, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return data
}
