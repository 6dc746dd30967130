package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chatTok returns the qwen2 test tokenizer with the chat template of
// testdata/chat/<name>.jinja and the given special tokens as variables.
func chatTok(t *testing.T, name string, specials map[string]string) *HF {
	t.Helper()
	tok, err := Load(filepath.Join("testdata", "qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "chat", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.SetChatTemplate(string(src)); err != nil {
		t.Fatal(err)
	}
	tok.specialTokensVars = map[string]any{}
	for k, v := range specials {
		tok.specialTokensVars[k] = v
	}
	return tok
}

type chatCase struct {
	name      string
	msgs      []Message
	genPrompt bool
	vars      map[string]any
	want      string
}

func runChat(t *testing.T, tok *HF, cases []chatCase) {
	t.Helper()
	for _, c := range cases {
		got, err := tok.ApplyChatTemplateVars(c.msgs, c.genPrompt, c.vars)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// The expected strings below are derived by hand from the templates, as
// transformers renders them (trim_blocks, lstrip_blocks, tools=None).

func TestChatQwen25(t *testing.T) {
	tok := chatTok(t, "qwen2.5", map[string]string{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
	const sys = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
	runChat(t, tok, []chatCase{
		{"default system", []Message{{"user", "Hello"}}, true, nil,
			sys + "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"},
		{"own system, multi-turn", []Message{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}}, false, nil,
			"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"},
		{"tool results", []Message{{"user", "2+2?"}, {"tool", "4"}, {"tool", "four"}}, true, nil,
			sys + "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response>\n<tool_response>\nfour\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
		{"tools, keys in their order", []Message{{"user", "Weather in Paris?"}}, true,
			map[string]any{"tools": json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & here",
				"parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}}, "required": ["city"]}}}]`)},
			"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
				"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
				`{"type": "function", "function": {"name": "get_weather", "description": "Weather <now> & here", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 7}}, "required": ["city"]}}}` +
				"\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n" +
				`{"name": <function-name>, "arguments": <args-json-object>}` + "\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"},
		{"whitespace kept", []Message{{"user", "  spaced \n"}}, false, nil,
			sys + "<|im_start|>user\n  spaced \n<|im_end|>\n"},
	})
}

func TestChatQwen3(t *testing.T) {
	tok := chatTok(t, "qwen3", map[string]string{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"})
	runChat(t, tok, []chatCase{
		{"no system", []Message{{"user", "Hi"}}, true, nil,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"thinking off", []Message{{"user", "Hi"}}, true, map[string]any{"enable_thinking": false},
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
		{"thinking on", []Message{{"user", "Hi"}}, true, map[string]any{"enable_thinking": true},
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"last answer gets an empty think block", []Message{{"user", "Hi"}, {"assistant", "Hello"}}, false, nil,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|im_end|>\n"},
		{"last answer keeps its reasoning", []Message{{"user", "Q"}, {"assistant", "<think>\nplan\n</think>\n\nA"}}, false, nil,
			"<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nplan\n</think>\n\nA<|im_end|>\n"},
		{"earlier reasoning dropped", []Message{{"system", "S"}, {"user", "Q1"}, {"assistant", "<think>\nreasoning\n</think>\n\nA1"}, {"user", "Q2"}}, true, nil,
			"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n"},
		{"tool response is not a query", []Message{{"user", "Q"}, {"assistant", "<think>\nt\n</think>\n\ncall"}, {"tool", "r"}, {"assistant", "<think>\nu\n</think>\n\ndone"}}, false, nil,
			"<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nt\n</think>\n\ncall<|im_end|>\n<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\nu\n</think>\n\ndone<|im_end|>\n"},
	})
}

func TestChatLlama31(t *testing.T) {
	tok := chatTok(t, "llama3.1", map[string]string{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
	const head = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
	runChat(t, tok, []chatCase{
		{"system and user", []Message{{"system", "You are helpful."}, {"user", "Hi"}}, true, nil,
			head + "You are helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"no system, content trimmed", []Message{{"user", " Hi there \n"}, {"assistant", "\nHello. "}}, false, nil,
			head + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"},
		{"date given", []Message{{"user", "x"}}, false, map[string]any{"date_string": "01 Jan 2030"},
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 01 Jan 2030\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"},
		// A string is iterable in Jinja, so a tool result is written as JSON.
		{"tool result", []Message{{"user", "q"}, {"tool", "42"}}, false, nil,
			head + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n\"42\"<|eot_id|>"},
	})
}

func TestChatLlama32(t *testing.T) {
	tok := chatTok(t, "llama3.2", map[string]string{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
	runChat(t, tok, []chatCase{
		{"system and user", []Message{{"system", "Be nice."}, {"user", "Hi"}}, true, map[string]any{"date_string": "25 Nov 2026"},
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 25 Nov 2026\n\nBe nice.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
	})
	// Without date_string the template asks strftime_now for today's date,
	// as transformers does.
	got, err := tok.ApplyChatTemplate([]Message{{"user", "Hi"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "Today Date: ") || strings.Contains(got, "Today Date: 26 Jul 2024") {
		t.Errorf("strftime_now not used: %q", got)
	}
}

func TestChatEncode(t *testing.T) {
	tok := chatTok(t, "qwen2.5", nil)
	s, err := tok.ApplyChatTemplate([]Message{{"user", "Hello"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(s, false)
	start, _ := tok.TokenID("<|im_start|>")
	end, _ := tok.TokenID("<|im_end|>")
	if n := countID(ids, start); n != 3 {
		t.Errorf("%d <|im_start|> in %v", n, ids)
	}
	if n := countID(ids, end); n != 2 {
		t.Errorf("%d <|im_end|> in %v", n, ids)
	}
	if got := tok.Decode(ids, false); got != s {
		t.Errorf("round trip %q != %q", got, s)
	}
	if got := tok.Decode(ids, true); strings.Contains(got, "<|im_") {
		t.Errorf("specials kept: %q", got)
	}
}

func countID(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

func TestChatTemplateConfig(t *testing.T) {
	tj, err := os.ReadFile(filepath.Join("testdata", "qwen2", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	// A list of named templates: "default" is used.
	cfg := Config{TokenizerConfig: []byte(`{"eos_token": "<|im_end|>", "chat_template": [
		{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ eos_token }}{{ messages[0].content }}"}]}`)}
	tok, err := NewHF(tj, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tok.ApplyChatTemplate([]Message{{"user", "x"}}, false); err != nil || got != "<|im_end|>x" {
		t.Errorf("got %q, %v", got, err)
	}
	// chat_template.jinja overrides the config.
	cfg.ChatTemplate = "J{{ add_generation_prompt }}"
	if tok, err = NewHF(tj, cfg); err != nil {
		t.Fatal(err)
	}
	if got, _ := tok.ApplyChatTemplate(nil, true); got != "JTrue" {
		t.Errorf("got %q", got)
	}
	// raise_exception surfaces as an error.
	if err := tok.SetChatTemplate(`{{ raise_exception("no system role") }}`); err != nil {
		t.Fatal(err)
	}
	if _, err := tok.ApplyChatTemplate(nil, false); err == nil || !strings.Contains(err.Error(), "no system role") {
		t.Errorf("raise_exception: %v", err)
	}
	if err := tok.SetChatTemplate(`{% if %}`); !errors.Is(err, ErrFormat) {
		t.Errorf("bad template: %v", err)
	}
	if _, err := tok.ApplyChatTemplateVars(nil, false, map[string]any{"tools": json.RawMessage(`[1,`)}); err == nil {
		t.Error("bad JSON variable accepted")
	}
	if tok, err = NewHF(tj, Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tok.ApplyChatTemplate(nil, false); !errors.Is(err, ErrNoChatTemplate) || tok.HasChatTemplate() {
		t.Errorf("no template: %v", err)
	}
	for _, bad := range []string{`{"chat_template": 5}`, `{"chat_template": [{"name": "x", "template": "y"}]}`, `{"eos_token": "<nope>"}`, `{"bos_token": 7}`} {
		if _, err := NewHF(tj, Config{TokenizerConfig: []byte(bad)}); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
