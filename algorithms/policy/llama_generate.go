package policy

import (
	"fmt"
	"math"
	"troupe/gpu/compute"
)

// prefillBudget bounds the attention probabilities (B·NH·T·T floats) of
// one prefill pass; longer batches of prompts are prefilled in row groups.
var prefillBudget = 1 << 24

func checkPrompts(prompts [][]int32, opt GenerateOptions, ctx, vocab int) error {
	if len(prompts) == 0 {
		return fmt.Errorf("%w: no prompts", ErrBatch)
	}
	if opt.MaxNewTokens < 0 {
		return fmt.Errorf("%w: MaxNewTokens=%d", ErrBatch, opt.MaxNewTokens)
	}
	if opt.TopK < 0 || opt.TopP < 0 || opt.TopP > 1 || math.IsNaN(float64(opt.TopP)) || math.IsNaN(float64(opt.Temperature)) {
		return fmt.Errorf("%w: TopK=%d TopP=%v Temperature=%v", ErrBatch, opt.TopK, opt.TopP, opt.Temperature)
	}
	for b, p := range prompts {
		if len(p) == 0 || len(p) > ctx {
			return fmt.Errorf("%w: prompt %d has %d tokens, want 1..%d", ErrBatch, b, len(p), ctx)
		}
		for i, id := range p {
			if id < 0 || int(id) >= vocab {
				return fmt.Errorf("%w: prompt %d token %d is %d, vocab %d", ErrBatch, b, i, id, vocab)
			}
		}
	}
	return nil
}

// ldecode is the per-call state of KV-cache generation for B rows.
type ldecode struct {
	B, maxT int
	cache   []compute.Buffer // per layer (B, maxT, 2, KVH, HD)
	x, ln   compute.Buffer   // (B,C)
	tmp     compute.Buffer   // (B,C)
	r       compute.Buffer   // (B)
	q, qr   compute.Buffer   // (B,QD)
	k, v    compute.Buffer   // (B,KD)
	kr      compute.Buffer   // (B,KD)
	rq, rk  compute.Buffer   // (B*NH), (B*KVH)
	o       compute.Buffer   // (B,QD)
	gate    compute.Buffer   // (B,I)
	up, act compute.Buffer   // (B,I)
	gu      compute.Buffer   // (B,2I) with gate, up its halves, where packable
	logits  compute.Buffer   // (B,V)
	tok     compute.IntBuffer
	pos     compute.IntBuffer
	all     []any

	rows []*Adapter // each row's adapter (nil: none), rows ordered by adapter
	la   *loraActs  // the adapters' scratch for B rows

	hostLogits       []float32
	hostTok, hostPos []int32
}

func (m *Llama) newDecode(B, maxT int) (*ldecode, error) {
	if k := m.kept; k != nil {
		m.kept = nil
		if k.B == B && k.maxT >= maxT && k.la == nil && !m.hasAdapters() {
			k.rows = nil
			return k, nil // positions past a row's own are never read
		}
		m.freeDecode(k)
	}
	ar := &m.arch
	C, V, I, QD, KD := ar.C, ar.V, ar.I, ar.NH*ar.HD, ar.KVH*ar.HD
	d := &ldecode{B: B, maxT: maxT}
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
	fi := func(n int) compute.IntBuffer {
		if err != nil {
			return nil
		}
		var b compute.IntBuffer
		b, err = m.be.AllocInt(n)
		d.all = append(d.all, b)
		return b
	}
	d.cache = make([]compute.Buffer, ar.L)
	for l := range d.cache {
		d.cache[l] = f(B * maxT * 2 * KD)
	}
	d.x, d.ln, d.tmp, d.r = f(B*C), f(B*C), f(B*C), f(B)
	d.q, d.k, d.v, d.o = f(B*QD), f(B*KD), f(B*KD), f(B*QD)
	if ar.qkNorm {
		d.qr, d.kr, d.rq, d.rk = f(B*QD), f(B*KD), f(B*ar.NH), f(B*ar.KVH)
	}
	d.act, d.logits = f(B*I), f(B*V)
	if m.packable() {
		d.gu = f(2 * B * I)
		if err == nil {
			d.gate, d.up = view(m.be, d.gu, 0, B*I), view(m.be, d.gu, B*I, B*I)
		}
	} else {
		d.gate, d.up = f(B*I), f(B*I)
	}
	d.tok, d.pos = fi(B), fi(B)
	d.hostLogits, d.hostTok, d.hostPos = make([]float32, B*V), make([]int32, B), make([]int32, B)
	if err == nil && m.hasAdapters() {
		mask, maxR, maxOut := m.loraNeeds()
		d.la, err = m.newLoraActs(B, false, mask, maxR, maxOut)
	}
	if err != nil {
		m.freeDecode(d)
		return nil, fmt.Errorf("policy: allocate KV cache for %d rows of %d positions: %w", B, maxT, err)
	}
	return d, nil
}

