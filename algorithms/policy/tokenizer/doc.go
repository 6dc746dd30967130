// Package tokenizer holds every tokenizer troupe's models use, behind one
// interface, Tokenizer: HF reads Hugging Face tokenizers (tokenizer.json
// and tokenizer_config.json) and renders their chat templates, so that
// troupe encodes prompts for Llama 3, Qwen2 and Qwen3 checkpoints exactly
// as transformers does, without Python; Char (over an alphabet) and Byte
// are the small tokenizers of from-scratch models, whose ids checkpoints
// depend on.
//
// # What is implemented
//
// The BPE model of the tokenizers library, with the pipeline around it:
//
//   - added tokens, split off before everything else, leftmost-longest, with
//     their single_word, lstrip, rstrip and normalized flags as
//     tokenizers' AddedVocabulary has them;
//   - normalizers NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace (literal
//     patterns), Strip and Sequence;
//   - pre-tokenizers ByteLevel (add_prefix_space, use_regex), Split (regex
//     or literal pattern; behaviors Isolated, Removed, MergedWithPrevious,
//     MergedWithNext, Contiguous; invert), Metaspace and Sequence;
//   - the model: ranked merges in either spelling ("a b" or ["a", "b"]),
//     ignore_merges (Llama 3), byte_fallback with "<0xXX>" tokens, unk_token
//     with fuse_unk, continuing_subword_prefix and end_of_word_suffix;
//   - post-processors ByteLevel, TemplateProcessing (the BOS of Llama) and
//     Sequence; transformers' Llama tokenizer classes rebuild the template
//     from add_bos_token and add_eos_token, and so does Load;
//   - decoders ByteLevel, ByteFallback, Fuse, Replace, Strip, Metaspace and
//     Sequence.
//
// That covers the byte-level BPE of GPT-2, Qwen2/Qwen2.5/Qwen3 and Llama 3,
// and the SentencePiece-style BPE with byte fallback of Llama 2 and Mistral
// (both the older Prepend/Replace normalizer form and the newer Metaspace
// form). Anything else (Unigram and WordPiece models, BERT normalizers and
// post-processors, regex Replace, BPE dropout) fails to load with an error
// that wraps ErrUnsupported and names the part.
//
// # The pre-tokenizer regexes
//
// The split patterns of these models use lookahead (\s+(?!\S)) and Unicode
// classes with Oniguruma's meaning of \s, which Go's RE2-based regexp does
// not have. The GPT-2, Qwen2 and Llama 3 patterns (and tiktoken's cl100k
// spelling of the last, which means the same) are recognised by their exact
// strings and matched by hand-written functions that follow the
// backtracking engine alternative by alternative (pattern.go). Another
// pattern is accepted only if RE2 means the same by it (no \s, \w, \d, \b or
// lookaround); otherwise Load fails with ErrUnsupported.
//
// # Checked against
//
// testdata/gen.py is a plain Python byte-level BPE on Debian's regex module
// (which has \p classes and lookahead): it trains a 400-merge vocabulary per
// style, writes GPT-2-, Qwen2- and Llama-3-style tokenizer.json files, and
// the ids of 53 tricky strings (contractions, whitespace runs, digits,
// CJK, emoji, combining marks, added tokens with lstrip, rstrip, single_word
// and normalized). TestReference compares exactly. Debian has no package of
// the tokenizers library itself, so it could not serve as a second
// reference.
//
// # Where this differs from tokenizers and transformers
//
//   - Decode returns the exact bytes the tokens stand for. tokenizers
//     replaces invalid UTF-8 with U+FFFD; here a character split across
//     tokens, or a model's invalid byte sequence, stays as bytes, so that a
//     stream can be decoded piece by piece and joined. For valid text the
//     results are the same.
//   - An added token goes through the decoder like any token, as in
//     tokenizers: with the ByteLevel decoder a non-ASCII added token whose
//     characters are all in the byte map decodes to those bytes. The
//     special tokens of real models are ASCII, where this is the identity.
//   - transformers' clean_up_tokenization_spaces (true in Llama 3's config)
//     is not applied: it rewrites " ." to "." and breaks round trips.
//   - tokenizer_config.json's add_prefix_space and legacy, with which
//     transformers rebuilds some slow-converted tokenizers, are ignored;
//     tokenizer.json is taken as it is.
//   - No offsets, pairs, truncation or padding.
//
// # Chat templates
//
// Chat templates are rendered with github.com/ardanlabs/jinja v1.8.0 (the
// newer versions need a newer Go than the project's 1.26). It implements
// what transformers' environment provides: trim_blocks and lstrip_blocks,
// raise_exception, strftime_now, namespace(), loop variables, |tojson with
// Python's separators, and the string methods the templates use. The
// variables are those transformers passes: messages, add_generation_prompt,
// tools=None, documents=None and the special tokens that are set, plus any
// keyword arguments (enable_thinking, date_string, tools). The Qwen2.5,
// Qwen3 (thinking and not) and Llama 3.1/3.2 templates render exactly as
// transformers does (chat_test.go, against hand-derived renderings); no
// workaround was needed. Tool schemas should be passed as json.RawMessage,
// since Go maps lose the key order that Python dicts keep; the indented
// |tojson(indent=4) of Llama 3's tool prompt sorts keys.
//
// # Why not github.com/sugarme/tokenizer
//
// github.com/sugarme/tokenizer (v0.3.0, 2025-09, Go 1.23, fetched fine
// from the module proxy) is a port of the tokenizers library, but it cannot
// load these files: its Split pre-tokenizer compiles the pattern with
// regexp.MustCompile, which panics on the lookahead in the Qwen2 and Llama 3
// patterns, and its ByteLevel pre-tokenizer uses the GPT-2 regex without
// its whitespace alternatives \s+(?!\S)|\s+ (a TODO there says so), which
// splits whitespace differently. It has no ignore_merges, reports many errors by
// panicking (88 panic or log.Fatal calls outside tests), and brings
// dependencies (a progress bar, a cache, a container library) that a
// runtime does not need. What troupe needs, byte-level BPE and the
// SentencePiece-style variant, is about two thousand lines (with comments)
// written here against the tokenizers source and a Python reference.
package tokenizer
