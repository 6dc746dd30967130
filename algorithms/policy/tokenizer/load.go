package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/text/unicode/norm"
)

// Load reads the tokenizer of a Hugging Face model directory:
// tokenizer.json, and when present tokenizer_config.json (special tokens,
// chat template, add_bos_token), chat_template.jinja (which newer
// transformers write instead of the config's chat_template),
// generation_config.json and config.json (end-of-sequence ids).
func Load(dir string) (*HF, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	cfg := Config{}
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{"tokenizer_config.json", &cfg.TokenizerConfig}, {"generation_config.json", &cfg.GenerationConfig}, {"config.json", &cfg.ModelConfig}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("load tokenizer: %w", err)
		}
		*f.dst = b
	}
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		cfg.ChatTemplate = string(b)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := NewHF(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", dir, err)
	}
	return t, nil
}

// Config holds the optional files beside tokenizer.json, as raw bytes (nil
// when absent).
type Config struct {
	TokenizerConfig  []byte // tokenizer_config.json
	GenerationConfig []byte // generation_config.json
	ModelConfig      []byte // config.json
	ChatTemplate     string // chat_template.jinja; overrides the config's
}

// The JSON shapes of tokenizer.json. Polymorphic parts stay raw until their
// "type" is known.
type fileJSON struct {
	AddedTokens   []addedJSON     `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *modelJSON      `json:"model"`
}

type addedJSON struct {
	ID         *int32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
}

type typed struct {
	Type string `json:"type"`
}

// NewHF builds a tokenizer from the bytes of tokenizer.json and the optional
// files of cfg.
func NewHF(tokenizerJSON []byte, cfg Config) (*HF, error) {
	var f fileJSON
	if err := json.Unmarshal(tokenizerJSON, &f); err != nil {
		// Say which model a file of an unsupported kind has, if it does.
		var probe struct {
			Model *typed `json:"model"`
		}
		if json.Unmarshal(tokenizerJSON, &probe) == nil && probe.Model != nil && probe.Model.Type != "" && probe.Model.Type != "BPE" {
			return nil, fmt.Errorf("%w: tokenizer model %q (only BPE)", ErrUnsupported, probe.Model.Type)
		}
		return nil, fmt.Errorf("%w: tokenizer.json: %v", ErrFormat, err)
	}
	if f.Model == nil {
		return nil, fmt.Errorf("%w: tokenizer.json has no model", ErrFormat)
	}
	m := f.Model
	if m.Type == "" && m.Merges != nil {
		m.Type = "BPE" // files of tokenizers < 0.10 omit it
	}
	if m.Type != "BPE" {
		return nil, fmt.Errorf("%w: tokenizer model %q (only BPE)", ErrUnsupported, m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("%w: BPE dropout %v (it makes encoding random)", ErrUnsupported, *m.Dropout)
	}
	var vocab map[string]int32
	if isNull(m.Vocab) {
		return nil, fmt.Errorf("%w: model.vocab is missing", ErrFormat)
	}
	if err := json.Unmarshal(m.Vocab, &vocab); err != nil {
		return nil, fmt.Errorf("%w: model.vocab: %v", ErrFormat, err)
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if m.ContinuingSubwordPrefix != nil {
		prefix = *m.ContinuingSubwordPrefix
	}
	model, err := newBPE(vocab, merges, prefix)
	if err != nil {
		return nil, err
	}
	if m.EndOfWordSuffix != nil {
		model.suffix = *m.EndOfWordSuffix
	}
	model.fuseUnk, model.byteFallback, model.ignoreMerges = m.FuseUnk, m.ByteFallback, m.IgnoreMerges
	if m.UnkToken != nil && *m.UnkToken != "" {
		id, ok := vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("%w: unk_token %q is not in the vocabulary", ErrFormat, *m.UnkToken)
		}
		model.unk = id
	}

	t := &HF{model: model, added: map[int32]*addedToken{}, addedIDs: map[string]int32{}, bos: -1, eos: -1, pad: -1}
	if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	t.vocabSize = len(model.tokens)
	var toks []*addedToken
	for i, a := range f.AddedTokens {
		if a.ID == nil || *a.ID < 0 || int(*a.ID) >= sparseLimit(len(vocab)+len(f.AddedTokens)) {
			return nil, fmt.Errorf("%w: added_tokens[%d] (%q) has no valid id", ErrFormat, i, a.Content)
		}
		at := &addedToken{id: *a.ID, content: a.Content, normalized: a.Content, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, special: a.Special, isNorm: !a.Special}
		if a.Normalized != nil {
			at.isNorm = *a.Normalized
		}
		if at.isNorm && t.norm != nil {
			at.normalized = t.norm.normalize(a.Content)
		}
		toks = append(toks, at)
		t.added[at.id] = at
		t.addedIDs[at.content] = at.id
		t.vocabSize = max(t.vocabSize, int(at.id)+1)
	}
	t.rawTrie = newTrie(toks, false)
	t.normTrie = newTrie(toks, true)
	if t.post, err = t.parsePost(f.PostProcessor); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if len(t.decoder) == 1 {
		if _, ok := t.decoder[0].(byteLevelDec); ok {
			t.fastBytes = make([]string, t.vocabSize)
			for id := range t.fastBytes {
				if tok, ok := t.Token(int32(id)); ok {
					if a, ok := t.added[int32(id)]; ok {
						tok = a.normalized
					}
					t.fastBytes[id] = string(appendByteLevel(nil, tok))
				}
			}
		}
	}
	if err := t.applyConfig(cfg); err != nil {
		return nil, err
	}
	return t, nil
}

func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var pairs [][2]string
	if t := bytes.TrimLeft(bytes.TrimSpace(raw)[1:], " \t\r\n"); len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("%w: model.merges: %v", ErrFormat, err)
		}
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("%w: model.merges is neither [\"a b\", ...] nor [[\"a\", \"b\"], ...]", ErrFormat)
	}
	for i, l := range lines {
		if bytes.HasPrefix([]byte(l), []byte("#version")) {
			continue
		}
		a, b, ok := cutSpace(l)
		if !ok {
			return nil, fmt.Errorf("%w: merges[%d] = %q is not two tokens separated by one space", ErrFormat, i, l)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	return pairs, nil
}

func cutSpace(l string) (string, string, bool) {
	i := bytes.IndexByte([]byte(l), ' ')
	if i < 0 || bytes.IndexByte([]byte(l[i+1:]), ' ') >= 0 {
		return "", "", false
	}
	return l[:i], l[i+1:], true
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var ty typed
	if err := json.Unmarshal(raw, &ty); err != nil {
		return nil, fmt.Errorf("%w: normalizer: %v", ErrFormat, err)
	}
	switch ty.Type {
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNorm{}, nil
	case "Prepend":
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%w: Prepend normalizer: %v", ErrFormat, err)
		}
		return prependNorm{p.Prepend}, nil
	case "Replace":
		old, content, err := parseReplace(raw)
		if err != nil {
			return nil, fmt.Errorf("Replace normalizer: %w", err)
		}
		return replaceNorm{old, content}, nil
	case "Strip":
		var p struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%w: Strip normalizer: %v", ErrFormat, err)
		}
		return stripNorm{p.Left, p.Right}, nil
	case "Sequence":
		var p struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%w: Sequence normalizer: %v", ErrFormat, err)
		}
		var seq seqNorm
		for _, r := range p.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, ty.Type)
}

// parseReplace reads a Replace normalizer or decoder; only literal
// patterns are supported.
func parseReplace(raw json.RawMessage) (string, string, error) {
	var p struct {
		Pattern struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if p.Pattern.String == nil {
		if p.Pattern.Regex != nil {
			return "", "", fmt.Errorf("%w: regex pattern %q", ErrUnsupported, *p.Pattern.Regex)
		}
		return "", "", fmt.Errorf("%w: no pattern", ErrFormat)
	}
	return *p.Pattern.String, p.Content, nil
}

func (t *HF) parsePreTokenizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var ty typed
	if err := json.Unmarshal(raw, &ty); err != nil {
		return fmt.Errorf("%w: pre_tokenizer: %v", ErrFormat, err)
	}
	if t.byteLevel {
		return fmt.Errorf("%w: pre_tokenizer %q after ByteLevel", ErrUnsupported, ty.Type)
	}
	switch ty.Type {
	case "Sequence":
		var p struct {
			Pretokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%w: Sequence pre_tokenizer: %v", ErrFormat, err)
		}
		for _, r := range p.Pretokenizers {
			if err := t.parsePreTokenizer(r); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		p := struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%w: ByteLevel pre_tokenizer: %v", ErrFormat, err)
		}
		useRegex := p.UseRegex == nil || *p.UseRegex
		t.pre = append(t.pre, byteLevelPre{addPrefixSpace: p.AddPrefixSpace, useRegex: useRegex})
		t.byteLevel = true
		return nil
	case "Split":
		var p struct {
			Pattern struct {
				String *string `json:"String"`
				Regex  *string `json:"Regex"`
			} `json:"pattern"`
			Behavior string `json:"behavior"`
			Invert   bool   `json:"invert"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%w: Split pre_tokenizer: %v", ErrFormat, err)
		}
		b, ok := behaviors[p.Behavior]
		if !ok {
			return fmt.Errorf("%w: Split pre_tokenizer: behavior %q", ErrFormat, p.Behavior)
		}
		var m matcher
		switch {
		case p.Pattern.String != nil:
			m = literalMatcher(*p.Pattern.String)
		case p.Pattern.Regex != nil:
			var err error
			if m, err = compilePattern(*p.Pattern.Regex); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: Split pre_tokenizer has no pattern", ErrFormat)
		}
		t.pre = append(t.pre, splitPre{m: m, behavior: b, invert: p.Invert})
		return nil
	case "Metaspace":
		p := struct {
			Replacement    string `json:"replacement"`
			PrependScheme  string `json:"prepend_scheme"`
			AddPrefixSpace *bool  `json:"add_prefix_space"`
			Split          *bool  `json:"split"`
		}{}
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("%w: Metaspace pre_tokenizer: %v", ErrFormat, err)
		}
		mp, err := metaspace(p.Replacement, p.PrependScheme, p.AddPrefixSpace)
		if err != nil {
			return err
		}
		mp.splitOn = p.Split == nil || *p.Split
		t.pre = append(t.pre, mp)
		return nil
	}
	return fmt.Errorf("%w: pre_tokenizer %q", ErrUnsupported, ty.Type)
}