// keepDecode keeps d for the next newDecode (see Llama.kept), or frees it
// when it holds adapter scratch.
func (m *Llama) keepDecode(d *ldecode) {
	if d.la != nil {
		m.freeDecode(d)
		return
	}
	d.rows = nil
	m.kept = d
}

func (m *Llama) freeDecode(d *ldecode) {
	for _, b := range d.all {
		if b != nil {
			m.be.Free(b)
		}
	}
	if d.la != nil {
		for _, b := range d.la.all {
			m.be.Free(b)
		}
	}
}

// ltransposed holds (C,OC) copies of the matmul weights for decoding on a
// backend with compute.MatmulTransposer (a matrix-vector product then reads a
// weight in place), rebuilt when the weights change.
type ltransposed struct {
	mm     compute.MatmulTransposer // the backend's
	ver    int
	all    compute.Buffer
	layers []struct{ q, k, v, o, gate, up, down compute.Buffer }
	head   compute.Buffer
}

func (m *Llama) freeTransposed() {
	if m.tw != nil {
		m.be.Free(m.tw.all)
		m.tw = nil
	}
}

// ensureTransposed returns up-to-date transposed weights, or nil when the
// backend lacks the capability or DecodeTransposed is off.
func (m *Llama) ensureTransposed() (*ltransposed, error) {
	tb, ok := compute.As[compute.MatmulTransposer](m.be)
	if !ok || !m.DecodeTransposed || m.bf != nil || m.amp != nil { // BF16: the matmuls read BF16 matrices
		m.freeTransposed()
		return nil, nil
	}
	ar := &m.arch
	C, V, I, QD, KD := ar.C, ar.V, ar.I, ar.NH*ar.HD, ar.KVH*ar.HD
	if m.tw == nil {
		all, err := m.be.Alloc(ar.matmulParams())
		if err != nil {
			return nil, fmt.Errorf("policy: allocate transposed weights: %w", err)
		}
		tw := &ltransposed{mm: tb, ver: -1, all: all}
		off := 0
		v := func(n int) compute.Buffer {
			x, e := m.be.View(all, off, n)
			if e != nil && err == nil {
				err = e
			}
			off += n
			return x
		}
		tw.layers = make([]struct{ q, k, v, o, gate, up, down compute.Buffer }, ar.L)
		for l := range tw.layers {
			t := &tw.layers[l]
			t.q, t.k, t.v, t.o = v(QD*C), v(KD*C), v(KD*C), v(C*QD)
			t.gate, t.up, t.down = v(I*C), v(I*C), v(C*I)
		}
		tw.head = v(V * C)
		if err != nil {
			m.be.Free(all)
			return nil, fmt.Errorf("policy: transposed weight views: %w", err)
		}
		m.tw = tw
	}
	if m.tw.ver != m.wver {
		for l := range m.tw.layers {
			t, lp := &m.tw.layers[l], &m.pv.layers[l]
			tb.Transpose(t.q, lp.q, QD, C)
			tb.Transpose(t.k, lp.k, KD, C)
			tb.Transpose(t.v, lp.v, KD, C)
			tb.Transpose(t.o, lp.o, C, QD)
			tb.Transpose(t.gate, lp.gate, I, C)
			tb.Transpose(t.up, lp.up, I, C)
			tb.Transpose(t.down, lp.down, C, I)
		}
		tb.Transpose(m.tw.head, m.pv.head, V, C)
		if err := m.be.Sync(); err != nil {
			return nil, fmt.Errorf("policy: transpose weights: %w", err)
		}
		m.tw.ver = m.wver
	}
	return m.tw, nil
}

// decodeStep feeds d.hostTok[b] at position d.hostPos[b] for every row and
// leaves the next-token logits (B,V) in d.hostLogits.
func (m *Llama) decodeStep(d *ldecode, tw *ltransposed) error {
	be := m.be
	be.UploadInt(d.tok, d.hostTok)
	be.UploadInt(d.pos, d.hostPos)
	m.embedForward(d.x, d.tok, d.hostTok, d.B)
	m.setGroups(d.rows, 1)
	for l := range m.pv.layers {
		m.decodeLayer(d, tw, l)
	}
	return m.decodeHead(d, tw)
}

