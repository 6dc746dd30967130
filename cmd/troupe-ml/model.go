package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
	"troupe/algorithms/policy/tokenizer"
	"troupe/cmd/internal/cli"
	"troupe/gpu/compute"
	"troupe/gpu/compute/backends"
)

// This file holds the commands for people who downloaded a Hugging Face
// model: `troupe model inspect`, `troupe generate` and `troupe logprobs`.
// They are also how anyone checks troupe against another implementation
// (transformers' generate and log-softmax of the logits) on the same
// directory.

const modelHelp = `Describes a Hugging Face model directory (config.json, safetensors,
tokenizer): architecture, shape, parameters, stored dtype and size, the
memory troupe needs to run and to train it, and the tokenizer.

Examples:
  troupe model inspect models/SmolLM2-135M-Instruct
  troupe model inspect --json models/Qwen2.5-0.5B-Instruct
`

// ModelInfo is what `troupe model inspect --json` prints.
type ModelInfo struct {
	Dir               string   `json:"dir"`
	ModelType         string   `json:"model_type"`
	Architectures     []string `json:"architectures,omitempty"`
	Layers            int      `json:"layers"`
	Hidden            int      `json:"hidden_size"`
	Intermediate      int      `json:"intermediate_size"`
	Heads             int      `json:"attention_heads"`
	KVHeads           int      `json:"key_value_heads"`
	HeadDim           int      `json:"head_dim"`
	Vocab             int      `json:"vocab_size"`
	Context           int      `json:"max_position_embeddings"`
	RopeTheta         float64  `json:"rope_theta"`
	RopeScaling       string   `json:"rope_scaling,omitempty"`
	TiedEmbeddings    bool     `json:"tie_word_embeddings"`
	QKVBias           bool     `json:"qkv_bias"`
	QKNorm            bool     `json:"qk_norm"`
	Params            int64    `json:"parameters"`
	StoredDTypes      []string `json:"stored_dtypes"`
	StoredBytes       int64    `json:"stored_bytes"`
	Files             int      `json:"files"`
	InferenceBytes    int64    `json:"inference_bytes"` // fp32 weights, as troupe computes
	KVBytesPerToken   int64    `json:"kv_cache_bytes_per_token"`
	FullTrainingBytes int64    `json:"full_finetune_bytes"` // weights, gradients and AdamW moments, before activations
	TokenizerVocab    int      `json:"tokenizer_vocab,omitempty"`
	ChatTemplate      bool     `json:"chat_template"`
	EOS               []string `json:"eos_tokens,omitempty"`
	TokenizerError    string   `json:"tokenizer_error,omitempty"`
}

func runModel(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "inspect" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintf(stdout, "Usage: troupe model inspect [--json] DIR\n\n%s", modelHelp)
			return nil
		}
		fmt.Fprintf(stderr, "Usage: troupe model inspect [--json] DIR\n\n%s", modelHelp)
		return cli.ErrUsage
	}
	fs := newFlagSet("model inspect", "[--json] DIR", modelHelp)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	// The directory may come before or after the flags.
	var dirs, flags []string
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
		} else {
			dirs = append(dirs, a)
		}
	}
	if help, err := cli.ParseFlags(fs, flags); help || err != nil {
		return err
	}
	if len(dirs) != 1 {
		fmt.Fprintln(stderr, "troupe model inspect: give one model directory")
		fs.Usage()
		return cli.ErrUsage
	}
	info, err := inspectModel(dirs[0])
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s\t"+f+"\n", append([]any{k}, a...)...) }
	row("directory", "%s", info.Dir)
	row("architecture", "%s %v", info.ModelType, info.Architectures)
	row("shape", "%d layers, hidden %d, MLP %d, %d heads / %d kv heads of %d", info.Layers, info.Hidden, info.Intermediate, info.Heads, info.KVHeads, info.HeadDim)
	row("vocabulary", "%d (tokenizer %d)", info.Vocab, info.TokenizerVocab)
	rope := fmt.Sprintf("theta %g", info.RopeTheta)
	if info.RopeScaling != "" {
		rope += ", scaling " + info.RopeScaling
	}
	row("positions", "%d, RoPE %s", info.Context, rope)
	row("details", "tied embeddings %v, q/k/v bias %v, q/k norm %v", info.TiedEmbeddings, info.QKVBias, info.QKNorm)
	row("parameters", "%s (%d)", human(float64(info.Params), ""), info.Params)
	row("stored", "%s in %d file(s), %s", bytesStr(info.StoredBytes), info.Files, strings.Join(info.StoredDTypes, "+"))
	row("memory to run", "%s fp32 weights + %s KV cache per token", bytesStr(info.InferenceBytes), bytesStr(info.KVBytesPerToken))
	row("memory to train", "%s for a full fine-tune (weights, gradients, AdamW) + activations", bytesStr(info.FullTrainingBytes))
	switch {
	case info.TokenizerError != "":
		row("tokenizer", "unusable: %s", info.TokenizerError)
	default:
		row("tokenizer", "chat template %v, end tokens %s", info.ChatTemplate, strings.Join(info.EOS, " "))
	}
	return tw.Flush()
}

