package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// tokenizerDir is a small Qwen2-style tokenizer made by the tokenizer
// package's testdata/gen.py.
var tokenizerDir = filepath.Join("..", "..", "algorithms", "policy", "tokenizer", "testdata", "qwen2")

func TestTokenizeCommand(t *testing.T) {
	run := func(stdin string, args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := runTokenize(args, strings.NewReader(stdin), &out, &errb)
		return out.String(), err
	}
	// Encode, then decode the printed ids back.
	out, err := run("", "--model", tokenizerDir, "--text", "Hello, world! 你好")
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.TrimSpace(out)
	if !strings.Contains(ids, ",") {
		t.Fatalf("ids %q", ids)
	}
	if out, err = run("", "--model", tokenizerDir, "--ids", ids); err != nil || out != "Hello, world! 你好\n" {
		t.Fatalf("decode: %q %v", out, err)
	}
	// Standard input and JSON.
	out, err = run("two words", "--model", tokenizerDir, "--text", "-", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Text   string   `json:"text"`
		IDs    []int32  `json:"ids"`
		Tokens []string `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Text != "two words" || len(res.IDs) == 0 || len(res.IDs) != len(res.Tokens) || strings.Join(res.Tokens, "") != "twoĠwords" {
		t.Fatalf("json %q: %+v %v", out, res, err)
	}
	// The empty string encodes (to no ids with this tokenizer, which adds
	// no BOS), as transformers' tokenizer("") does; it is not a usage error.
	out, err = run("", "--model", tokenizerDir, "--text", "", "--json")
	if err != nil {
		t.Fatalf("--text '': %v", err)
	}
	res.IDs, res.Tokens, res.Text = nil, nil, "x"
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Text != "" || res.IDs == nil || len(res.IDs) != 0 {
		t.Fatalf("--text '' --json: %q: %+v %v", out, res, err)
	}
	if out, err = run("", "--model", tokenizerDir, "--text", ""); err != nil || out != "\n" {
		t.Fatalf("--text '': %q %v", out, err)
	}
	// --chat renders the template first; specials are skipped on request.
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(tokenizerDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "tokenizer_config.json" {
			var cfg map[string]any
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			cfg["chat_template"] = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
			b, _ = json.Marshal(cfg)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err = run("", "--model", dir, "--chat", "--system", "S", "--text", "Hi", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Text != "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" || res.Tokens[0] != "<|im_start|>" {
		t.Fatalf("chat %q: %+v %v", out, res, err)
	}
	var chatIDs []string
	for _, id := range res.IDs {
		chatIDs = append(chatIDs, strconv.Itoa(int(id)))
	}
	if out, err = run("", "--model", dir, "--ids", strings.Join(chatIDs, ","), "--skip-special"); err != nil || out != "system\nS\nuser\nHi\nassistant\n\n" {
		t.Fatalf("skip special: %q %v", out, err)
	}

	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"no model":    {[]string{"--text", "x"}, "usage error"},
		"both":        {[]string{"--model", tokenizerDir, "--text", "x", "--ids", "1"}, "usage error"},
		"neither":     {[]string{"--model", tokenizerDir}, "usage error"},
		"both, empty": {[]string{"--model", tokenizerDir, "--text", "", "--ids", ""}, "usage error"},
		"missing dir": {[]string{"--model", filepath.Join(dir, "nope"), "--text", "x"}, "no such file"},
		"bad id":      {[]string{"--model", tokenizerDir, "--ids", "1,x"}, `"x" is not a token id`},
		"id too big":  {[]string{"--model", tokenizerDir, "--ids", "99999"}, "outside the vocabulary"},
		"no template": {[]string{"--model", tokenizerDir, "--chat", "--text", "x"}, "no chat template"},
		"chat on ids": {[]string{"--model", tokenizerDir, "--chat", "--ids", "1"}, "--chat applies to --text"},
		"extra args":  {[]string{"--model", tokenizerDir, "--text", "x", "y"}, "usage error"},
	} {
		if _, err := run("", c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}
