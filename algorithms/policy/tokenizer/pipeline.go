package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization.
type normalizer interface{ normalize(s string) string }

type unicodeNorm struct{ form norm.Form }

func (n unicodeNorm) normalize(s string) string { return n.form.String(s) }

type lowercaseNorm struct{}

func (lowercaseNorm) normalize(s string) string { return strings.ToLower(s) }

// prependNorm prepends a string to non-empty text (SentencePiece's "▁").
type prependNorm struct{ prefix string }

func (n prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

// replaceNorm replaces every occurrence of a literal string.
type replaceNorm struct{ old, new string }

func (n replaceNorm) normalize(s string) string {
	if n.old == "" {
		return s
	}
	return strings.ReplaceAll(s, n.old, n.new)
}

type stripNorm struct{ left, right bool }

func (n stripNorm) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type seqNorm []normalizer

func (q seqNorm) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// piece is a span of text on its way through the pre-tokenizers.
type piece struct {
	s string
	// first: the piece starts at offset 0 of the original text (for
	// Metaspace's prepend_scheme "first").
	first bool
}

// preTokenizer splits pieces into smaller ones.
type preTokenizer interface {
	split(dst []piece, p piece) []piece
}

// behavior is tokenizers' SplitDelimiterBehavior.
type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]behavior{
	"Removed": removed, "Isolated": isolated, "MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext": mergedWithNext, "Contiguous": contiguous,
}

type span struct {
	start, end int
	match      bool
}

