package policy

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrTokenizer reports a tokenizer that cannot be built.
var ErrTokenizer = errors.New("policy: bad tokenizer")

// Tokenizer maps text to token ids and back. Every tokenizer has the special
// tokens BOS (begin sequence), EOS (end), PAD (filler) and SEP (separates
// prompt from completion or turns); their ids are never produced by Encode
// from text, and Decode renders them as nothing.
type Tokenizer interface {
	// Encode returns the ids of text (no specials added).
	Encode(text string) []int32
	// Decode returns the text of ids, dropping special tokens.
	Decode(ids []int32) string
	// Vocab is the number of ids; a model's Config.Vocab must be >= it.
	Vocab() int
	// BOS, EOS, PAD and SEP are the special token ids.
	BOS() int32
	EOS() int32
	PAD() int32
	SEP() int32
}

// ByteTokenizer is the byte-level tokenizer: ids 0..255 are the bytes of
// the UTF-8 text, then BOS=256, EOS=257, PAD=258, SEP=259 (Vocab 260).
type ByteTokenizer struct{}

// Byte-level special token ids.
const (
	ByteBOS   int32 = 256
	ByteEOS   int32 = 257
	BytePAD   int32 = 258
	ByteSEP   int32 = 259
	ByteVocab       = 260
)

// Encode returns text's bytes as ids.
func (ByteTokenizer) Encode(text string) []int32 {
	ids := make([]int32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = int32(text[i])
	}
	return ids
}

// Decode returns the bytes of ids below 256 (specials and out-of-range ids
// are dropped); invalid UTF-8 is kept as is.
func (ByteTokenizer) Decode(ids []int32) string {
	b := make([]byte, 0, len(ids))
	for _, id := range ids {
		if id >= 0 && id < 256 {
			b = append(b, byte(id))
		}
	}
	return string(b)
}

// Vocab is 260.
func (ByteTokenizer) Vocab() int { return ByteVocab }

// BOS is 256.
func (ByteTokenizer) BOS() int32 { return ByteBOS }

// EOS is 257.
func (ByteTokenizer) EOS() int32 { return ByteEOS }

// PAD is 258.
func (ByteTokenizer) PAD() int32 { return BytePAD }

// SEP is 259.
func (ByteTokenizer) SEP() int32 { return ByteSEP }

// CharTokenizer is a small-vocabulary tokenizer over a fixed alphabet, for
// the tiny models of the benchmarks (vocab 64). Ids: PAD=0, BOS=1, EOS=2,
// SEP=3, UNK=4 (any character outside the alphabet), then the alphabet's
// characters in the order given, from 5. Vocab = 5 + characters in the
// alphabet. Decode renders UNK as '?'.
type CharTokenizer struct {
	chars []rune
	index map[rune]int32
}

// Char-level special token ids.
const (
	CharPAD int32 = 0
	CharBOS int32 = 1
	CharEOS int32 = 2
	CharSEP int32 = 3
	CharUNK int32 = 4

	charSpecials = 5
)

// DefaultAlphabet has 59 characters, so NewCharTokenizer(DefaultAlphabet)
// has exactly 64 ids: lower-case letters, digits, space, newline and common
// punctuation for the text environments.
const DefaultAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789 \n.,:;!?+-*/=()[]<>#_'\""

// NewCharTokenizer builds a tokenizer over alphabet (valid UTF-8, no
// repeated characters, not empty).
func NewCharTokenizer(alphabet string) (*CharTokenizer, error) {
	if alphabet == "" || !utf8.ValidString(alphabet) {
		return nil, fmt.Errorf("%w: alphabet must be non-empty valid UTF-8", ErrTokenizer)
	}
	t := &CharTokenizer{index: map[rune]int32{}}
	for _, r := range alphabet {
		if _, dup := t.index[r]; dup {
			return nil, fmt.Errorf("%w: character %q repeated in alphabet", ErrTokenizer, r)
		}
		t.index[r] = int32(charSpecials + len(t.chars))
		t.chars = append(t.chars, r)
	}
	return t, nil
}

// Encode maps each character to its id, UNK for characters not in the
// alphabet.
func (t *CharTokenizer) Encode(text string) []int32 {
	ids := make([]int32, 0, len(text))
	for _, r := range text {
		id, ok := t.index[r]
		if !ok {
			id = CharUNK
		}
		ids = append(ids, id)
	}
	return ids
}

// Decode maps ids back to characters; specials and unknown ids are dropped,
// UNK becomes '?'.
func (t *CharTokenizer) Decode(ids []int32) string {
	var sb strings.Builder
	for _, id := range ids {
		switch {
		case id == CharUNK:
			sb.WriteByte('?')
		case id >= charSpecials && int(id) < charSpecials+len(t.chars):
			sb.WriteRune(t.chars[id-charSpecials])
		}
	}
	return sb.String()
}

// Vocab is 5 plus the alphabet size.
func (t *CharTokenizer) Vocab() int { return charSpecials + len(t.chars) }

// BOS is 1.
func (t *CharTokenizer) BOS() int32 { return CharBOS }

// EOS is 2.
func (t *CharTokenizer) EOS() int32 { return CharEOS }

// PAD is 0.
func (t *CharTokenizer) PAD() int32 { return CharPAD }

// SEP is 3.
func (t *CharTokenizer) SEP() int32 { return CharSEP }