// decodeLayer runs block l on one position a row: d.x (B,C) at positions
// d.pos, its key and value written into the cache there, attending over
// the cache up to it; d.x becomes the block's output.
func (m *Llama) decodeLayer(d *ldecode, tw *ltransposed, l int) {
	be, ar := m.be, &m.arch
	B := d.B
	C, I, NH, KVH, HD := ar.C, ar.I, ar.NH, ar.KVH, ar.HD
	QD, KD := NH*HD, KVH*HD
	scale := float32(1 / math.Sqrt(float64(HD)))
	mm := func(k int, out, inp, w, wT, bias compute.Buffer, C, OC int) {
		if m.bf != nil || m.amp != nil {
			m.baseForward(l, k, out, inp, w, bias, B, C, OC)
		} else if tw != nil {
			tw.mm.MatmulForwardT(out, inp, wT, bias, B, C, OC)
		} else {
			be.MatmulForward(out, inp, w, bias, B, C, OC)
		}
	}
	rope := m.rope
	lf := func(t int, y, x compute.Buffer) { m.loraForward(d.la, l, t, y, x) }
	var tq, tk, tv, to, tg, tu, td compute.Buffer
	lp := m.layerWeights(l)
	if tw != nil {
		t := &tw.layers[l]
		tq, tk, tv, to, tg, tu, td = t.q, t.k, t.v, t.o, t.gate, t.up, t.down
	}
	be.RMSNormForward(d.ln, d.r, d.x, lp.attnNorm, B, C, ar.eps)
	fr := m.fu.rope // RoPE on q and k at once, after the head norms (llama_fused.go)
	if ar.qkNorm {
		mm(kQ, d.qr, d.ln, lp.q, tq, lp.qb, C, QD)
		lf(tQ, d.qr, d.ln)
		mm(kK, d.kr, d.ln, lp.k, tk, lp.kb, C, KD)
		lf(tK, d.kr, d.ln)
		if fr != nil {
			fr.HeadNormRopeForward(d.q, d.rq, d.qr, lp.qNorm, d.pos, rope.cos, rope.sin, B, NH, HD, rope.n, ar.eps)
			fr.HeadNormRopeForward(d.k, d.rk, d.kr, lp.kNorm, d.pos, rope.cos, rope.sin, B, KVH, HD, rope.n, ar.eps)
		} else {
			be.RMSNormForward(d.q, d.rq, d.qr, lp.qNorm, B*NH, HD, ar.eps)
			be.RMSNormForward(d.k, d.rk, d.kr, lp.kNorm, B*KVH, HD, ar.eps)
		}
	} else {
		mm(kQ, d.q, d.ln, lp.q, tq, lp.qb, C, QD)
		lf(tQ, d.q, d.ln)
		mm(kK, d.k, d.ln, lp.k, tk, lp.kb, C, KD)
		lf(tK, d.k, d.ln)
	}
	mm(kV, d.v, d.ln, lp.v, tv, lp.vb, C, KD)
	lf(tV, d.v, d.ln)
	switch {
	case fr != nil && ar.qkNorm: // rotated with their norms
	case fr != nil:
		fr.RopeQKForward(d.q, d.k, d.pos, rope.cos, rope.sin, B, NH, KVH, HD, rope.n)
	default:
		be.RopeForward(d.q, d.pos, rope.cos, rope.sin, B, NH, HD, rope.n)
		be.RopeForward(d.k, d.pos, rope.cos, rope.sin, B, KVH, HD, rope.n)
	}
	be.GQAttentionDecode(d.o, d.cache[l], d.q, d.k, d.v, d.pos, B, d.maxT, NH, KVH, HD, scale)
	mm(kO, d.tmp, d.o, lp.o, to, lp.ob, QD, C)
	lf(tO, d.tmp, d.o)
	m.residualNorm(d.x, d.ln, d.r, d.x, d.tmp, lp.mlpNorm, B, C)
	if m.packedMLP() {
		m.mlpGateUpForward(l, d.act, d.gu, d.ln, B)
	} else {
		mm(kGate, d.gate, d.ln, lp.gate, tg, lp.gateb, C, I)
		lf(tGate, d.gate, d.ln)
		mm(kUp, d.up, d.ln, lp.up, tu, lp.upb, C, I)
		lf(tUp, d.up, d.ln)
		be.SwiGLUForward(d.act, d.gate, d.up, B*I)
	}
	mm(kDown, d.tmp, d.act, lp.down, td, lp.downb, I, C)
	lf(tDown, d.tmp, d.act)
	be.ResidualForward(d.x, d.x, d.tmp, B*C)
}