func inspectModel(dir string) (ModelInfo, error) {
	cfg, ck, err := hf.OpenModel(dir)
	if err != nil {
		return ModelInfo{}, err
	}
	defer ck.Close()
	info := ModelInfo{Dir: dir, ModelType: cfg.ModelType, Architectures: cfg.Architectures, Layers: cfg.NumHiddenLayers,
		Hidden: cfg.HiddenSize, Intermediate: cfg.IntermediateSize, Heads: cfg.NumAttentionHeads, KVHeads: cfg.NumKeyValueHeads,
		HeadDim: cfg.HeadDim, Vocab: cfg.VocabSize, Context: cfg.MaxPositionEmbeddings, RopeTheta: cfg.RopeTheta,
		TiedEmbeddings: cfg.TieWordEmbeddings, QKVBias: cfg.QKVBias(), QKNorm: cfg.QKNorm(), Params: cfg.NumParams(),
		Files: len(ck.Files())}
	if rs := cfg.RopeScaling; rs != nil {
		info.RopeScaling = fmt.Sprintf("%s ×%g (original %d)", rs.Type, rs.Factor, rs.OriginalMaxPositionEmbeddings)
	}
	dtypes := map[string]bool{}
	for _, name := range ck.Names() {
		t, _ := ck.Info(name)
		dtypes[string(t.DType)] = true
		n := int64(t.DType.Size())
		for _, d := range t.Shape {
			n *= int64(d)
		}
		info.StoredBytes += n
	}
	for d := range dtypes {
		info.StoredDTypes = append(info.StoredDTypes, d)
	}
	sort.Strings(info.StoredDTypes)
	info.InferenceBytes = 4 * info.Params
	info.KVBytesPerToken = int64(2 * 4 * cfg.NumHiddenLayers * cfg.NumKeyValueHeads * cfg.HeadDim)
	info.FullTrainingBytes = 16 * info.Params
	if tok, err := tokenizer.Load(dir); err != nil {
		info.TokenizerError = err.Error()
	} else {
		info.TokenizerVocab, info.ChatTemplate = tok.Vocab(), tok.HasChatTemplate()
		for _, id := range tok.EOSIDs() {
			info.EOS = append(info.EOS, tok.Decode([]int32{id}, false))
		}
	}
	return info, nil
}

func bytesStr(n int64) string { return human(float64(n), "B") }

// human writes n with a k/M/G suffix (1000s; B uses 1024s).
func human(n float64, unit string) string {
	base, sfx := 1000.0, []string{"", "k", "M", "G", "T"}
	if unit == "B" {
		base, sfx = 1024, []string{" B", " KiB", " MiB", " GiB", " TiB"}
	}
	i := 0
	for n >= base && i < len(sfx)-1 {
		n /= base
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f%s", n, sfx[0])
	}
	return fmt.Sprintf("%.1f%s", n, sfx[i])
}

