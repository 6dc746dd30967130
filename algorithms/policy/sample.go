package policy

import (
	"math"
	"math/rand/v2"
	"slices"
)

// GenerateOptions controls sampling.
type GenerateOptions struct {
	// MaxNewTokens caps each row's completion; a row also stops when its
	// sequence fills the context.
	MaxNewTokens int
	// Temperature divides the logits; <= 0 means greedy (argmax).
	Temperature float32
	// TopK, if > 0, samples only among the K most likely tokens.
	TopK int
	// TopP, if in (0,1), samples only among the most likely tokens whose
	// probabilities (after temperature and TopK) sum to at least TopP
	// (nucleus sampling, HF's TopPLogitsWarper).
	TopP float32
	// Seed seeds row b's sampler with (Seed, b): the same seed, prompts and
	// weights give the same completions.
	Seed uint64
	// Stop lists token ids (e.g. the tokenizer's EOS) that end a row; the
	// stop token is included in the row's completion.
	Stop []int32
	// VocabLimit, if > 0, samples only ids below it (a model whose Vocab is
	// padded beyond its tokenizer's).
	VocabLimit int
	// Adapters, optional, names each prompt's LoRA adapter (see
	// Batch.Adapters).
	Adapters []string
	// RowOffset shifts every row's stream: row b draws from (Seed,
	// RowOffset+b), so the rows [lo, hi) of a batch generated on their own
	// with RowOffset lo are those rows of the whole batch (data-parallel
	// replicas split one request this way).
	RowOffset int

	// rowSeeds[b], when set, replaces b in row b's random stream (Seed, b):
	// generation reorders rows by adapter and keeps each row's stream.
	rowSeeds []int
}

// sampler picks next tokens from logits.
type sampler struct {
	opt  GenerateOptions
	rngs []*rand.Rand
	idx  []int
	p    []float64
}

// newSampler is the sampler of B rows: row b draws from (Seed,
// opt.rowSeeds[b]) when a reordering for adapters set them, else from
// (Seed, b).
func newSampler(opt GenerateOptions, B int) *sampler {
	s := &sampler{opt: opt, rngs: make([]*rand.Rand, B)}
	for b := range s.rngs {
		row := b
		if opt.rowSeeds != nil {
			row = opt.rowSeeds[b]
		}
		s.rngs[b] = rand.New(rand.NewPCG(opt.Seed, uint64(opt.RowOffset+row)))
	}
	return s
}

// sample draws row b's next token from logits (length V). It never sorts
// the whole vocabulary: it walks the distribution in id order when neither
// top-k nor top-p applies, keeps the top k by a bounded heap, and sorts only
// the candidates above a weight threshold for the nucleus.
func (s *sampler) sample(b int, logits []float32) int32 {
	if s.opt.VocabLimit > 0 && s.opt.VocabLimit < len(logits) {
		logits = logits[:s.opt.VocabLimit]
	}
	V := len(logits)
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	if s.opt.Temperature <= 0 {
		return int32(best)
	}
	top, invT := float64(logits[best]), 1/float64(s.opt.Temperature)
	byLogit := func(x, y int) int { // highest first, ties by id
		if logits[x] != logits[y] {
			if logits[x] > logits[y] {
				return -1
			}
			return 1
		}
		return x - y
	}
	if s.opt.TopK > 0 && s.opt.TopK < V {
		s.idx = topKIndices(s.idx[:0], logits, s.opt.TopK, byLogit)
		s.p = s.p[:0]
		var sum float64
		for _, i := range s.idx {
			e := math.Exp((float64(logits[i]) - top) * invT)
			s.p = append(s.p, e)
			sum += e
		}
		k, sum := s.topP(len(s.idx), sum)
		return s.draw(b, k, sum)
	}
	if cap(s.p) < V {
		s.p = make([]float64, V)
	}
	w := s.p[:V]
	var sum float64
	for i, v := range logits {
		w[i] = math.Exp((float64(v) - top) * invT)
		sum += w[i]
	}
	if !(s.opt.TopP > 0 && s.opt.TopP < 1) {
		// the whole distribution, walked in id order
		u := s.rngs[b].Float64() * sum
		for i, e := range w {
			u -= e
			if u < 0 {
				return int32(i)
			}
		}
		return int32(V - 1)
	}
	// Nucleus: the tokens above a weight threshold are a prefix of the
	// sorted order; once their mass reaches TopP·sum the nucleus lies
	// inside them, so only they are sorted.
	lim := float64(s.opt.TopP) * sum
	for tau := 1e-3; ; tau *= 1e-3 {
		s.idx = s.idx[:0]
		var mass float64
		for i, e := range w {
			if e >= tau {
				s.idx = append(s.idx, i)
				mass += e
			}
		}
		if mass >= lim || tau < 1e-300 {
			break
		}
	}
	slices.SortFunc(s.idx, byLogit)
	var before float64
	k := len(s.idx)
	for j, i := range s.idx {
		if before >= lim {
			k = j
			break
		}
		before += w[i]
	}
	u := s.rngs[b].Float64() * before
	for _, i := range s.idx[:k] {
		u -= w[i]
		if u < 0 {
			return int32(i)
		}
	}
	return int32(s.idx[k-1])
}