// decodeHead runs the final norm and the head (tw's transposed copy when
// tw is not nil) on d.x and downloads the logits.
func (m *Llama) decodeHead(d *ldecode, tw *ltransposed) error {
	be, ar, B := m.be, &m.arch, d.B
	be.RMSNormForward(d.ln, d.r, d.x, m.pv.all[kNorm], B, ar.C, ar.eps)
	if tw != nil {
		tw.mm.MatmulForwardT(d.logits, d.ln, tw.head, nil, B, ar.C, ar.V)
	} else {
		m.headMatmul(d.logits, d.ln, B)
	}
	be.Download(d.hostLogits, d.logits)
	if err := be.Sync(); err != nil {
		return fmt.Errorf("policy: decode step: %w", err)
	}
	return nil
}

// prefill runs the prompts through the forward pass in row groups and
// writes every prompt position's k and v into the cache. The last block
// runs in full only at each row's last position (decodeLayer, after all
// groups): the rest of its work would feed positions nobody reads. It
// leaves each row's last hidden state in d.x; decodeHead then gives the
// first logits.
func (m *Llama) prefill(d *ldecode, tw *ltransposed, prompts [][]int32) error {
	be, ar := m.be, &m.arch
	KD, C := ar.KVH*ar.HD, ar.C
	for b0 := 0; b0 < len(prompts); {
		T := len(prompts[b0])
		b1 := b0 + 1
		for ; b1 < len(prompts); b1++ {
			t := max(T, len(prompts[b1]))
			if (b1-b0+1)*ar.NH*t*t > prefillBudget {
				break
			}
			T = t
		}
		rows := prompts[b0:b1]
		B := len(rows)
		if err := m.ensureActs(B, T, false); err != nil {
			return err
		}
		if _, err := m.ensureRope(T); err != nil {
			return err
		}
		a := m.a
		in, pos := a.hostIn[:B*T], a.hostPos[:B*T]
		for b, p := range rows {
			for t := 0; t < T; t++ {
				pos[b*T+t] = int32(t)
				in[b*T+t] = 0
				if t < len(p) {
					in[b*T+t] = p[t]
				}
			}
		}
		m.uploadTokens(in, pos)
		var ads []*Adapter
		if d.rows != nil {
			ads = d.rows[b0:b1]
		}
		m.setGroups(ads, T)
		x := m.forwardLayers(B, T, true, func(l int, k, v compute.Buffer) {
			for b, p := range rows {
				for t := range p {
					dst := ((b0+b)*d.maxT + t) * 2 * KD
					be.Copy(view(be, d.cache[l], dst, KD), view(be, k, (b*T+t)*KD, KD), KD)
					be.Copy(view(be, d.cache[l], dst+KD, KD), view(be, v, (b*T+t)*KD, KD), KD)
				}
			}
		})
		for b, p := range rows {
			be.Copy(view(be, d.x, (b0+b)*C, C), view(be, x, (b*T+len(p)-1)*C, C), C)
		}
		if err := be.Sync(); err != nil {
			return fmt.Errorf("policy: prefill: %w", err)
		}
		b0 = b1
	}
	for b, p := range prompts {
		d.hostPos[b] = int32(len(p) - 1)
	}
	m.be.UploadInt(d.pos, d.hostPos)
	m.setGroups(d.rows, 1)
	m.decodeLayer(d, tw, len(m.pv.layers)-1)
	if err := be.Sync(); err != nil {
		return fmt.Errorf("policy: prefill: %w", err)
	}
	return nil
}