// lmFlags are the flags generate and logprobs share.
type lmFlags struct {
	model, backend, system string
	prompt, promptIDs      string
	chat, noThink, asJSON  bool
	bf16                   bool
}

func (f *lmFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.model, "model", "", "Hugging Face model directory (config.json, safetensors, tokenizer.json)")
	def := os.Getenv("TROUPE_BACKEND")
	if def == "" {
		def = "auto"
	}
	fs.StringVar(&f.backend, "backend", def, "compute backend: auto (CUDA device 0 when usable, else the CPU), cpu or cuda (default $TROUPE_BACKEND)")
	fs.StringVar(&f.prompt, "prompt", "", "prompt text ('-': read standard input)")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "prompt as comma-separated token ids (instead of --prompt)")
	fs.BoolVar(&f.chat, "chat", false, "render --prompt as a user message through the chat template, with the generation prompt")
	fs.StringVar(&f.system, "system", "", "system message for --chat")
	fs.BoolVar(&f.noThink, "no-think", false, "with --chat: enable_thinking=false (Qwen3)")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")
	fs.BoolVar(&f.bf16, "bf16", false, "matmuls in BF16 on the float32 weights (mixed precision, as torch.autocast(dtype=torch.bfloat16)): faster on CPUs with AVX512_BF16, log-probs to about 1e-2")
}

// loaded is a model with its tokenizer.
type loaded struct {
	m    policy.LM
	tok  *tokenizer.HF
	note string // the backend and why
}

// load opens the model directory on the chosen backend.
func (f *lmFlags) load(stderr io.Writer) (*loaded, error) {
	if f.model == "" {
		return nil, errors.New("give --model DIR")
	}
	// Without tokenizer.json the commands still work on token ids (e.g. the
	// PyTorch reference directories of the tests).
	tok, err := tokenizer.Load(f.model)
	if errors.Is(err, fs.ErrNotExist) {
		tok, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	be, note, err := cliBackend(f.backend)
	if err != nil {
		return nil, err
	}
	m, err := policy.LoadLlama(f.model, be)
	if err != nil {
		return nil, err
	}
	if f.bf16 {
		if err := m.SetComputeDType(hf.BF16); err != nil {
			m.Free()
			return nil, fmt.Errorf("--bf16: %w", err)
		}
		note += ", bf16"
	}
	return &loaded{m: m, tok: tok, note: note}, nil
}

// vocab is the tokenizer's size, or the model's without a tokenizer.
func (l *loaded) vocab() int {
	if l.tok == nil {
		return l.m.VocabSize()
	}
	return l.tok.Vocab()
}

// rows is the model's vocab_size: every id it has an embedding and a logit
// for. Real checkpoints pad it beyond the tokenizer (Qwen2.5: 151,936 rows
// for 151,665 tokens); transformers accepts and scores every row, so token
// ids given on the command line may be any id below it.
func (l *loaded) rows() int { return l.m.VocabSize() }

// decode is the text of ids ("" without a tokenizer).
func (l *loaded) decode(ids []int32, skipSpecial bool) string {
	if l.tok == nil {
		return ""
	}
	return l.tok.Decode(ids, skipSpecial)
}

// needTokenizer reports the missing tokenizer for text input.
func (l *loaded) needTokenizer(dir string) error {
	if l.tok == nil {
		return fmt.Errorf("%s has no tokenizer.json: give token ids instead of text", dir)
	}
	return nil
}

// cliBackend is the backend of a command run on this machine: the CPU, or
// CUDA device 0 (auto: when it is usable); see backends.Select.
func cliBackend(mode string) (compute.Backend, string, error) {
	b, _, err := backends.Select(mode)
	if err != nil {
		return nil, "", fmt.Errorf("--backend: %w", err)
	}
	// The output names the device ("cpu", "cuda:0 (...)"), not why it was
	// chosen.
	return b, b.Name(), nil
}

// promptTokens renders the prompt flags as token ids.
func (f *lmFlags) promptTokens(l *loaded, stdin io.Reader) ([]int32, error) {
	if (f.prompt == "") == (f.promptIDs == "") {
		return nil, errors.New("give one of --prompt or --prompt-ids")
	}
	if f.promptIDs != "" {
		if f.chat {
			return nil, errors.New("--chat applies to --prompt, not --prompt-ids")
		}
		return parseIDs(f.promptIDs, l.rows())
	}
	if err := l.needTokenizer(f.model); err != nil {
		return nil, err
	}
	text := f.prompt
	if text == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read standard input: %w", err)
		}
		text = string(b)
	}
	if !f.chat {
		return l.tok.Encode(text, true), nil
	}
	var msgs []tokenizer.Message
	if f.system != "" {
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: f.system})
	}
	msgs = append(msgs, tokenizer.Message{Role: "user", Content: text})
	var vars map[string]any
	if f.noThink {
		vars = map[string]any{"enable_thinking": false}
	}
	s, err := l.tok.ApplyChatTemplateVars(msgs, true, vars)
	if err != nil {
		return nil, err
	}
	return l.tok.Encode(s, false), nil
}

