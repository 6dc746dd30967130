package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer regexes of GPT-2, Qwen2/Qwen3 and Llama 3, exactly as
// their tokenizer.json files spell them. They need lookahead (\s+(?!\S)),
// which Go's regexp lacks, so each is matched by a hand-written function
// that follows the backtracking engine's (Oniguruma's) leftmost-first
// semantics alternative by alternative.
const (
	// GPT2Pattern is the split regex of GPT-2's ByteLevel pre-tokenizer
	// (use_regex=true) and of Split pre-tokenizers that spell it out.
	GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// Qwen2Pattern is the Split regex of Qwen2, Qwen2.5 and Qwen3: digits
	// one at a time.
	Qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama3Pattern is the Split regex of Llama 3, 3.1 and 3.2: digits in
	// runs of up to three.
	Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// cl100kPattern is tiktoken's spelling of the Llama 3 regex (possessive
	// quantifiers, a single [\r\n]). Both changes are no-ops here: the
	// possessive classes cannot give back anything the next item could
	// use, and after the last \r or \n of a whitespace run [\r\n]+ matches
	// one character either way.
	cl100kPattern = `'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`
)

// matcher finds a pre-tokenizer pattern in text.
type matcher interface {
	// find returns the leftmost match at or after byte i as [start, end),
	// or start < 0 when there is none. Matches are never empty.
	find(s string, i int) (start, end int)
}

// compilePattern returns the matcher of a Split pre-tokenizer's regex. The
// known patterns above are hand-coded; any other pattern is accepted only if
// Go's RE2 engine means the same by it: it must compile and must not use the
// Perl classes (\s, \w, \d, \b and their negations), which are ASCII-only in
// RE2 but Unicode in Oniguruma, the engine Hugging Face tokenizers uses.
func compilePattern(pattern string) (matcher, error) {
	switch pattern {
	case GPT2Pattern:
		return atMatcher(gpt2At), nil
	case Qwen2Pattern:
		return atMatcher(func(s string, i int) int { return qwenAt(s, i, 1) }), nil
	case Llama3Pattern, cl100kPattern:
		return atMatcher(func(s string, i int) int { return qwenAt(s, i, 3) }), nil
	}
	for _, c := range []string{`\s`, `\S`, `\w`, `\W`, `\d`, `\D`, `\b`, `\B`, `(?=`, `(?!`, `(?<`} {
		if strings.Contains(pattern, c) {
			return nil, fmt.Errorf("%w: split regex %q (only the GPT-2, Qwen2 and Llama 3 patterns and RE2-compatible patterns without %s are supported)", ErrUnsupported, pattern, c)
		}
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("%w: split regex %q: %v", ErrUnsupported, pattern, err)
	}
	return reMatcher{re}, nil
}

// literalMatcher matches a fixed string (a Split pattern {"String": ...}).
type literalMatcher string

func (m literalMatcher) find(s string, i int) (int, int) {
	if m == "" {
		return -1, -1
	}
	k := strings.Index(s[i:], string(m))
	if k < 0 {
		return -1, -1
	}
	return i + k, i + k + len(m)
}

type reMatcher struct{ re *regexp.Regexp }

func (m reMatcher) find(s string, i int) (int, int) {
	for i <= len(s) {
		loc := m.re.FindStringIndex(s[i:])
		if loc == nil {
			return -1, -1
		}
		if loc[1] > loc[0] {
			return i + loc[0], i + loc[1]
		}
		// An empty match produces no piece; look again one character on.
		_, w := utf8.DecodeRuneInString(s[i+loc[0]:])
		if w == 0 {
			return -1, -1
		}
		i += loc[0] + w
	}
	return -1, -1
}

// atMatcher adapts a function that matches at a fixed position (returning
// the match end, or -1) to a search.
type atMatcher func(s string, i int) int

func (m atMatcher) find(s string, i int) (int, int) {
	for i < len(s) {
		if e := m(s, i); e > i {
			return i, e
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return -1, -1
}

// Character classes as Oniguruma reads them on Unicode text. An invalid
// UTF-8 byte decodes as U+FFFD (a symbol), so it falls in "other".
func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }
func isS(r rune) bool { return unicode.IsSpace(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) }

func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// run returns the end of the run of characters in class starting at i.
func run(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		r, w := runeAt(s, i)
		if !class(r) {
			break
		}
		i += w
	}
	return i
}

// spaceTail matches \s+(?!\S)|\s+ at i, where s[i] is whitespace: the
// greedy run gives back its last character when a non-space follows, so
// that character can join the next word as its leading space.
func spaceTail(s string, i int) int {
	e := run(s, i, isS)
	if e == len(s) {
		return e
	}
	_, w := utf8.DecodeLastRuneInString(s[i:e])
	if e-w > i {
		return e - w
	}
	return e
}

// gpt2At matches GPT2Pattern at i.
func gpt2At(s string, i int) int {
	r, w := runeAt(s, i)
	if r == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	// ` ?X+` for X in L, N, other: a leading space joins only if an X follows.
	for _, class := range [3]func(rune) bool{isL, isN, isOther} {
		if r == ' ' {
			if r2, _ := runeAt(s, i+1); r2 >= 0 && class(r2) {
				return run(s, i+1, class)
			}
		}
		if class(r) {
			return run(s, i+w, class)
		}
	}
	if isS(r) {
		return spaceTail(s, i)
	}
	return -1
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i (s[i] == '\”),
// returning the end or -1. Case folding maps U+017F (long s) to s as well.
func contraction(s string, i int) int {
	r1, w1 := runeAt(s, i+1)
	switch r1 {
	case 's', 'S', 'ſ', 't', 'T', 'm', 'M', 'd', 'D':
		return i + 1 + w1
	case 'r', 'R', 'v', 'V':
		if r2, w2 := runeAt(s, i+1+w1); r2 == 'e' || r2 == 'E' {
			return i + 1 + w1 + w2
		}
	case 'l', 'L':
		if r2, w2 := runeAt(s, i+1+w1); r2 == 'l' || r2 == 'L' {
			return i + 1 + w1 + w2
		}
	}
	return -1
}

// qwenAt matches Qwen2Pattern (maxDigits 1) or Llama3Pattern (maxDigits 3)
// at i.
func qwenAt(s string, i int, maxDigits int) int {
	r, w := runeAt(s, i)
	if r == '\'' {
		if e := contraction(s, i); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r) {
		return run(s, i+w, isL)
	}
	if r != '\r' && r != '\n' && !isN(r) {
		if r2, _ := runeAt(s, i+w); r2 >= 0 && isL(r2) {
			return run(s, i+w, isL)
		}
	}
	// \p{N}{1,maxDigits}
	if isN(r) {
		e := i + w
		for n := 1; n < maxDigits; n++ {
			r2, w2 := runeAt(s, e)
			if r2 < 0 || !isN(r2) {
				break
			}
			e += w2
		}
		return e
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if r == ' ' {
		j = i + 1
	}
	if r2, _ := runeAt(s, j); r2 >= 0 && isOther(r2) {
		e := run(s, j, isOther)
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	if isS(r) {
		// \s*[\r\n]+ ends after the run's last \r or \n.
		e := run(s, i, isS)
		if k := strings.LastIndexAny(s[i:e], "\r\n"); k >= 0 {
			return i + k + 1
		}
		return spaceTail(s, i)
	}
	return -1
}
