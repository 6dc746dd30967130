package tokenizer

import (
	"errors"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

var (
	// ErrFormat reports a tokenizer file that is not what it claims to be:
	// bad JSON, a missing field, a merge of unknown tokens.
	ErrFormat = errors.New("tokenizer: bad tokenizer file")
	// ErrUnsupported reports a well-formed tokenizer that uses a model,
	// normalizer, pre-tokenizer, decoder or post-processor this package
	// does not implement.
	ErrUnsupported = errors.New("tokenizer: not supported")
	// ErrNoChatTemplate reports a chat request to a tokenizer without a
	// chat template.
	ErrNoChatTemplate = errors.New("tokenizer: no chat template")
)

// Tokenizer maps text to token ids and back. HF is a pretrained model's
// (tokenizer.json), Char and Byte are those of from-scratch models. A
// model's vocabulary must have at least Vocab ids.
type Tokenizer interface {
	// Encode returns the ids of text; with addSpecial, also the special
	// tokens the tokenizer puts around a sequence (a BOS).
	Encode(text string, addSpecial bool) []int32
	// Decode returns the text of ids, without special tokens when
	// skipSpecial is set.
	Decode(ids []int32, skipSpecial bool) string
	// Vocab is the number of ids.
	Vocab() int
	// BOS, EOS and PAD return the special ids the tokenizer has.
	BOS() (int32, bool)
	EOS() (int32, bool)
	PAD() (int32, bool)
}

var (
	_ Tokenizer = (*HF)(nil)
	_ Tokenizer = (*Char)(nil)
	_ Tokenizer = Byte{}
)

// HF is a Hugging Face tokenizer loaded from tokenizer.json (and
// tokenizer_config.json). It is safe for concurrent use.
type HF struct {
	model *bpe

	added     map[int32]*addedToken // by id
	addedIDs  map[string]int32      // by content
	rawTrie   *trie                 // added tokens with normalized=false
	normTrie  *trie                 // added tokens with normalized=true, by normalized content
	norm      normalizer            // nil: none
	pre       []preTokenizer
	byteLevel bool // the pre-tokenizer ends in ByteLevel: words are bytes

	post    []templateItem // nil: no special tokens added
	decoder []decodeStep   // nil: tokens joined with spaces
	// fastBytes[id] is id's text when the decoder is ByteLevel alone.
	fastBytes []string

	vocabSize         int
	bos, eos, pad     int32 // -1: absent
	bosTok, eosTok    string
	padTok, unkTok    string
	eosIDs            []int32
	chatSrc           string
	chat              *jinja.Template
	specialTokensVars map[string]any // bos_token etc. for chat templates
}

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int32
	content    string
	normalized string // content after the normalizer (== content if none)
	singleWord bool
	lstrip     bool
	rstrip     bool
	isNorm     bool
	special    bool
}

// templateItem is one item of a TemplateProcessing "single" template:
// either fixed ids or the encoded sequence.
type templateItem struct {
	ids []int32 // nil: the sequence
}

// Vocab is the number of ids: one more than the largest id of the model or
// an added token. A model's embedding must have at least this many rows.
func (t *HF) Vocab() int { return t.vocabSize }

// TokenID returns the id of a token string (an added token's content or a
// model token in its vocabulary spelling, e.g. "Ġthe").
func (t *HF) TokenID(s string) (int32, bool) {
	if id, ok := t.addedIDs[s]; ok {
		return id, true
	}
	id, ok := t.model.vocab[s]
	return id, ok
}

// Token returns the string of id (its vocabulary spelling) or false.
func (t *HF) Token(id int32) (string, bool) {
	if a, ok := t.added[id]; ok {
		return a.content, true
	}
	if id >= 0 && int(id) < len(t.model.tokens) && t.model.tokens[id] != "" {
		return t.model.tokens[id], true
	}
	return "", false
}

// IsSpecial reports whether id is a special added token (one that Decode
// skips when asked to).
func (t *HF) IsSpecial(id int32) bool {
	a, ok := t.added[id]
	return ok && a.special
}

// BOS returns the begin-of-sequence id, if the tokenizer has one.
func (t *HF) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// EOS returns the end-of-sequence id (tokenizer_config.json's eos_token),
// if the tokenizer has one.
func (t *HF) EOS() (int32, bool) { return t.eos, t.eos >= 0 }

// PAD returns the padding id, if the tokenizer has one.
func (t *HF) PAD() (int32, bool) { return t.pad, t.pad >= 0 }

// EOSIDs returns every id that ends a generation: EOS first, then those of
// generation_config.json and config.json (Llama 3.1 Instruct stops at
// <|end_of_text|>, <|eom_id|> and <|eot_id|>).
func (t *HF) EOSIDs() []int32 { return append([]int32(nil), t.eosIDs...) }

// Encode returns the ids of text. With addSpecial, the post-processor's
// special tokens (Llama's BOS) are added, as transformers does by default.
// Special tokens written in text are recognised, as in transformers.
func (t *HF) Encode(text string, addSpecial bool) []int32 {
	ids := make([]int32, 0, len(text)/3+2)
	if addSpecial && t.post != nil {
		for _, it := range t.post {
			if it.ids == nil {
				ids = t.encodeText(ids, text)
			} else {
				ids = append(ids, it.ids...)
			}
		}
		return ids
	}
	return t.encodeText(ids, text)
}