// Generate samples a completion for every prompt, batched: one forward
// pass over the prompts fills a KV cache (rows of different lengths are
// padded; causal attention keeps the padding out), then each step feeds
// every row its last token at the row's own position. It returns the
// completions (without the prompts). Sampling follows opt: temperature
// (<= 0 greedy), top-k, top-p, per-row seeds (Seed, row), stop tokens,
// VocabLimit.
func (m *Llama) Generate(prompts [][]int32, opt GenerateOptions) ([][]int32, error) {
	ctx, V := m.arch.ctx, m.arch.V
	if err := checkPrompts(prompts, opt, ctx, V); err != nil {
		return nil, err
	}
	B := len(prompts)
	ads, slot, err := m.planRows(opt.Adapters, B)
	if err != nil {
		return nil, err
	}
	if slot != nil { // rows ordered by adapter; seeds and results follow the rows
		out, err := m.Generate(toSlots(prompts, slot), slotOptions(opt, slot))
		return fromSlots(out, slot), err
	}
	rows := newRows(prompts, opt, ctx)
	maxT := 0
	for _, p := range prompts {
		maxT = max(maxT, min(ctx, len(p)+opt.MaxNewTokens))
	}
	active := false
	for _, r := range rows {
		active = active || !r.done
	}
	if !active {
		return completions(rows), nil
	}
	if _, err := m.ensureRope(maxT); err != nil {
		return nil, err
	}
	d, err := m.newDecode(B, maxT)
	if err != nil {
		return nil, err
	}
	defer m.keepDecode(d)
	d.rows = ads
	tw, err := m.ensureTransposed()
	if err != nil {
		return nil, err
	}
	if err := m.prefill(d, tw, prompts); err != nil {
		return nil, err
	}
	if err := m.decodeHead(d, tw); err != nil {
		return nil, err
	}
	s := newSampler(opt, B)
	for {
		active := false
		for b := range rows {
			r := &rows[b]
			if !r.done {
				r.accept(s.sample(b, d.hostLogits[b*V:(b+1)*V]), opt, ctx)
			}
			// finished rows are fed filler at their last position (the
			// cache write there is harmless) and their logits ignored
			d.hostTok[b], d.hostPos[b] = 0, int32(min(len(r.seq)-1, maxT-1))
			if !r.done {
				active = true
				d.hostTok[b] = r.seq[len(r.seq)-1]
			}
		}
		if !active {
			break
		}
		if err := m.decodeStep(d, tw); err != nil {
			return nil, err
		}
	}
	return completions(rows), nil
}

// generateNoCache is Generate without the KV cache: every step reruns the
// full forward pass over each row's whole sequence. It is the reference the
// cache is tested against.
func (m *Llama) generateNoCache(prompts [][]int32, opt GenerateOptions) ([][]int32, error) {
	ctx, V, C := m.arch.ctx, m.arch.V, m.arch.C
	if err := checkPrompts(prompts, opt, ctx, V); err != nil {
		return nil, err
	}
	B := len(prompts)
	ads, slot, err := m.planRows(opt.Adapters, B)
	if err != nil {
		return nil, err
	}
	if slot != nil {
		out, err := m.generateNoCache(toSlots(prompts, slot), slotOptions(opt, slot))
		return fromSlots(out, slot), err
	}
	rows := newRows(prompts, opt, ctx)
	s := newSampler(opt, B)
	logits := make([]float32, V)
	for {
		T, active := 0, false
		for _, r := range rows {
			T = max(T, len(r.seq))
			active = active || !r.done
		}
		if !active {
			break
		}
		if err := m.ensureActs(B, T, false); err != nil {
			return nil, err
		}
		if _, err := m.ensureRope(T); err != nil {
			return nil, err
		}
		a := m.a
		in, pos := a.hostIn[:B*T], a.hostPos[:B*T]
		clear(in)
		for b, r := range rows {
			copy(in[b*T:], r.seq)
			for t := 0; t < T; t++ {
				pos[b*T+t] = int32(t)
			}
		}
		m.uploadTokens(in, pos)
		m.setGroups(ads, T)
		m.forward(B, T)
		lg := view(m.be, a.logits, 0, V)
		for b := range rows {
			r := &rows[b]
			if r.done {
				continue
			}
			m.headMatmul(lg, view(m.be, a.lnf, (b*T+len(r.seq)-1)*C, C), 1)
			m.be.Download(logits, lg)
			if err := m.be.Sync(); err != nil {
				return nil, err
			}
			r.accept(s.sample(b, logits), opt, ctx)
		}
	}
	return completions(rows), nil
}

// slotOptions are opt for rows moved to slots: each slot keeps its row's
// adapter and random stream.
func slotOptions(opt GenerateOptions, slot []int) GenerateOptions {
	rs := make([]int, len(slot))
	for b, s := range slot {
		rs[s] = b
		if opt.rowSeeds != nil {
			rs[s] = opt.rowSeeds[b]
		}
	}
	opt.rowSeeds = rs
	opt.Adapters = toSlots(opt.Adapters, slot)
	return opt
}

// toSlots returns x with x[b] moved to slot[b].
func toSlots[T any](x []T, slot []int) []T {
	if x == nil {
		return nil
	}
	out := make([]T, len(x))
	for b, s := range slot {
		out[s] = x[b]
	}
	return out
}

// fromSlots undoes toSlots.
func fromSlots[T any](x []T, slot []int) []T {
	if x == nil {
		return nil
	}
	out := make([]T, len(x))
	for b, s := range slot {
		out[b] = x[s]
	}
	return out
}
