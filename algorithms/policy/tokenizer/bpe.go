package tokenizer

import (
	"container/heap"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of tokenizer.json: a vocabulary and ranked merges.
type bpe struct {
	vocab  map[string]int32
	tokens []string // id -> token; "" for ids the model does not use
	// merges maps a pair of ids (left<<32 | right) to its rank and the id
	// of the merged token. A later duplicate merge replaces an earlier one,
	// as in tokenizers.
	merges map[uint64]merge
	// byteIDs[b] is the id of byte b's byte-level character, for words
	// that arrive as raw bytes (-1 when the vocabulary lacks it).
	byteIDs [256]int32
	// byteVocab maps the raw bytes of every byte-level token to its id, for
	// ignore_merges on byte-level words.
	byteVocab map[string]int32

	unk          int32 // -1: none
	fuseUnk      bool
	byteFallback bool
	fallback     [256]int32 // id of "<0xXX>" when byteFallback
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	cacheMu sync.RWMutex
	cache   map[string][]int32
}

type merge struct{ rank, id int32 }

const (
	cacheCap     = 1 << 14 // words, as tokenizers' default of 10k
	cacheWordMax = 256     // bytes; longer words are not cached
	// simpleMax is the word length (symbols) up to which the quadratic
	// merge loop is used; longer words use the heap.
	simpleMax = 48
)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// tokenize appends the ids of one pre-tokenized word. If byteLevel, word
// holds raw bytes, each standing for its byte-level character.
func (m *bpe) tokenize(dst []int32, word string, byteLevel bool) []int32 {
	if word == "" {
		return dst
	}
	if len(word) <= cacheWordMax {
		m.cacheMu.RLock()
		ids, ok := m.cache[word]
		m.cacheMu.RUnlock()
		if ok {
			return append(dst, ids...)
		}
	}
	n := len(dst)
	dst = m.tokenizeUncached(dst, word, byteLevel)
	if len(word) <= cacheWordMax {
		ids := append([]int32(nil), dst[n:]...)
		m.cacheMu.Lock()
		if len(m.cache) >= cacheCap {
			clear(m.cache) // a crude bound; hit rates on real text stay high
		}
		m.cache[word] = ids
		m.cacheMu.Unlock()
	}
	return dst
}

func (m *bpe) tokenizeUncached(dst []int32, word string, byteLevel bool) []int32 {
	if m.ignoreMerges {
		var id int32
		var ok bool
		if byteLevel {
			id, ok = m.byteVocab[word]
		} else {
			id, ok = m.vocab[word]
		}
		if ok {
			return append(dst, id)
		}
	}
	syms := m.symbols(word, byteLevel)
	if len(syms) <= simpleMax {
		syms = m.mergeSimple(syms)
	} else {
		syms = m.mergeHeap(syms)
	}
	return append(dst, syms...)
}

// symbols splits a word into the ids of its characters (bytes when
// byteLevel), with byte fallback and unknown-token handling as tokenizers'
// BPE::merge_word has them. A character with no id, no byte fallback and no
// unk token is dropped, as there.
func (m *bpe) symbols(word string, byteLevel bool) []int32 {
	syms := make([]int32, 0, len(word))
	if byteLevel && m.prefix == "" && m.suffix == "" && !m.byteFallback {
		for i := 0; i < len(word); i++ {
			if id := m.byteIDs[word[i]]; id >= 0 {
				syms = append(syms, id)
			} else if m.unk >= 0 && !(m.fuseUnk && len(syms) > 0 && syms[len(syms)-1] == m.unk) {
				syms = append(syms, m.unk)
			}
		}
		return syms
	}
	pendingUnk := false
	for i := 0; i < len(word); {
		start := i
		var s string
		if byteLevel {
			s = byteChar[word[i]]
			i++
		} else {
			_, w := utf8.DecodeRuneInString(word[i:])
			s = word[i : i+w]
			i += w
		}
		if start > 0 && m.prefix != "" {
			s = m.prefix + s
		}
		if i >= len(word) && m.suffix != "" {
			s += m.suffix
		}
		if id, ok := m.vocab[s]; ok {
			if pendingUnk {
				syms = append(syms, m.unk)
				pendingUnk = false
			}
			syms = append(syms, id)
			continue
		}
		if m.byteFallback {
			ok := true
			for j := 0; j < len(s); j++ {
				if m.fallback[s[j]] < 0 {
					ok = false
					break
				}
			}
			if ok {
				// tokenizers leaves a pending unk in place here and emits
				// it after the byte tokens.
				for j := 0; j < len(s); j++ {
					syms = append(syms, m.fallback[s[j]])
				}
				continue
			}
		}
		if m.unk >= 0 {
			if pendingUnk && !m.fuseUnk {
				syms = append(syms, m.unk)
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		syms = append(syms, m.unk)
	}
	return syms
}

// mergeSimple applies merges to syms in place: repeatedly the pair of
// lowest rank, the leftmost among equals. This is the order in which
// tokenizers' heap (ordered by rank, then position) applies them.
func (m *bpe) mergeSimple(syms []int32) []int32 {
	for len(syms) > 1 {
		best, at := merge{rank: -1}, -1
		for i := 0; i+1 < len(syms); i++ {
			if mg, ok := m.merges[pairKey(syms[i], syms[i+1])]; ok && (at < 0 || mg.rank < best.rank) {
				best, at = mg, i
			}
		}
		if at < 0 {
			break
		}
		syms[at] = best.id
		syms = append(syms[:at+1], syms[at+2:]...)
	}
	return syms
}

// mergeHeap is mergeSimple in O(n log n), for long words: a doubly linked
// list of symbols and a heap of candidate pairs, stale entries skipped.
func (m *bpe) mergeHeap(syms []int32) []int32 {
	n := len(syms)
	if n < 2 {
		return syms
	}
	prev := make([]int, n)
	next := make([]int, n)
	alive := make([]bool, n)
	for i := range syms {
		prev[i], next[i], alive[i] = i-1, i+1, true
	}
	next[n-1] = -1
	h := &pairHeap{}
	for i := 0; i+1 < n; i++ {
		if mg, ok := m.merges[pairKey(syms[i], syms[i+1])]; ok {
			h.items = append(h.items, pairItem{mg.rank, i, mg.id})
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		top := heap.Pop(h).(pairItem)
		p := top.pos
		if !alive[p] || next[p] < 0 {
			continue
		}
		q := next[p]
		if mg, ok := m.merges[pairKey(syms[p], syms[q])]; !ok || mg.id != top.id || mg.rank != top.rank {
			continue // stale
		}
		syms[p] = top.id
		alive[q] = false
		next[p] = next[q]
		if next[q] >= 0 {
			prev[next[q]] = p
		}
		if l := prev[p]; l >= 0 {
			if mg, ok := m.merges[pairKey(syms[l], syms[p])]; ok {
				heap.Push(h, pairItem{mg.rank, l, mg.id})
			}
		}
		if r := next[p]; r >= 0 {
			if mg, ok := m.merges[pairKey(syms[p], syms[r])]; ok {
				heap.Push(h, pairItem{mg.rank, p, mg.id})
			}
		}
	}
	out := syms[:0]
	for i := 0; i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

type pairItem struct {
	rank int32
	pos  int
	id   int32
}

type pairHeap struct{ items []pairItem }

func (h *pairHeap) Len() int { return len(h.items) }
func (h *pairHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}
func (h *pairHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *pairHeap) Push(x any)    { h.items = append(h.items, x.(pairItem)) }
func (h *pairHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// newBPE builds the model from its vocabulary and merges (pairs of token
// strings, in rank order).
func newBPE(vocab map[string]int32, merges [][2]string, prefix string) (*bpe, error) {
	m := &bpe{vocab: vocab, unk: -1, prefix: prefix, merges: make(map[uint64]merge, len(merges)), cache: map[string][]int32{}}
	maxID := int32(-1)
	for tok, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("%w: model.vocab: token %q has negative id %d", ErrFormat, tok, id)
		}
		maxID = max(maxID, id)
	}
	if int(maxID) >= sparseLimit(len(vocab)) {
		return nil, fmt.Errorf("%w: model.vocab: ids are sparse (largest %d for %d tokens)", ErrFormat, maxID, len(vocab))
	}
	m.tokens = make([]string, maxID+1)
	for tok, id := range vocab {
		m.tokens[id] = tok
	}
	for rank, pr := range merges {
		a, ok := vocab[pr[0]]
		if !ok {
			return nil, fmt.Errorf("%w: merge %d (%q %q): %q is not in the vocabulary", ErrFormat, rank, pr[0], pr[1], pr[0])
		}
		b, ok := vocab[pr[1]]
		if !ok {
			return nil, fmt.Errorf("%w: merge %d (%q %q): %q is not in the vocabulary", ErrFormat, rank, pr[0], pr[1], pr[1])
		}
		// The right part loses its continuing-subword prefix in the merge.
		joined := pr[0] + strings.TrimPrefix(pr[1], prefix)
		id, ok := vocab[joined]
		if !ok {
			return nil, fmt.Errorf("%w: merge %d (%q %q): the merged token %q is not in the vocabulary", ErrFormat, rank, pr[0], pr[1], joined)
		}
		m.merges[pairKey(a, b)] = merge{int32(rank), id}
	}
	m.byteVocab = make(map[string]int32)
	for tok, id := range vocab {
		if raw, ok := byteLevelBytes(tok); ok {
			m.byteVocab[string(raw)] = id
		}
	}
	for b := range 256 {
		m.byteIDs[b] = -1
		if id, ok := vocab[byteChar[b]]; ok {
			m.byteIDs[b] = id
		}
		m.fallback[b] = -1
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.fallback[b] = id
		}
	}
	return m, nil
}

// sparseLimit bounds the ids of a vocabulary of n tokens, so that a
// corrupt file cannot make the id tables huge. Real vocabularies are dense.
func sparseLimit(n int) int { return 2*n + 1<<16 }