// splitPieces implements NormalizedString::split: the matches and the gaps
// between them, combined as behavior says, empty pieces dropped.
func splitPieces(dst []piece, p piece, m matcher, b behavior, invert bool) []piece {
	s := p.s
	if s == "" {
		return dst
	}
	if b == isolated {
		// The common case (every byte-level model), without the span list.
		prev := 0
		for i := 0; i < len(s); {
			st, e := m.find(s, i)
			if st < 0 {
				break
			}
			if st > prev {
				dst = append(dst, piece{s: s[prev:st], first: p.first && prev == 0})
			}
			dst = append(dst, piece{s: s[st:e], first: p.first && st == 0})
			prev, i = e, e
		}
		if prev < len(s) {
			dst = append(dst, piece{s: s[prev:], first: p.first && prev == 0})
		}
		return dst
	}
	var spans []span
	prev := 0
	for i := 0; i < len(s); {
		st, e := m.find(s, i)
		if st < 0 {
			break
		}
		if st > prev {
			spans = append(spans, span{prev, st, invert})
		}
		spans = append(spans, span{st, e, !invert})
		prev, i = e, e
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), invert})
	}
	var out []span
	switch b {
	case isolated:
		out = spans
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case contiguous:
		prevMatch := false
		for _, sp := range spans {
			if len(out) > 0 && sp.match == prevMatch {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case mergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	for _, sp := range out {
		if sp.end > sp.start {
			dst = append(dst, piece{s: s[sp.start:sp.end], first: p.first && sp.start == 0})
		}
	}
	return dst
}

type splitPre struct {
	m        matcher
	behavior behavior
	invert   bool
}

func (sp splitPre) split(dst []piece, p piece) []piece {
	return splitPieces(dst, p, sp.m, sp.behavior, sp.invert)
}

// byteLevelPre is the ByteLevel pre-tokenizer's splitting half; its
// byte-to-character mapping is done by the model, which reads the raw bytes.
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

var gpt2Matcher, _ = compilePattern(GPT2Pattern)

func (bl byteLevelPre) split(dst []piece, p piece) []piece {
	if bl.addPrefixSpace && p.s != "" && p.s[0] != ' ' {
		p.s = " " + p.s
	}
	if !bl.useRegex {
		if p.s != "" {
			dst = append(dst, p)
		}
		return dst
	}
	return splitPieces(dst, p, gpt2Matcher, isolated, false)
}

// metaspacePre replaces spaces with the replacement character ("▁"),
// prepends one as the scheme says, and splits before each.
type metaspacePre struct {
	replacement string
	scheme      string // "always", "first", "never"
	splitOn     bool
}

func (mp metaspacePre) split(dst []piece, p piece) []piece {
	s := strings.ReplaceAll(p.s, " ", mp.replacement)
	if s != "" && !strings.HasPrefix(s, mp.replacement) && (mp.scheme == "always" || mp.scheme == "first" && p.first) {
		s = mp.replacement + s
	}
	p.s = s
	if !mp.splitOn {
		if s != "" {
			dst = append(dst, p)
		}
		return dst
	}
	return splitPieces(dst, p, literalMatcher(mp.replacement), mergedWithNext, false)
}

// decodeStep is one decoder of the chain. Tokens are byte strings: they may
// hold invalid UTF-8 once a ByteLevel or ByteFallback step has run.
type decodeStep interface {
	decode(tokens []string) []string
}

// byteLevelDec maps each token's characters back to bytes and joins them. A
// token with a character outside the map (an added token such as " <x>")
// contributes its UTF-8 bytes as they are, as in tokenizers.
type byteLevelDec struct{}

func (byteLevelDec) decode(tokens []string) []string {
	var b []byte
	for _, t := range tokens {
		b = appendByteLevel(b, t)
	}
	return []string{string(b)}
}

func appendByteLevel(b []byte, t string) []byte {
	n := len(b)
	for _, r := range t {
		c, ok := charByte[r]
		if !ok {
			return append(b[:n], t...)
		}
		b = append(b, c)
	}
	return b
}

type replaceDec struct{ old, new string }

func (d replaceDec) decode(tokens []string) []string {
	if d.old == "" {
		return tokens
	}
	for i, t := range tokens {
		tokens[i] = strings.ReplaceAll(t, d.old, d.new)
	}
	return tokens
}

// byteFallbackDec turns runs of "<0xXX>" tokens into their bytes. Where
// tokenizers would put U+FFFD for each byte of a run that is not valid
// UTF-8, the raw bytes are kept (see the package doc).
type byteFallbackDec struct{}

func (byteFallbackDec) decode(tokens []string) []string {
	out := tokens[:0]
	var run []byte
	for _, t := range tokens {
		if b, ok := fallbackByte(t); ok {
			run = append(run, b)
			continue
		}
		if len(run) > 0 {
			out = append(out, string(run))
			run = run[:0]
		}
		out = append(out, t)
	}
	if len(run) > 0 {
		out = append(out, string(run))
	}
	return out
}

func fallbackByte(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(t[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

type fuseDec struct{}

func (fuseDec) decode(tokens []string) []string { return []string{strings.Join(tokens, "")} }

// stripDec removes up to start leading and stop trailing copies of content
// from each token.
type stripDec struct {
	content     string
	start, stop int
}

func (d stripDec) decode(tokens []string) []string {
	for i, t := range tokens {
		for n := 0; n < d.start && d.content != "" && strings.HasPrefix(t, d.content); n++ {
			t = t[len(d.content):]
		}
		for n := 0; n < d.stop && d.content != "" && strings.HasSuffix(t, d.content); n++ {
			t = t[:len(t)-len(d.content)]
		}
		tokens[i] = t
	}
	return tokens
}

// metaspaceDec turns the replacement character back into spaces, dropping
// it at the start of the first token unless the scheme is "never".
type metaspaceDec struct {
	replacement string
	scheme      string
}

func (d metaspaceDec) decode(tokens []string) []string {
	for i, t := range tokens {
		if i == 0 && d.scheme != "never" {
			// tokenizers drops every replacement character of the first
			// token, not only the leading one.
			t = strings.ReplaceAll(t, d.replacement, "")
		} else {
			t = strings.ReplaceAll(t, d.replacement, " ")
		}
		tokens[i] = t
	}
	return tokens
}

// isWord is Rust regex's Unicode \w: alphabetic, marks, decimal digits,
// connector punctuation and the join controls.
func isWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func lastRune(s string) rune {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r
}

func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}
