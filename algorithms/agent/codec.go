package agent

import (
	"fmt"

	"troupe/algorithms/policy/tokenizer"
)

// codec turns the environments' text into a model's token ids and back: a
// prompt the model answers, an answer it is trained to give, and the tokens
// that end an answer. A from-scratch model uses the character tokenizer
// (BOS text SEP … EOS); a pretrained Hugging Face model its own tokenizer,
// with prompts rendered through its chat template when it has one, as the
// model was trained to see them.
type codec interface {
	// Prompt returns the ids of a prompt, keeping at most room ids (a
	// too-long prompt is cut from the front or refused).
	Prompt(text string, room int) ([]int32, error)
	// Answer returns the ids of an answer including the end-of-answer token.
	Answer(text string) []int32
	// Decode turns generated ids (without the stop token) into text.
	Decode(ids []int32) string
	// Stop lists the ids that end an answer.
	Stop() []int32
	// Vocab is the number of ids the tokenizer uses (sampling never
	// produces others: a model's embedding table may be padded).
	Vocab() int
}

// charCodec is the character tokenizer of the from-scratch policies.
type charCodec struct{ t *tokenizer.Char }

// Prompt is BOS + text + SEP, keeping the tail of an over-long text so that
// the completion still fits the context.
func (c charCodec) Prompt(text string, room int) ([]int32, error) {
	ids := c.t.Encode(text, false)
	room -= 2
	if room < 1 {
		room = 1
	}
	if len(ids) > room {
		ids = ids[len(ids)-room:]
	}
	out := make([]int32, 0, len(ids)+2)
	out = append(out, tokenizer.CharBOS)
	out = append(out, ids...)
	return append(out, tokenizer.CharSEP), nil
}

func (c charCodec) Answer(text string) []int32 {
	return append(c.t.Encode(text, false), tokenizer.CharEOS)
}
func (c charCodec) Decode(ids []int32) string { return c.t.Decode(ids, true) }
func (c charCodec) Stop() []int32             { return []int32{tokenizer.CharEOS} }
func (c charCodec) Vocab() int                { return c.t.Vocab() }

// hfCodec is a Hugging Face tokenizer. With chat set, a prompt is the
// user turn of the chat template followed by the assistant's generation
// prompt, and an answer ends with the template's end-of-turn token.
type hfCodec struct {
	t      *tokenizer.HF
	chat   bool
	system string // system message, "" for none
	end    int32  // end of an answer
	stop   []int32
}

// endOfTurn names the tokens chat templates close a turn with, by family.
var endOfTurn = []string{"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "</s>"}

func newHFCodec(t *tokenizer.HF, chat bool, system string) (*hfCodec, error) {
	c := &hfCodec{t: t, chat: chat && t.HasChatTemplate(), system: system, end: -1}
	if c.chat {
		for _, s := range endOfTurn {
			if id, ok := t.TokenID(s); ok {
				c.end = id
				break
			}
		}
	}
	if c.end < 0 {
		if id, ok := t.EOS(); ok {
			c.end = id
		}
	}
	if c.end < 0 {
		return nil, fmt.Errorf("%w: the tokenizer names no end-of-sequence token (tokenizer_config.json eos_token) and has no chat end-of-turn token", ErrConfig)
	}
	c.stop = append(c.stop, c.end)
	for _, id := range t.EOSIDs() {
		if id != c.end {
			c.stop = append(c.stop, id)
		}
	}
	return c, nil
}

// Prompt renders text as the chat template's user turn (or plain text with
// the tokenizer's special tokens). A pretrained model's prompt is never cut:
// one too long for the context is an error.
func (c *hfCodec) Prompt(text string, room int) ([]int32, error) {
	var ids []int32
	if c.chat {
		var msgs []tokenizer.Message
		if c.system != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: c.system})
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: text})
		s, err := c.t.ApplyChatTemplate(msgs, true)
		if err != nil {
			return nil, fmt.Errorf("%w: chat template: %w", ErrInput, err)
		}
		// The template writes the BOS token itself where the model wants one.
		ids = c.t.Encode(s, false)
	} else {
		ids = c.t.Encode(text, true)
	}
	if len(ids) > room {
		return nil, fmt.Errorf("%w: prompt of %d tokens leaves no room in the context (%d available)", ErrInput, len(ids), room)
	}
	return ids, nil
}

func (c *hfCodec) Answer(text string) []int32 { return append(c.t.Encode(text, false), c.end) }
func (c *hfCodec) Decode(ids []int32) string  { return c.t.Decode(ids, true) }
func (c *hfCodec) Stop() []int32              { return c.stop }
func (c *hfCodec) Vocab() int                 { return c.t.Vocab() }
