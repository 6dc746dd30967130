package tokenizer

import (
	"fmt"

	"github.com/ardanlabs/jinja"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"` // "system", "user", "assistant", "tool"
	Content string `json:"content"`
}

// HasChatTemplate reports whether the tokenizer has a chat template.
func (t *Tokenizer) HasChatTemplate() bool { return t.chat != nil }

// ChatTemplate returns the chat template's Jinja source ("" if none).
func (t *Tokenizer) ChatTemplate() string { return t.chatSrc }

// SetChatTemplate replaces the chat template. It is not safe to call while
// the tokenizer is in use.
func (t *Tokenizer) SetChatTemplate(src string) error {
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
func (t *Tokenizer) ApplyChatTemplate(messages []Message, addGenerationPrompt bool) (string, error) {
	return t.ApplyChatTemplateVars(messages, addGenerationPrompt, nil)
}

// ApplyChatTemplateVars is ApplyChatTemplate with extra template variables,
// the keyword arguments of apply_chat_template: enable_thinking (Qwen3),
// date_string (Llama 3.x), tools (a list of JSON-like values), ... A
// variable given here overrides the default of the same name.
func (t *Tokenizer) ApplyChatTemplateVars(messages []Message, addGenerationPrompt bool, vars map[string]any) (string, error) {
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
	data := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": addGenerationPrompt,
		"tools":                 nil,
		"documents":             nil,
	}
	for k, v := range t.specialTokensVars {
		data[k] = v
	}
	for k, v := range vars {
		data[k] = v
	}
	out, err := t.chat.Render(data)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}
