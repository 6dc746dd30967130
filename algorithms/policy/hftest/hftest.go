// Package hftest makes small Hugging Face model directories for tests and
// examples that must not download anything: random weights of the Llama
// family saved in the HF layout, a byte-level BPE tokenizer.json with
// ChatML's special tokens, and a tokenizer_config.json with a ChatML chat
// template, laid out as a downloaded Qwen2.5-Instruct directory is.
package hftest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute/cpu"
)

// Special tokens of the tokenizer, after the 256 byte tokens.
const (
	EndOfText = "<|endoftext|>"
	ImStart   = "<|im_start|>"
	ImEnd     = "<|im_end|>"
	// Vocab is the tokenizer's size: 256 bytes, the 8 merges and 3 specials.
	Vocab = 256 + numMerges + 3
)

const numMerges = 8

// merges are a few byte-level merges ("Ġ" is the space) so the tokenizer
// exercises BPE, not only bytes.
var merges = [numMerges][2]string{{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}, {"Ġ", "a"}, {"e", "r"}, {"o", "n"}, {"Ġ", "s"}}

// ChatTemplate is Qwen2.5's ChatML template without the tool branches.
const ChatTemplate = `{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}{%- for message in messages %}{%- if message['role'] != 'system' %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`

// Options shape the model.
type Options struct {
	ModelType string // hf.Llama (default), hf.Qwen2 or hf.Qwen3
	Layers    int    // default 2
	Hidden    int    // default 32
	Heads     int    // default 4
	KVHeads   int    // default 2
	Context   int    // max_position_embeddings, default 256
	Seed      uint64
	NoChat    bool // leave the chat template out
}

// Config returns the HF config of opt's model, vocabulary padded to a
// multiple of 8 as real checkpoints pad theirs.
func Config(opt Options) (hf.Config, error) {
	if opt.ModelType == "" {
		opt.ModelType = hf.Llama
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&opt.Layers, 2)
	def(&opt.Hidden, 32)
	def(&opt.Heads, 4)
	def(&opt.KVHeads, 2)
	def(&opt.Context, 256)
	c, err := hf.NewConfig(opt.ModelType)
	if err != nil {
		return c, err
	}
	c.VocabSize = (Vocab + 7) / 8 * 8
	c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = opt.Hidden, 2*opt.Hidden, opt.Layers
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = opt.Heads, opt.KVHeads, opt.Hidden/opt.Heads
	c.MaxPositionEmbeddings, c.RopeTheta, c.RMSNormEps, c.TieWordEmbeddings = opt.Context, 10000, 1e-6, true
	c.BOSTokenID, c.EOSTokenIDs, c.PadTokenID = -1, []int{256 + len(merges) + 2}, 256+len(merges)
	return c, c.Validate()
}

// Write creates dir as a model directory of opt's model and returns dir.
func Write(dir string, opt Options) (string, error) {
	cfg, err := Config(opt)
	if err != nil {
		return "", err
	}
	m, err := policy.NewLlama(cpu.New(), cfg, opt.Seed+1)
	if err != nil {
		return "", err
	}
	defer m.Free()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := m.SaveCheckpoint(dir, nil); err != nil {
		return "", err
	}
	tj, err := tokenizerJSON()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644); err != nil {
		return "", err
	}
	tc := map[string]any{"eos_token": ImEnd, "pad_token": EndOfText, "bos_token": nil, "model_max_length": opt.Context}
	if !opt.NoChat {
		tc["chat_template"] = ChatTemplate
	}
	b, err := json.MarshalIndent(tc, "", "  ")
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), b, 0o644)
}

// byteToUnicode is GPT-2's map of bytes to printable characters, which
// byte-level BPE vocabularies are written in.
func byteToUnicode() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

func tokenizerJSON() ([]byte, error) {
	vocab := map[string]int{}
	bu := byteToUnicode()
	for b := 0; b < 256; b++ {
		vocab[string(bu[b])] = b
	}
	var ms []string
	for i, m := range merges {
		vocab[m[0]+m[1]] = 256 + i
		ms = append(ms, m[0]+" "+m[1])
	}
	if len(vocab) != 256+len(merges) {
		return nil, fmt.Errorf("hftest: merges collide: %d vocab entries", len(vocab))
	}
	var added []map[string]any
	for i, s := range []string{EndOfText, ImStart, ImEnd} {
		added = append(added, map[string]any{"id": 256 + len(merges) + i, "content": s, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	doc := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   added,
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": ms},
	}
	return json.MarshalIndent(doc, "", " ")
}
