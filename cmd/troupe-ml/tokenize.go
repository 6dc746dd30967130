package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"troupe/algorithms/policy/tokenizer"
	"troupe/cmd/internal/cli"
)

const tokenizeHelp = `Encodes text with the tokenizer of a Hugging Face model directory
(tokenizer.json, tokenizer_config.json) and prints the ids, comma-separated,
or decodes ids given with --ids. With --chat the text is one user message
rendered through the model's chat template (with the assistant's generation
prompt) before it is encoded; the template writes any BOS itself.

Examples:
  troupe tokenize --model models/Qwen2.5-0.5B-Instruct --text 'Hello world'
  troupe tokenize --model models/Qwen3-0.6B --chat --system 'Be brief.' --text Hi --json
  troupe tokenize --model models/Qwen3-0.6B --ids 9707,1879
`

func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokenize", "--model DIR (--text T | --ids 1,2,3) [flags]", tokenizeHelp)
	fs.SetOutput(stderr)
	model := fs.String("model", "", "model directory with tokenizer.json")
	text := fs.String("text", "", "text to encode ('-': read standard input)")
	idList := fs.String("ids", "", "comma-separated token ids to decode")
	chat := fs.Bool("chat", false, "render --text as a user message with the chat template first")
	system := fs.String("system", "", "system message for --chat")
	noThink := fs.Bool("no-think", false, "with --chat: enable_thinking=false (Qwen3)")
	noSpecial := fs.Bool("no-special", false, "do not add the post-processor's special tokens (BOS) when encoding")
	skipSpecial := fs.Bool("skip-special", false, "drop special tokens when decoding --ids")
	asJSON := fs.Bool("json", false, `print {"ids": [...], "tokens": [...]} (and "text")`)
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	// --text '' is the empty string to encode (transformers encodes it
	// too: the post-processor's special tokens alone), so whether a flag
	// was given decides, not whether it is empty.
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if *model == "" || given["text"] == given["ids"] {
		fmt.Fprintln(stderr, "troupe tokenize: give --model and one of --text or --ids")
		fs.Usage()
		return cli.ErrUsage
	}
	tok, err := tokenizer.Load(*model)
	if err != nil {
		return err
	}
	if given["ids"] {
		if *chat {
			return fmt.Errorf("--chat applies to --text, not --ids")
		}
		ids, err := parseIDs(*idList, tok.Vocab())
		if err != nil {
			return err
		}
		out := tok.Decode(ids, *skipSpecial)
		if *asJSON {
			return writeTokens(stdout, out, ids, tok)
		}
		_, err = fmt.Fprintln(stdout, out)
		return err
	}
	in := *text
	if in == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return fmt.Errorf("read standard input: %w", err)
		}
		in = string(b)
	}
	var ids []int32
	if *chat {
		var msgs []tokenizer.Message
		if *system != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: *system})
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: in})
		var vars map[string]any
		if *noThink {
			vars = map[string]any{"enable_thinking": false}
		}
		if in, err = tok.ApplyChatTemplateVars(msgs, true, vars); err != nil {
			return err
		}
		ids = tok.Encode(in, false)
	} else {
		ids = tok.Encode(in, !*noSpecial)
	}
	if *asJSON {
		return writeTokens(stdout, in, ids, tok)
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	_, err = fmt.Fprintln(stdout, strings.Join(parts, ","))
	return err
}

func parseIDs(s string, vocab int) ([]int32, error) {
	var ids []int32
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--ids: %q is not a token id", f)
		}
		if n < 0 || n >= int64(vocab) {
			return nil, fmt.Errorf("--ids: %d is outside the vocabulary (0..%d)", n, vocab-1)
		}
		ids = append(ids, int32(n))
	}
	return ids, nil
}

func writeTokens(w io.Writer, text string, ids []int32, tok *tokenizer.HF) error {
	toks := make([]string, len(ids))
	for i, id := range ids {
		toks[i], _ = tok.Token(id)
	}
	if ids == nil {
		ids = []int32{}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(struct {
		Text   string   `json:"text"`
		IDs    []int32  `json:"ids"`
		Tokens []string `json:"tokens"`
	}{text, ids, toks})
}