// topP cuts the first k sorted candidates (weights s.p[:k], total sum) to
// the nucleus of mass TopP·sum: candidates are kept while the mass before
// them is below it (HF's TopPLogitsWarper). It returns the kept count and
// their mass.
func (s *sampler) topP(k int, sum float64) (int, float64) {
	if !(s.opt.TopP > 0 && s.opt.TopP < 1) {
		return k, sum
	}
	lim := float64(s.opt.TopP) * sum
	var before float64
	for j, e := range s.p[:k] {
		if before >= lim {
			return j, before
		}
		before += e
	}
	return k, before
}

// draw samples among the first k entries of s.idx with weights s.p.
func (s *sampler) draw(b, k int, sum float64) int32 {
	u := s.rngs[b].Float64() * sum
	for j, e := range s.p[:k] {
		u -= e
		if u < 0 {
			return int32(s.idx[j])
		}
	}
	return int32(s.idx[k-1])
}

// topKIndices appends to dst the indices of the k largest logits, ordered
// by cmp (highest first, ties by id), with a bounded min-heap: O(V log k).
func topKIndices(dst []int, logits []float32, k int, cmp func(x, y int) int) []int {
	h := dst[:0]
	// h is a heap whose root is the worst kept index under cmp
	worse := func(x, y int) bool { return cmp(x, y) > 0 }
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(h) {
				return
			}
			if c+1 < len(h) && worse(h[c+1], h[c]) {
				c++
			}
			if !worse(h[c], h[i]) {
				return
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	for i := range logits {
		if len(h) < k {
			h = append(h, i)
			for j := len(h) - 1; j > 0; {
				p := (j - 1) / 2
				if !worse(h[j], h[p]) {
					break
				}
				h[j], h[p] = h[p], h[j]
				j = p
			}
			continue
		}
		if worse(h[0], i) {
			h[0] = i
			down(0)
		}
	}
	slices.SortFunc(h, cmp)
	return h
}

// rowState tracks one row of a batched generation.
type rowState struct {
	seq    []int32
	prompt int
	done   bool
}

func newRows(prompts [][]int32, opt GenerateOptions, ctx int) []rowState {
	rows := make([]rowState, len(prompts))
	for b, p := range prompts {
		rows[b] = rowState{seq: append([]int32(nil), p...), prompt: len(p)}
		rows[b].done = opt.MaxNewTokens == 0 || len(p) >= ctx
	}
	return rows
}

// accept appends a sampled token and decides whether the row is finished.
func (r *rowState) accept(tok int32, opt GenerateOptions, ctx int) {
	r.seq = append(r.seq, tok)
	if slices.Contains(opt.Stop, tok) || len(r.seq)-r.prompt >= opt.MaxNewTokens || len(r.seq) >= ctx {
		r.done = true
	}
}

func completions(rows []rowState) [][]int32 {
	out := make([][]int32, len(rows))
	for b, r := range rows {
		out[b] = r.seq[r.prompt:]
	}
	return out
}
