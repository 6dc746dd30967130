package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrAlphabet reports an alphabet a character tokenizer cannot be built
// from.
var ErrAlphabet = errors.New("tokenizer: bad alphabet")

// Byte is the byte-level tokenizer of from-scratch models: ids 0..255 are
// the bytes of the UTF-8 text, then BOS=256, EOS=257, PAD=258, SEP=259
// (Vocab 260). Special tokens have no text.
type Byte struct{}

// Byte-level special token ids.
const (
	ByteBOS   int32 = 256
	ByteEOS   int32 = 257
	BytePAD   int32 = 258
	ByteSEP   int32 = 259
	ByteVocab       = 260
)

// Encode returns text's bytes as ids, after BOS with addSpecial.
func (Byte) Encode(text string, addSpecial bool) []int32 {
	ids := make([]int32, 0, len(text)+1)
	if addSpecial {
		ids = append(ids, ByteBOS)
	}
	for i := 0; i < len(text); i++ {
		ids = append(ids, int32(text[i]))
	}
	return ids
}

// Decode returns the bytes of ids below 256 (specials and out-of-range ids
// are dropped, whatever skipSpecial); invalid UTF-8 is kept as is.
func (Byte) Decode(ids []int32, skipSpecial bool) string {
	b := make([]byte, 0, len(ids))
	for _, id := range ids {
		if id >= 0 && id < 256 {
			b = append(b, byte(id))
		}
	}
	return string(b)
}

// Vocab is 260.
func (Byte) Vocab() int { return ByteVocab }

// BOS is 256.
func (Byte) BOS() (int32, bool) { return ByteBOS, true }

// EOS is 257.
func (Byte) EOS() (int32, bool) { return ByteEOS, true }

// PAD is 258.
func (Byte) PAD() (int32, bool) { return BytePAD, true }

// SEP is 259: it separates a prompt from its completion.
func (Byte) SEP() int32 { return ByteSEP }

// Char is a small-vocabulary tokenizer over a fixed alphabet, for the tiny
// from-scratch models of the environments (vocab 64). Ids: PAD=0, BOS=1,
// EOS=2, SEP=3, UNK=4 (any character outside the alphabet), then the
// alphabet's characters in the order given, from 5. Vocab = 5 + characters
// in the alphabet. Special tokens have no text; Decode renders UNK as '?'.
type Char struct {
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

// DefaultAlphabet has 59 characters, so NewChar(DefaultAlphabet) has
// exactly 64 ids: lower-case letters, digits, space, newline and common
// punctuation for the text environments.
const DefaultAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789 \n.,:;!?+-*/=()[]<>#_'\""

// NewChar builds a tokenizer over alphabet (valid UTF-8, no repeated
// characters, not empty); a bad alphabet is ErrAlphabet.
func NewChar(alphabet string) (*Char, error) {
	if alphabet == "" || !utf8.ValidString(alphabet) {
		return nil, fmt.Errorf("%w: alphabet must be non-empty valid UTF-8", ErrAlphabet)
	}
	t := &Char{index: map[rune]int32{}}
	for _, r := range alphabet {
		if _, dup := t.index[r]; dup {
			return nil, fmt.Errorf("%w: character %q repeated in alphabet", ErrAlphabet, r)
		}
		t.index[r] = int32(charSpecials + len(t.chars))
		t.chars = append(t.chars, r)
	}
	return t, nil
}

// Encode maps each character to its id, UNK for characters not in the
// alphabet, after BOS with addSpecial.
func (t *Char) Encode(text string, addSpecial bool) []int32 {
	ids := make([]int32, 0, len(text)+1)
	if addSpecial {
		ids = append(ids, CharBOS)
	}
	for _, r := range text {
		id, ok := t.index[r]
		if !ok {
			id = CharUNK
		}
		ids = append(ids, id)
	}
	return ids
}

// Decode maps ids back to characters; specials and unknown ids are dropped
// (whatever skipSpecial), UNK becomes '?'.
func (t *Char) Decode(ids []int32, skipSpecial bool) string {
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
func (t *Char) Vocab() int { return charSpecials + len(t.chars) }

// BOS is 1.
func (t *Char) BOS() (int32, bool) { return CharBOS, true }

// EOS is 2.
func (t *Char) EOS() (int32, bool) { return CharEOS, true }

// PAD is 0.
func (t *Char) PAD() (int32, bool) { return CharPAD, true }

// SEP is 3: it separates a prompt from its completion.
func (t *Char) SEP() int32 { return CharSEP }
