package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"troupe/gpu/compute"
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
	// Batch.Adapters); a GPT takes none.
	Adapters []string

	// rowSeeds[b], when set, replaces b in row b's random stream (Seed, b):
	// the Llama reorders rows by adapter and keeps each row's stream.
	rowSeeds []int
}

// sampler picks next tokens from logits.
type sampler struct {
	opt  GenerateOptions
	rngs []*rand.Rand
	idx  []int
	p    []float64
	// fast (the Llama's sampler) avoids sorting the whole vocabulary: it
	// walks the distribution in id order when neither top-k nor top-p
	// applies and sorts only the candidates otherwise. The same
	// distribution, a different draw for a given seed than the GPT's,
	// whose sorted walk is kept so its seeded results do not change.
	fast bool
}

func newSampler(opt GenerateOptions, B int) *sampler {
	s := &sampler{opt: opt, rngs: make([]*rand.Rand, B)}
	for b := range s.rngs {
		s.rngs[b] = rand.New(rand.NewPCG(opt.Seed, uint64(b)))
	}
	return s
}

// sample draws row b's next token from logits (length V).
func (s *sampler) sample(b int, logits []float32) int32 {
	if s.fast {
		return s.sampleFast(b, logits)
	}
	if s.opt.VocabLimit > 0 && s.opt.VocabLimit < len(logits) {
		logits = logits[:s.opt.VocabLimit]
	}
	V := len(logits)
	if s.opt.Temperature <= 0 {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		return int32(best)
	}
	s.idx = s.idx[:0]
	for i := 0; i < V; i++ {
		s.idx = append(s.idx, i)
	}
	// highest logit first; ties by id so the order is deterministic
	slices.SortFunc(s.idx, func(x, y int) int {
		if logits[x] != logits[y] {
			if logits[x] > logits[y] {
				return -1
			}
			return 1
		}
		return x - y
	})
	k := V
	if s.opt.TopK > 0 && s.opt.TopK < V {
		k = s.opt.TopK
	}
	s.p = s.p[:0]
	top := float64(logits[s.idx[0]])
	var sum float64
	for _, i := range s.idx[:k] {
		e := math.Exp((float64(logits[i]) - top) / float64(s.opt.Temperature))
		s.p = append(s.p, e)
		sum += e
	}
	k, sum = s.topP(k, sum)
	return s.draw(b, k, sum)
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

// sampleFast is sample for large vocabularies (see sampler.fast).
func (s *sampler) sampleFast(b int, logits []float32) int32 {
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

func (m *Model) checkPrompts(prompts [][]int32, opt GenerateOptions) error {
	if len(prompts) == 0 {
		return fmt.Errorf("%w: no prompts", ErrBatch)
	}
	if opt.MaxNewTokens < 0 {
		return fmt.Errorf("%w: MaxNewTokens=%d", ErrBatch, opt.MaxNewTokens)
	}
	if err := noAdapters(opt.Adapters); err != nil {
		return err
	}
	for b, p := range prompts {
		if len(p) == 0 || len(p) > m.cfg.Context {
			return fmt.Errorf("%w: prompt %d has %d tokens, want 1..%d", ErrBatch, b, len(p), m.cfg.Context)
		}
		for i, id := range p {
			if id < 0 || int(id) >= m.cfg.Vocab {
				return fmt.Errorf("%w: prompt %d token %d is %d, vocab %d", ErrBatch, b, i, id, m.cfg.Vocab)
			}
		}
	}
	return nil
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

// decodeState is the per-call state of KV-cache generation for B rows.
type decodeState struct {
	cache                  []compute.Buffer // per layer (B, Context, 2C)
	x, ln, atty, tmp       compute.Buffer   // (B,C)
	mean, rstd             compute.Buffer   // (B)
	qkv, fch, fchG, logits compute.Buffer
	tok                    compute.IntBuffer
	all                    []any
	hostLogits             []float32
	hostTok                []int32
}

func (m *Model) newDecodeState(B int) (*decodeState, error) {
	C, V, L := m.cfg.Width, m.cfg.Vocab, m.cfg.Layers
	d := &decodeState{}
	var err error
	f := func(n int) compute.Buffer {
		if err != nil {
			return nil
		}
		var b compute.Buffer
		b, err = m.be.Alloc(n)
		d.all = append(d.all, b)
		return b
	}
	d.cache = make([]compute.Buffer, L)
	for l := range d.cache {
		d.cache[l] = f(B * m.cfg.Context * 2 * C)
	}
	d.x, d.ln, d.atty, d.tmp = f(B*C), f(B*C), f(B*C), f(B*C)
	d.mean, d.rstd = f(B), f(B)
	d.qkv, d.fch, d.fchG, d.logits = f(B*3*C), f(B*4*C), f(B*4*C), f(B*V)
	if err == nil {
		d.tok, err = m.be.AllocInt(B)
		d.all = append(d.all, d.tok)
	}
	d.hostLogits, d.hostTok = make([]float32, B*V), make([]int32, B)
	if err != nil {
		m.freeDecode(d)
		return nil, fmt.Errorf("policy: allocate KV cache for %d rows: %w", B, err)
	}
	return d, nil
}

func (m *Model) freeDecode(d *decodeState) {
	for _, b := range d.all {
		if b != nil {
			m.be.Free(b)
		}
	}
}

// transposed holds (C,OC) copies of the matmul weights for decoding on a
// backend with compute.MatmulTransposer, rebuilt when the weights change.
type transposed struct {
	ver    int
	all    compute.Buffer
	layers []struct{ qkv, attproj, fc, fcproj compute.Buffer }
	wte    compute.Buffer
}

// ensureTransposed returns up-to-date transposed weights, or nil when the
// backend lacks the extension (decoding then uses MatmulForward).
func (m *Model) ensureTransposed() (*transposed, error) {
	tb, ok := m.be.(compute.MatmulTransposer)
	if !ok {
		return nil, nil
	}
	C, V := m.cfg.Width, m.cfg.Vocab
	if m.tw == nil {
		all, err := m.be.Alloc(m.cfg.matmulParams())
		if err != nil {
			return nil, fmt.Errorf("policy: allocate transposed weights: %w", err)
		}
		tw := &transposed{ver: -1, all: all}
		off := 0
		view := func(n int) compute.Buffer {
			v, e := m.be.View(all, off, n)
			if e != nil && err == nil {
				err = e
			}
			off += n
			return v
		}
		tw.layers = make([]struct{ qkv, attproj, fc, fcproj compute.Buffer }, m.cfg.Layers)
		for l := range tw.layers {
			t := &tw.layers[l]
			t.qkv, t.attproj, t.fc, t.fcproj = view(3*C*C), view(C*C), view(4*C*C), view(4*C*C)
		}
		tw.wte = view(V * C)
		if err != nil {
			m.be.Free(all)
			return nil, fmt.Errorf("policy: transposed weight views: %w", err)
		}
		m.tw = tw
	}
	if m.tw.ver != m.wver {
		for l := range m.tw.layers {
			t, lp := &m.tw.layers[l], &m.pv.layers[l]
			tb.Transpose(t.qkv, lp.qkvw, 3*C, C)
			tb.Transpose(t.attproj, lp.attprojw, C, C)
			tb.Transpose(t.fc, lp.fcw, 4*C, C)
			tb.Transpose(t.fcproj, lp.fcprojw, C, 4*C)
		}
		tb.Transpose(m.tw.wte, m.pv.all[pWte], V, C)
		if err := m.be.Sync(); err != nil {
			return nil, fmt.Errorf("policy: transpose weights: %w", err)
		}
		m.tw.ver = m.wver
	}
	return m.tw, nil
}

// decodeStep feeds one token per row at position pos and, if wantLogits,
// leaves the next-token logits (B,V) in d.hostLogits.
func (m *Model) decodeStep(d *decodeState, tw *transposed, B, pos int, wantLogits bool) error {
	be, p := m.be, &m.pv
	C, NH, V := m.cfg.Width, m.cfg.Heads, m.cfg.Vocab
	// mm is MatmulForward, through the transposed weights when available
	mm := func(out, inp, w, wT, bias compute.Buffer, N, C, OC int) {
		if tw != nil {
			be.(compute.MatmulTransposer).MatmulForwardT(out, inp, wT, bias, N, C, OC)
		} else {
			be.MatmulForward(out, inp, w, bias, N, C, OC)
		}
	}
	var qkvT, attT, fcT, projT, wteT compute.Buffer
	be.UploadInt(d.tok, d.hostTok[:B])
	if m.wpeRows == nil { // one view per position, made once
		m.wpeRows = make([]compute.Buffer, m.cfg.Context)
		for t := range m.wpeRows {
			v, err := be.View(p.all[pWpe], t*C, C)
			if err != nil {
				m.wpeRows = nil
				return fmt.Errorf("policy: position %d: %w", t, err)
			}
			m.wpeRows[t] = v
		}
	}
	wpe := m.wpeRows[pos]
	be.EncoderForward(d.x, d.tok, p.all[pWte], wpe, B, 1, C, V)
	for l := range p.layers {
		lp := &p.layers[l]
		if tw != nil {
			t := &tw.layers[l]
			qkvT, attT, fcT, projT = t.qkv, t.attproj, t.fc, t.fcproj
		}
		be.LayerNormForward(d.ln, d.mean, d.rstd, d.x, lp.ln1w, lp.ln1b, B, C)
		mm(d.qkv, d.ln, lp.qkvw, qkvT, lp.qkvb, B, C, 3*C)
		be.AttentionDecode(d.atty, d.cache[l], d.qkv, B, m.cfg.Context, pos, C, NH)
		mm(d.tmp, d.atty, lp.attprojw, attT, lp.attprojb, B, C, C)
		be.ResidualForward(d.x, d.x, d.tmp, B*C)
		be.LayerNormForward(d.ln, d.mean, d.rstd, d.x, lp.ln2w, lp.ln2b, B, C)
		mm(d.fch, d.ln, lp.fcw, fcT, lp.fcb, B, C, 4*C)
		be.GeluForward(d.fchG, d.fch, B*4*C)
		mm(d.tmp, d.fchG, lp.fcprojw, projT, lp.fcprojb, B, 4*C, C)
		be.ResidualForward(d.x, d.x, d.tmp, B*C)
	}
	if wantLogits {
		if tw != nil {
			wteT = tw.wte
		}
		be.LayerNormForward(d.ln, d.mean, d.rstd, d.x, p.all[pLnfw], p.all[pLnfb], B, C)
		mm(d.logits, d.ln, p.all[pWte], wteT, nil, B, C, V)
		be.Download(d.hostLogits[:B*V], d.logits)
	}
	if err := be.Sync(); err != nil {
		return fmt.Errorf("policy: decode step at position %d: %w", pos, err)
	}
	return nil
}

// Generate samples a completion for every prompt, batched, with a KV cache:
// each step feeds one token per row (the row's next prompt token while its
// prompt lasts, then its last sampled token), so prompts may have different
// lengths. It returns the completions (without the prompts).
func (m *Model) Generate(prompts [][]int32, opt GenerateOptions) ([][]int32, error) {
	if err := m.checkPrompts(prompts, opt); err != nil {
		return nil, err
	}
	B, V, ctx := len(prompts), m.cfg.Vocab, m.cfg.Context
	rows := newRows(prompts, opt, ctx)
	d, err := m.newDecodeState(B)
	if err != nil {
		return nil, err
	}
	defer m.freeDecode(d)
	tw, err := m.ensureTransposed()
	if err != nil {
		return nil, err
	}
	s := newSampler(opt, B)
	for pos := 0; pos < ctx-1; pos++ {
		active, sampling := false, false
		for b := range rows {
			r := &rows[b]
			if pos < len(r.seq) {
				d.hostTok[b] = r.seq[pos]
			} else {
				d.hostTok[b] = 0 // finished row: fed filler, result ignored
			}
			if !r.done {
				active = true
				if pos == len(r.seq)-1 {
					sampling = true
				}
			}
		}
		if !active {
			break
		}
		if err := m.decodeStep(d, tw, B, pos, sampling); err != nil {
			return nil, err
		}
		if !sampling {
			continue
		}
		for b := range rows {
			r := &rows[b]
			if !r.done && pos == len(r.seq)-1 {
				r.accept(s.sample(b, d.hostLogits[b*V:(b+1)*V]), opt, ctx)
			}
		}
	}
	return completions(rows), nil
}

// generateNoCache is Generate without the KV cache: every step reruns the
// full forward pass over each row's whole sequence. It is the reference the
// cache is tested against.
func (m *Model) generateNoCache(prompts [][]int32, opt GenerateOptions) ([][]int32, error) {
	if err := m.checkPrompts(prompts, opt); err != nil {
		return nil, err
	}
	B, V, ctx := len(prompts), m.cfg.Vocab, m.cfg.Context
	rows := newRows(prompts, opt, ctx)
	s := newSampler(opt, B)
	logits := make([]float32, V)
	for {
		// every row sampling at the shortest unfinished length moves first,
		// matching the cache's position order
		minLen := -1
		for _, r := range rows {
			if !r.done && (minLen < 0 || len(r.seq) < minLen) {
				minLen = len(r.seq)
			}
		}
		if minLen < 0 {
			break
		}
		T := 0
		for _, r := range rows {
			T = max(T, len(r.seq))
		}
		if err := m.ensureActs(B, T); err != nil {
			return nil, err
		}
		in := m.a.hostIn[:B*T]
		clear(in)
		for b, r := range rows {
			copy(in[b*T:], r.seq)
		}
		m.be.UploadInt(m.a.inputs, in)
		m.forward(B, T)
		for b := range rows {
			r := &rows[b]
			if r.done || len(r.seq) != minLen {
				continue
			}
			v, err := m.be.View(m.a.logits, (b*T+len(r.seq)-1)*V, V)
			if err != nil {
				return nil, err
			}
			m.be.Download(logits, v)
			if err := m.be.Sync(); err != nil {
				return nil, err
			}
			r.accept(s.sample(b, logits), opt, ctx)
		}
	}
	return completions(rows), nil
}
