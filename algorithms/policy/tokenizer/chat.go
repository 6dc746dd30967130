package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"` // "system", "user", "assistant", "tool"
	Content string `json:"content"`
}

// HasChatTemplate reports whether the tokenizer has a chat template.
func (t *HF) HasChatTemplate() bool { return t.chat != nil }

// ChatTemplate returns the chat template's Jinja source ("" if none).
func (t *HF) ChatTemplate() string { return t.chatSrc }

// SetChatTemplate replaces the chat template. It is not safe to call while
// the tokenizer is in use.
func (t *HF) SetChatTemplate(src string) error {
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return fmt.Errorf("%w: chat template: %v", ErrFormat, err)
	}
	t.chat, t.chatSrc = tmpl, src
	return nil
}

// ApplyChatTemplate renders messages with the chat template, as
// transformers' apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) does. Encode the result with addSpecial false:
// the template writes the BOS itself.
func (t *HF) ApplyChatTemplate(messages []Message, addGenerationPrompt bool) (string, error) {
	return t.ApplyChatTemplateVars(messages, addGenerationPrompt, nil)
}

// ApplyChatTemplateVars is ApplyChatTemplate with extra template variables,
// the keyword arguments of apply_chat_template: enable_thinking (Qwen3),
// date_string (Llama 3.x), tools, ... A variable given here overrides the
// default of the same name. Values are bools, numbers, strings, []any and
// map[string]any, or json.RawMessage: give tool schemas as raw JSON, since
// their keys keep their order only that way (a Go map's keys are sorted,
// while Python's dicts, and so transformers' |tojson, keep insertion order).
func (t *HF) ApplyChatTemplateVars(messages []Message, addGenerationPrompt bool, vars map[string]any) (string, error) {
	if t.chat == nil {
		return "", ErrNoChatTemplate
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	// transformers renders with messages, tools=None, documents=None,
	// add_generation_prompt and the special tokens map (bos_token,
	// eos_token, pad_token, unk_token: the ones that are set); the
	// environment has trim_blocks and lstrip_blocks and the globals
	// raise_exception and strftime_now, which the jinja package provides
	// by default.
	data := map[string]jinja.Value{
		"messages":              jinja.FromGoValue(msgs),
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"tools":                 jinja.None(),
		"documents":             jinja.None(),
	}
	for k, v := range t.specialTokensVars {
		data[k] = jinja.FromGoValue(v)
	}
	for k, v := range vars {
		if raw, ok := v.(json.RawMessage); ok {
			jv, err := jsonValue(raw)
			if err != nil {
				return "", fmt.Errorf("chat template variable %s: %w", k, err)
			}
			data[k] = jv
			continue
		}
		data[k] = jinja.FromGoValue(v)
	}
	out, err := t.chat.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

// jsonValue converts JSON to a template value, keeping the order of object
// keys.
func jsonValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Value{}, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token() // ]
			return jinja.NewList(items), err
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token() // }
			return d, err
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", tok)
	default:
		return jinja.FromGoValue(tok), nil // string, bool, nil, json.Number
	}
}