const generateHelp = `Generates a completion of a prompt with a Hugging Face model directory,
on this machine (CUDA device 0 when usable, else the CPU). Temperature 0 is
greedy decoding over every row of the model's vocabulary (vocab_size, which
real checkpoints pad beyond the tokenizer), comparable token for token with
transformers' generate(do_sample=False); --tokenizer-ids-only restricts
greedy and sampled choices to the ids the tokenizer defines, which
transformers does not do. Generation stops at the tokenizer's end tokens
(tokenizer_config.json's eos_token and generation_config.json's
eos_token_id) or after --max-new-tokens.

Examples:
  troupe generate --model models/SmolLM2-135M-Instruct --chat --prompt 'What is 2+3?'
  troupe generate --model models/Qwen2.5-0.5B --prompt-ids 9707,11 --max-new-tokens 8 --json
`

// GenerateOutput is what `troupe generate --json` prints.
type GenerateOutput struct {
	PromptIDs []int32 `json:"prompt_ids"`
	IDs       []int32 `json:"ids"`  // the new tokens, the stop token included
	Text      string  `json:"text"` // the new tokens decoded, special tokens dropped
	Backend   string  `json:"backend"`
}

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("generate", "--model DIR (--prompt T [--chat] | --prompt-ids 1,2,3) [flags]", generateHelp)
	fs.SetOutput(stderr)
	var f lmFlags
	f.register(fs)
	maxNew := fs.Int("max-new-tokens", 64, "tokens to generate at most")
	temp := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	topK := fs.Int("top-k", 0, "sample among the K most likely tokens (0: all)")
	topP := fs.Float64("top-p", 1, "nucleus sampling: the smallest set of tokens with this much probability")
	seed := fs.Uint64("seed", 0, "sampling seed")
	tokOnly := fs.Bool("tokenizer-ids-only", false, "choose only ids below the tokenizer's size, never a padding row of the model's vocab_size (default: every row, as transformers' generate)")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	if *maxNew < 1 || *temp < 0 || *topK < 0 || *topP <= 0 || *topP > 1 {
		return fmt.Errorf("--max-new-tokens %d, --temperature %v, --top-k %d, --top-p %v: out of range", *maxNew, *temp, *topK, *topP)
	}
	l, err := f.load(stderr)
	if err != nil {
		return err
	}
	defer l.m.Free()
	ids, err := f.promptTokens(l, os.Stdin)
	if err != nil {
		return err
	}
	var stop []int32
	if l.tok != nil {
		stop = l.tok.EOSIDs()
	}
	if f.chat {
		for _, s := range []string{"<|im_end|>", "<|eot_id|>"} {
			if id, ok := l.tok.TokenID(s); ok {
				stop = append(stop, id)
			}
		}
	}
	limit := 0 // every row, as transformers
	if *tokOnly {
		limit = l.vocab()
	}
	out, err := l.m.Generate([][]int32{ids}, policy.GenerateOptions{MaxNewTokens: *maxNew, Temperature: float32(*temp),
		TopK: *topK, TopP: float32(*topP), Seed: *seed, Stop: stop, VocabLimit: limit})
	if err != nil {
		return err
	}
	res := GenerateOutput{PromptIDs: ids, IDs: out[0], Text: l.decode(out[0], true), Backend: l.note}
	if f.asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	_, err = fmt.Fprintln(stdout, res.Text)
	return err
}

