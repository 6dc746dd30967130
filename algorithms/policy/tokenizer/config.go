package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
)

// tokenizerConfigJSON is the part of tokenizer_config.json used here.
type tokenizerConfigJSON struct {
	BOS            json.RawMessage `json:"bos_token"`
	EOS            json.RawMessage `json:"eos_token"`
	PAD            json.RawMessage `json:"pad_token"`
	UNK            json.RawMessage `json:"unk_token"`
	ChatTemplate   json.RawMessage `json:"chat_template"`
	AddBOS         *bool           `json:"add_bos_token"`
	AddEOS         *bool           `json:"add_eos_token"`
	TokenizerClass string          `json:"tokenizer_class"`
}

// specialString reads a special token given as a string, as an AddedToken
// object {"content": ...}, or as null. present is false when the key is
// absent.
func specialString(raw json.RawMessage, key string) (tok string, present bool, err error) {
	if raw == nil {
		return "", false, nil
	}
	if isNull(raw) {
		return "", true, nil
	}
	if err := json.Unmarshal(raw, &tok); err == nil {
		return tok, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", true, fmt.Errorf("%w: tokenizer_config.json: %s is neither a string nor {\"content\": ...}", ErrFormat, key)
	}
	return *obj.Content, true, nil
}

// idsField reads a token id field (bos_token_id, eos_token_id, ...) that is
// an int, a list of ints or null.
func idsField(cfg []byte, file, key string) ([]int32, error) {
	if cfg == nil {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(cfg, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, file, err)
	}
	raw, ok := m[key]
	if !ok || isNull(raw) {
		return nil, nil
	}
	var one int32
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%w: %s: %s is neither an id nor a list of ids", ErrFormat, file, key)
	}
	return many, nil
}

// llamaClasses are the transformers tokenizer classes that rebuild the
// post-processor from add_bos_token (default true) and add_eos_token
// (default false) when they load, whatever tokenizer.json says.
var llamaClasses = []string{"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer", "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"}

func (t *HF) applyConfig(cfg Config) error {
	var tc tokenizerConfigJSON
	if cfg.TokenizerConfig != nil {
		if err := json.Unmarshal(cfg.TokenizerConfig, &tc); err != nil {
			return fmt.Errorf("%w: tokenizer_config.json: %v", ErrFormat, err)
		}
	}
	t.specialTokensVars = map[string]any{}
	type special struct {
		raw      json.RawMessage
		key, idK string
		tok      *string
		id       *int32
	}
	for _, s := range []special{
		{tc.BOS, "bos_token", "bos_token_id", &t.bosTok, &t.bos},
		{tc.EOS, "eos_token", "eos_token_id", &t.eosTok, &t.eos},
		{tc.PAD, "pad_token", "pad_token_id", &t.padTok, &t.pad},
		{tc.UNK, "unk_token", "", &t.unkTok, nil},
	} {
		tok, present, err := specialString(s.raw, s.key)
		if err != nil {
			return err
		}
		if present {
			if tok == "" {
				continue // null: transformers has no such token
			}
			id, ok := t.TokenID(tok)
			if !ok {
				if s.key == "pad_token" || s.key == "unk_token" {
					// transformers would add it as a new token; a
					// tokenizer without it works all the same.
					continue
				}
				return fmt.Errorf("%w: tokenizer_config.json: %s %q is not a token", ErrFormat, s.key, tok)
			}
			*s.tok = tok
			t.specialTokensVars[s.key] = tok
			if s.id != nil {
				*s.id = id
			}
			continue
		}
		// Without tokenizer_config.json's word, the model's configs say it.
		if s.id == nil {
			continue
		}
		for _, c := range []struct {
			file string
			b    []byte
		}{{"generation_config.json", cfg.GenerationConfig}, {"config.json", cfg.ModelConfig}} {
			ids, err := idsField(c.b, c.file, s.idK)
			if err != nil {
				return err
			}
			if len(ids) > 0 {
				if tok, ok := t.Token(ids[0]); ok {
					*s.id, *s.tok = ids[0], tok
					t.specialTokensVars[s.key] = tok
				}
				break
			}
		}
	}
	if t.eos >= 0 {
		t.eosIDs = append(t.eosIDs, t.eos)
	}
	for _, c := range []struct {
		file string
		b    []byte
	}{{"generation_config.json", cfg.GenerationConfig}, {"config.json", cfg.ModelConfig}} {
		ids, err := idsField(c.b, c.file, "eos_token_id")
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, ok := t.Token(id); ok && !slices.Contains(t.eosIDs, id) {
				t.eosIDs = append(t.eosIDs, id)
			}
		}
	}

	if slices.Contains(llamaClasses, tc.TokenizerClass) {
		addBOS := tc.AddBOS == nil || *tc.AddBOS
		addEOS := tc.AddEOS != nil && *tc.AddEOS
		if addBOS && t.bos < 0 || addEOS && t.eos < 0 {
			return fmt.Errorf("%w: tokenizer_config.json: add_bos_token/add_eos_token without the token", ErrFormat)
		}
		t.post = []templateItem{}
		if addBOS {
			t.post = append(t.post, templateItem{ids: []int32{t.bos}})
		}
		t.post = append(t.post, templateItem{})
		if addEOS {
			t.post = append(t.post, templateItem{ids: []int32{t.eos}})
		}
	}

	src := cfg.ChatTemplate
	if src == "" && !isNull(tc.ChatTemplate) {
		var err error
		if src, err = chatTemplateSource(tc.ChatTemplate); err != nil {
			return err
		}
	}
	if src != "" {
		return t.SetChatTemplate(src)
	}
	return nil
}

// chatTemplateSource reads chat_template: a string, or a list of named
// templates of which transformers uses "default".
func chatTemplateSource(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("%w: tokenizer_config.json: chat_template is neither a string nor a list of {name, template}", ErrFormat)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("%w: tokenizer_config.json: chat_template has no template named \"default\"", ErrFormat)
}