// encodeText runs the pipeline of tokenizers' encode_single_sequence:
// added tokens are split off the raw text, the rest is normalized, split
// again by normalized added tokens, pre-tokenized and given to the model.
func (t *HF) encodeText(ids []int32, text string) []int32 {
	var pieces, next []piece
	t.rawTrie.split(text, func(seg string, id int32, off int) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		if t.norm != nil {
			seg = t.norm.normalize(seg)
		}
		t.normTrie.split(seg, func(sub string, id int32, off2 int) {
			if id >= 0 {
				ids = append(ids, id)
				return
			}
			pieces = append(pieces[:0], piece{s: sub, first: off == 0 && off2 == 0})
			for _, pt := range t.pre {
				next = next[:0]
				for _, p := range pieces {
					next = pt.split(next, p)
				}
				pieces, next = next, pieces
			}
			for _, p := range pieces {
				ids = t.model.tokenize(ids, p.s, t.byteLevel)
			}
		})
	})
	return ids
}

// Decode returns the text of ids. Ids the tokenizer does not know are
// skipped, as are special tokens when skipSpecial. The text is the exact
// bytes the tokens stand for: a multi-byte character split across tokens
// is joined again, and a stream cut inside a character (or a model's
// invalid byte sequence) yields those bytes rather than U+FFFD.
func (t *HF) Decode(ids []int32, skipSpecial bool) string {
	if t.fastBytes != nil {
		var b strings.Builder
		for _, id := range ids {
			if id < 0 || int(id) >= len(t.fastBytes) {
				continue
			}
			if skipSpecial && t.IsSpecial(id) {
				continue
			}
			b.WriteString(t.fastBytes[id])
		}
		return b.String()
	}
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if a, ok := t.added[id]; ok {
			if skipSpecial && a.special {
				continue
			}
			toks = append(toks, a.normalized)
			continue
		}
		if id >= 0 && int(id) < len(t.model.tokens) && t.model.tokens[id] != "" {
			toks = append(toks, t.model.tokens[id])
		}
	}
	return t.decodeTokens(toks)
}

func (t *HF) decodeTokens(toks []string) string {
	if t.decoder == nil {
		return strings.Join(toks, " ")
	}
	for _, d := range t.decoder {
		toks = d.decode(toks)
	}
	return strings.Join(toks, "")
}

// trie finds added tokens in text, leftmost-longest, as tokenizers'
// Aho-Corasick automaton does.
type trie struct {
	root  trieNode
	first [256]bool
	toks  map[int32]*addedToken
}

type trieNode struct {
	next map[byte]*trieNode
	id   int32 // -1: no token ends here
}

func newTrie(toks []*addedToken, normalized bool) *trie {
	t := &trie{root: trieNode{id: -1}, toks: map[int32]*addedToken{}}
	n := 0
	for _, a := range toks {
		if a.isNorm != normalized {
			continue
		}
		key := a.content
		if normalized {
			key = a.normalized
		}
		if key == "" {
			continue
		}
		n++
		t.toks[a.id] = a
		t.first[key[0]] = true
		node := &t.root
		for i := 0; i < len(key); i++ {
			if node.next == nil {
				node.next = map[byte]*trieNode{}
			}
			c := node.next[key[i]]
			if c == nil {
				c = &trieNode{id: -1}
				node.next[key[i]] = c
			}
			node = c
		}
		// Two tokens with one content: the later id wins, as in the
		// tokenizers map from content to id.
		node.id = a.id
	}
	if n == 0 {
		return nil
	}
	return t
}

// longest returns the end and id of the longest token starting at i.
func (t *trie) longest(s string, i int) (int, int32) {
	end, id := -1, int32(-1)
	node := &t.root
	for j := i; j < len(s); j++ {
		node = node.next[s[j]]
		if node == nil {
			break
		}
		if node.id >= 0 {
			end, id = j+1, node.id
		}
	}
	return end, id
}

// split calls f for each segment of s in order: added tokens with their id,
// the text between them with id -1 (empty text is skipped). off is the
// segment's byte offset in s. This is AddedVocabulary::find_matches: a
// single_word token next to a word character is not a match, and lstrip
// and rstrip tokens take the whitespace beside them.
func (t *trie) split(s string, f func(seg string, id int32, off int)) {
	if t == nil {
		if s != "" {
			f(s, -1, 0)
		}
		return
	}
	startOff := 0
	for i := 0; i < len(s); {
		if !t.first[s[i]] {
			i++
			continue
		}
		end, id := t.longest(s, i)
		if end < 0 {
			i++
			continue
		}
		start, stop := i, end
		i = end
		a := t.toks[id]
		if a.singleWord {
			if start > 0 && isWord(lastRune(s[:start])) || stop < len(s) && isWord(firstRune(s[stop:])) {
				continue
			}
		}
		if a.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), startOff)
		}
		if a.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
		}
		if start < startOff {
			continue // overlaps what an rstrip token took
		}
		if startOff < start {
			f(s[startOff:start], -1, startOff)
		}
		f(s[start:end], id, start)
		startOff = stop
		i = max(i, stop)
	}
	if startOff < len(s) {
		f(s[startOff:], -1, startOff)
	}
}