func metaspace(replacement, scheme string, addPrefixSpace *bool) (metaspacePre, error) {
	if replacement == "" {
		return metaspacePre{}, fmt.Errorf("%w: Metaspace without a replacement", ErrFormat)
	}
	if scheme == "" {
		scheme = "always"
	}
	if addPrefixSpace != nil && !*addPrefixSpace {
		scheme = "never"
	}
	switch scheme {
	case "always", "first", "never":
	default:
		return metaspacePre{}, fmt.Errorf("%w: Metaspace prepend_scheme %q", ErrFormat, scheme)
	}
	return metaspacePre{replacement: replacement, scheme: scheme}, nil
}

func parseDecoder(raw json.RawMessage) ([]decodeStep, error) {
	if isNull(raw) {
		return nil, nil
	}
	var ty typed
	if err := json.Unmarshal(raw, &ty); err != nil {
		return nil, fmt.Errorf("%w: decoder: %v", ErrFormat, err)
	}
	switch ty.Type {
	case "ByteLevel":
		return []decodeStep{byteLevelDec{}}, nil
	case "ByteFallback":
		return []decodeStep{byteFallbackDec{}}, nil
	case "Fuse":
		return []decodeStep{fuseDec{}}, nil
	case "Replace":
		old, content, err := parseReplace(raw)
		if err != nil {
			return nil, fmt.Errorf("Replace decoder: %w", err)
		}
		return []decodeStep{replaceDec{old, content}}, nil
	case "Strip":
		var p struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%w: Strip decoder: %v", ErrFormat, err)
		}
		return []decodeStep{stripDec{p.Content, p.Start, p.Stop}}, nil
	case "Metaspace":
		p := struct {
			Replacement    string `json:"replacement"`
			PrependScheme  string `json:"prepend_scheme"`
			AddPrefixSpace *bool  `json:"add_prefix_space"`
		}{}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%w: Metaspace decoder: %v", ErrFormat, err)
		}
		mp, err := metaspace(p.Replacement, p.PrependScheme, p.AddPrefixSpace)
		if err != nil {
			return nil, err
		}
		return []decodeStep{metaspaceDec{mp.replacement, mp.scheme}}, nil
	case "Sequence":
		var p struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%w: Sequence decoder: %v", ErrFormat, err)
		}
		steps := []decodeStep{}
		for _, r := range p.Decoders {
			s, err := parseDecoder(r)
			if err != nil {
				return nil, err
			}
			steps = append(steps, s...)
		}
		return steps, nil
	}
	return nil, fmt.Errorf("%w: decoder %q", ErrUnsupported, ty.Type)
}