const logprobsHelp = `Prints the log-probability of every completion token given the prompt
under a Hugging Face model directory: log_softmax of the logits at the
position before each token, as transformers computes them from
model(ids).logits. Token ids may be any id below the model's vocab_size,
padding rows beyond the tokenizer included.

Examples:
  troupe logprobs --model models/Qwen2.5-0.5B --prompt 'The capital of France is' --completion ' Paris' --json
  troupe logprobs --model models/Qwen2.5-0.5B --prompt-ids 785,6722 --completion-ids 12095 --json
`

// LogprobsOutput is what `troupe logprobs --json` prints.
type LogprobsOutput struct {
	PromptIDs     []int32   `json:"prompt_ids"`
	CompletionIDs []int32   `json:"completion_ids"`
	Logprobs      []float32 `json:"logprobs"` // one per completion token
	Sum           float64   `json:"sum"`
	Backend       string    `json:"backend"`
}

func runLogprobs(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("logprobs", "--model DIR (--prompt T --completion C | --prompt-ids .. --completion-ids ..) [flags]", logprobsHelp)
	fs.SetOutput(stderr)
	var f lmFlags
	f.register(fs)
	comp := fs.String("completion", "", "completion text (encoded without special tokens)")
	compIDs := fs.String("completion-ids", "", "completion as comma-separated token ids")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	if (*comp == "") == (*compIDs == "") {
		fmt.Fprintln(stderr, "troupe logprobs: give one of --completion or --completion-ids")
		fs.Usage()
		return cli.ErrUsage
	}
	l, err := f.load(stderr)
	if err != nil {
		return err
	}
	defer l.m.Free()
	ids, err := f.promptTokens(l, os.Stdin)
	if err != nil {
		return err
	}
	var cids []int32
	if *compIDs != "" {
		if cids, err = parseIDs(*compIDs, l.rows()); err != nil {
			return err
		}
	} else {
		if err := l.needTokenizer(f.model); err != nil {
			return err
		}
		cids = l.tok.Encode(*comp, false)
	}
	if len(ids) == 0 || len(cids) == 0 {
		return errors.New("the prompt and the completion need at least one token each")
	}
	seq := append(append([]int32(nil), ids...), cids...)
	if len(seq) > l.m.ContextLen() {
		return fmt.Errorf("%d tokens exceed the model's context %d", len(seq), l.m.ContextLen())
	}
	lp, err := l.m.LogProbs(policy.Batch{Tokens: [][]int32{seq}})
	if err != nil {
		return err
	}
	res := LogprobsOutput{PromptIDs: ids, CompletionIDs: cids, Logprobs: lp[0][len(ids)-1:], Backend: l.note}
	for _, v := range res.Logprobs {
		res.Sum += float64(v)
	}
	if f.asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	for i, id := range cids {
		fmt.Fprintf(stdout, "%d\t%q\t%.6f\n", id, l.decode([]int32{id}, false), res.Logprobs[i])
	}
	_, err = fmt.Fprintf(stdout, "sum\t\t%.6f\n", res.Sum)
	return err
}