// parsePost reads the post-processor's template for single sequences. Only
// the ids matter here: ByteLevel post-processing touches offsets alone.
func (t *HF) parsePost(raw json.RawMessage) ([]templateItem, error) {
	if isNull(raw) {
		return nil, nil
	}
	var ty typed
	if err := json.Unmarshal(raw, &ty); err != nil {
		return nil, fmt.Errorf("%w: post_processor: %v", ErrFormat, err)
	}
	switch ty.Type {
	case "ByteLevel":
		return nil, nil
	case "Sequence":
		var p struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%w: Sequence post_processor: %v", ErrFormat, err)
		}
		var out []templateItem
		for _, r := range p.Processors {
			items, err := t.parsePost(r)
			if err != nil {
				return nil, err
			}
			if items != nil {
				if out != nil {
					return nil, fmt.Errorf("%w: two TemplateProcessing post_processors in a Sequence", ErrUnsupported)
				}
				out = items
			}
		}
		return out, nil
	case "TemplateProcessing":
		var p struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("%w: TemplateProcessing: %v", ErrFormat, err)
		}
		out := []templateItem{}
		seq := false
		for i, it := range p.Single {
			switch {
			case it.SpecialToken != nil:
				st, ok := p.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("%w: TemplateProcessing: special token %q has no ids", ErrFormat, it.SpecialToken.ID)
				}
				if len(st.IDs) == 0 {
					continue
				}
				out = append(out, templateItem{ids: slices.Clone(st.IDs)})
			case it.Sequence != nil:
				if it.Sequence.ID != "A" {
					return nil, fmt.Errorf("%w: TemplateProcessing: single template uses sequence %q", ErrFormat, it.Sequence.ID)
				}
				seq = true
				out = append(out, templateItem{})
			default:
				return nil, fmt.Errorf("%w: TemplateProcessing: single[%d] is neither SpecialToken nor Sequence", ErrFormat, i)
			}
		}
		if !seq {
			return nil, fmt.Errorf("%w: TemplateProcessing: single template lacks the sequence $A", ErrFormat)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: post_processor %q", ErrUnsupported, ty.Type)
}
