package policy

import (
	"fmt"
	"math"
	"troupe/gpu/compute"
)

// headBudget bounds the floats of one chunk of output-head logits. A large
// vocabulary (Qwen's 151936) times thousands of tokens would take
// gigabytes, so the head runs over row chunks of at most headBudget/V rows;
// when a batch needs more than one chunk the backward recomputes each
// chunk's logits (one extra head matmul) instead of keeping them all.
var headBudget = 1 << 25

// lacts holds a Llama's activations for up to capBT tokens and the
// backward's scratch, reused across calls.
type lacts struct {
	capBT, capAtt int
	train         bool // per-layer activations kept for a backward
	B, T          int  // shape of the last load

	x0     compute.Buffer // embedding output (N,C)
	layers []llayerActs
	lnf    compute.Buffer // final norm output (N,C)
	rf     compute.Buffer // (N)

	// output head, in chunks of R rows
	R               int
	logits          compute.Buffer      // (R,V); probabilities after a loss head (logits with the LSE heads)
	lse             compute.Buffer      // (N) each row's log-sum-exp, with the LSE heads only
	targets         []compute.IntBuffer // one (R) per chunk
	losses, dlosses compute.Buffer      // (N)
	inputs, pos     compute.IntBuffer   // (N)

	// backward scratch (N rows)
	dres, dl, dI1, dI2, dI3, dO, dq, dk, dv, dqr, dkr, dlogits compute.Buffer
	dgu                                                        compute.Buffer // (N,2I) with dI2, dI3 its halves, where packable
	viewN                                                      int
	bv                                                         lbackViews

	hostIn, hostTg, hostPos []int32
	hostW, hostOut          []float32
	all                     []any

	slot []int // slot[b]: where the last load put batch row b (nil: at b)
}

// lbackViews are views of the backward scratch at exactly N rows (Zero
// clears whole buffers, so a smaller batch must not pay for the capacity).
type lbackViews struct {
	dres, dl, dI1, dI2, dI3, dO, dq, dk, dv, dqr, dkr compute.Buffer
}

// llayerActs are one layer's saved activations. In inference mode every
// layer shares one set (see ensureActs).
type llayerActs struct {
	ln1, r1        compute.Buffer // attention input norm (N,C), rstd (N)
	qr, kr, rq, rk compute.Buffer // Qwen3: q, k before their norm, and the norms' rstd
	q, k, v        compute.Buffer // (N,QD), (N,KD), (N,KD); q, k after RoPE
	att            compute.Buffer // (B,NH,T,T); (B,NH,T) log-sum-exp with flash attention
	o              compute.Buffer // attention output (N,QD)
	res2           compute.Buffer // residual after attention (N,C)
	ln2, r2        compute.Buffer // MLP input norm
	gate, up, act  compute.Buffer // (N,I)
	gu             compute.Buffer // (N,2I) with gate, up its halves, where packable
	res3           compute.Buffer // residual after the MLP (N,C): the next layer's input
}

func (m *Llama) freeActs() {
	if m.a == nil {
		return
	}
	for _, b := range m.a.all {
		if b != nil {
			m.be.Free(b)
		}
	}
	m.a = nil
}

// ensureActs makes sure activations for B×T tokens exist; train asks for a
// separate set per layer (kept for the backward), otherwise all layers
// share one (a forward-only pass needs only the current layer's). The
// adapters' activations, if any, are sized alike.
func (m *Llama) ensureActs(B, T int, train bool) error {
	if err := m.ensureBaseActs(B, T, train); err != nil {
		return err
	}
	return m.ensureLoraActs(B*T, train)
}

func (m *Llama) ensureBaseActs(B, T int, train bool) error {
	BT, att := B*T, m.attSize(B, T)
	if a := m.a; a != nil && a.capBT >= BT && a.capAtt >= att && (a.train || !train) {
		return nil
	}
	if m.a != nil { // grow to cover the old and the new shape
		BT, att = max(BT, m.a.capBT), max(att, m.a.capAtt)
		train = train || m.a.train
		m.freeActs()
	}
	ar := &m.arch
	C, V, I, QD, KD := ar.C, ar.V, ar.I, ar.NH*ar.HD, ar.KVH*ar.HD
	a := &lacts{capBT: BT, capAtt: att, train: train}
	var err error
	f := func(n int) compute.Buffer {
		if err != nil {
			return nil
		}
		var b compute.Buffer
		b, err = m.be.Alloc(n)
		a.all = append(a.all, b)
		return b
	}
	fi := func(n int) compute.IntBuffer {
		if err != nil {
			return nil
		}
		var b compute.IntBuffer
		b, err = m.be.AllocInt(n)
		a.all = append(a.all, b)
		return b
	}
	layer := func() llayerActs {
		la := llayerActs{
			ln1: f(BT * C), r1: f(BT), q: f(BT * QD), k: f(BT * KD), v: f(BT * KD), att: f(att), o: f(BT * QD),
			res2: f(BT * C), ln2: f(BT * C), r2: f(BT), act: f(BT * I), res3: f(BT * C),
		}
		if m.packable() {
			la.gu = f(2 * BT * I)
			if err == nil {
				la.gate, la.up = view(m.be, la.gu, 0, BT*I), view(m.be, la.gu, BT*I, BT*I)
			}
		} else {
			la.gate, la.up = f(BT*I), f(BT*I)
		}
		if ar.qkNorm {
			la.qr, la.kr, la.rq, la.rk = f(BT*QD), f(BT*KD), f(BT*ar.NH), f(BT*ar.KVH)
		}
		return la
	}
	a.x0 = f(BT * C)
	a.layers = make([]llayerActs, ar.L)
	for l := range a.layers {
		if train || l == 0 {
			a.layers[l] = layer()
		} else {
			a.layers[l] = a.layers[0]
		}
	}
	a.lnf, a.rf = f(BT*C), f(BT)
	a.R = min(BT, max(1, headBudget/V))
	a.logits = f(a.R * V)
	a.losses, a.dlosses = f(BT), f(BT)
	if m.fu.loss != nil {
		a.lse = f(BT)
	}
	a.inputs, a.pos = fi(BT), fi(BT)
	for r := 0; r < BT; r += a.R {
		a.targets = append(a.targets, fi(a.R))
	}
	a.hostIn, a.hostTg, a.hostPos = make([]int32, BT), make([]int32, BT), make([]int32, BT)
	a.hostW, a.hostOut = make([]float32, BT), make([]float32, BT)
	m.a = a
	if err != nil {
		m.freeActs()
		return fmt.Errorf("policy: allocate activations for %d tokens: %w", BT, err)
	}
	return nil
}

// ensureBackward allocates gradients and the backward scratch. A frozen
// base gets no gradient buffers: its views stay nil, which the ops take as
// "skip this gradient".
func (m *Llama) ensureBackward() error {
	if m.frozen() {
		if m.gv.layers == nil {
			m.gv = lviews{layers: make([]llayerViews, m.arch.L)}
		}
		if err := m.ensureAdapterGrads(); err != nil {
			return err
		}
	} else if m.grads == nil {
		var err error
		if m.grads, m.gv, err = m.allocParams("gradients"); err != nil {
			return err
		}
	}
	a := m.a
	if a.dres != nil {
		return nil
	}
	ar := &m.arch
	C, V, I, QD, KD, BT := ar.C, ar.V, ar.I, ar.NH*ar.HD, ar.KVH*ar.HD, a.capBT
	var err error
	f := func(n int) compute.Buffer {
		if err != nil {
			return nil
		}
		var b compute.Buffer
		b, err = m.be.Alloc(n)
		a.all = append(a.all, b)
		return b
	}
	a.dres, a.dl, a.dI1 = f(BT*C), f(BT*C), f(BT*I)
	if m.packable() {
		a.dgu = f(2 * BT * I)
		if err == nil {
			a.dI2, a.dI3 = view(m.be, a.dgu, 0, BT*I), view(m.be, a.dgu, BT*I, BT*I)
		}
	} else {
		a.dI2, a.dI3 = f(BT*I), f(BT*I)
	}
	a.dO, a.dq, a.dk, a.dv = f(BT*QD), f(BT*QD), f(BT*KD), f(BT*KD)
	if ar.qkNorm {
		a.dqr, a.dkr = f(BT*QD), f(BT*KD)
	}
	if m.fu.loss == nil { // the LSE heads write the gradient over the logits
		a.dlogits = f(a.R * V)
	}
	if err != nil {
		return fmt.Errorf("policy: allocate backward scratch: %w", err)
	}
	a.viewN = 0
	return nil
}

// checkBatch validates a batch against a context length and vocabulary and
// returns B and the padded T (the longest row's predictions).
func checkBatch(batch Batch, ctx, vocab int) (int, int, error) {
	B := len(batch.Tokens)
	if B == 0 {
		return 0, 0, fmt.Errorf("%w: no sequences", ErrBatch)
	}
	if batch.Weights != nil && len(batch.Weights) != B {
		return 0, 0, fmt.Errorf("%w: %d weight rows for %d sequences", ErrBatch, len(batch.Weights), B)
	}
	T := 0
	for b, seq := range batch.Tokens {
		if len(seq) < 2 || len(seq) > ctx+1 {
			return 0, 0, fmt.Errorf("%w: sequence %d has %d tokens, want 2..%d", ErrBatch, b, len(seq), ctx+1)
		}
		for i, id := range seq {
			if id < 0 || int(id) >= vocab {
				return 0, 0, fmt.Errorf("%w: sequence %d token %d is %d, vocab %d", ErrBatch, b, i, id, vocab)
			}
		}
		if batch.Weights != nil && len(batch.Weights[b]) != len(seq)-1 {
			return 0, 0, fmt.Errorf("%w: sequence %d has %d weights for %d predictions", ErrBatch, b, len(batch.Weights[b]), len(seq)-1)
		}
		T = max(T, len(seq)-1)
	}
	return B, T, nil
}

// load validates a batch and uploads inputs, positions, targets and
// per-prediction weights (padding gets weight 0). It returns B and T.
// Rows are stored in slots ordered by adapter (a.slot, see planRows).
func (m *Llama) load(batch Batch, train bool) (int, int, error) {
	B, T, err := checkBatch(batch, m.arch.ctx, m.arch.V)
	if err != nil {
		return 0, 0, err
	}
	rows, slot, err := m.planRows(batch.Adapters, B)
	if err != nil {
		return 0, 0, err
	}
	if err := m.ensureActs(B, T, train); err != nil {
		return 0, 0, err
	}
	if _, err := m.ensureRope(T); err != nil {
		return 0, 0, err
	}
	a := m.a
	N := B * T
	in, tg, w, pos := a.hostIn[:N], a.hostTg[:N], a.hostW[:N], a.hostPos[:N]
	for b, seq := range batch.Tokens {
		n, s := len(seq)-1, b
		if slot != nil {
			s = slot[b]
		}
		copy(in[s*T:], seq[:n])
		copy(tg[s*T:], seq[1:])
		for t := 0; t < T; t++ {
			pos[s*T+t] = int32(t)
			switch {
			case t >= n:
				in[s*T+t], tg[s*T+t], w[s*T+t] = 0, 0, 0
			case batch.Weights != nil:
				w[s*T+t] = batch.Weights[b][t]
			default:
				w[s*T+t] = 1
			}
		}
	}
	a.slot = slot
	m.setGroups(rows, T)
	m.uploadTokens(in, pos)
	for c, r0 := 0, 0; r0 < N; c, r0 = c+1, r0+a.R {
		m.be.UploadInt(a.targets[c], tg[r0:min(N, r0+a.R)])
	}
	a.B, a.T = B, T
	return B, T, nil
}

func (m *Llama) uploadTokens(in, pos []int32) {
	m.be.UploadInt(m.a.inputs, in)
	m.be.UploadInt(m.a.pos, pos)
}

// view is be.View that records the first error on the backend's behalf:
// a failed view is returned as the parent, whose op then fails with a
// shape error (the sticky-error convention).
func view(be compute.Backend, b compute.Buffer, off, n int) compute.Buffer {
	v, err := be.View(b, off, n)
	if err != nil {
		return b
	}
	return v
}

// forwardLayers runs the embedding and all blocks over the loaded B×T
// tokens and returns the last residual stream (N,C). kv, if not nil, is
// called after each layer's k and v are final (RoPE applied), to fill a KV
// cache. With kvOnlyLast the last block stops there: it returns the last
// block's input instead, for a prefill that needs the block's output at one
// position a row only (Llama.prefill; llama.cpp skips the same work).
func (m *Llama) forwardLayers(B, T int, kvOnlyLast bool, kv func(l int, k, v compute.Buffer)) compute.Buffer {
	return m.forwardBlocks(B, T, kvOnlyLast, kv, false)
}

// forwardBlocks is forwardLayers; with final (and not kvOnlyLast) it also
// runs the final norm into a.lnf and a.rf. Each residual add and the norm
// after it run as one ResidualRMSNormForward where the backend has it: the
// MLP's norm, the next block's input norm, the final norm.
func (m *Llama) forwardBlocks(B, T int, kvOnlyLast bool, kv func(l int, k, v compute.Buffer), final bool) compute.Buffer {
	be, a, ar, fu := m.be, m.a, &m.arch, &m.fu
	C, I, NH, KVH, HD := ar.C, ar.I, ar.NH, ar.KVH, ar.HD
	QD, KD, N := NH*HD, KVH*HD, B*T
	rope := m.rope // ensureRope(T) was called by the caller
	scale := float32(1 / math.Sqrt(float64(HD)))
	m.embedForward(a.x0, a.inputs, a.hostIn[:N], N)
	x := a.x0
	normed := false // this block's ln1 and r1 were written by the previous block's fused add
	for l := range a.layers {
		la, lp := &a.layers[l], m.layerWeights(l)
		kvOnly := kvOnlyLast && l == len(a.layers)-1
		if !normed {
			be.RMSNormForward(la.ln1, la.r1, x, lp.attnNorm, N, C, ar.eps)
		}
		normed = false
		if !kvOnly {
			if ar.qkNorm {
				m.baseForward(l, kQ, la.qr, la.ln1, lp.q, lp.qb, N, C, QD)
				m.loraForward(m.la, l, tQ, la.qr, la.ln1)
				if fu.rope != nil {
					fu.rope.HeadNormRopeForward(la.q, la.rq, la.qr, lp.qNorm, a.pos, rope.cos, rope.sin, N, NH, HD, rope.n, ar.eps)
				} else {
					be.RMSNormForward(la.q, la.rq, la.qr, lp.qNorm, N*NH, HD, ar.eps)
				}
			} else {
				m.baseForward(l, kQ, la.q, la.ln1, lp.q, lp.qb, N, C, QD)
				m.loraForward(m.la, l, tQ, la.q, la.ln1)
			}
		}
		if ar.qkNorm {
			m.baseForward(l, kK, la.kr, la.ln1, lp.k, lp.kb, N, C, KD)
			m.loraForward(m.la, l, tK, la.kr, la.ln1)
			if fu.rope != nil {
				fu.rope.HeadNormRopeForward(la.k, la.rk, la.kr, lp.kNorm, a.pos, rope.cos, rope.sin, N, KVH, HD, rope.n, ar.eps)
			} else {
				be.RMSNormForward(la.k, la.rk, la.kr, lp.kNorm, N*KVH, HD, ar.eps)
			}
		} else {
			m.baseForward(l, kK, la.k, la.ln1, lp.k, lp.kb, N, C, KD)
			m.loraForward(m.la, l, tK, la.k, la.ln1)
		}
		m.baseForward(l, kV, la.v, la.ln1, lp.v, lp.vb, N, C, KD)
		m.loraForward(m.la, l, tV, la.v, la.ln1)
		switch {
		case fu.rope != nil && ar.qkNorm: // rotated with their norms
		case fu.rope != nil && !kvOnly:
			fu.rope.RopeQKForward(la.q, la.k, a.pos, rope.cos, rope.sin, N, NH, KVH, HD, rope.n)
		default:
			if !kvOnly {
				be.RopeForward(la.q, a.pos, rope.cos, rope.sin, N, NH, HD, rope.n)
			}
			be.RopeForward(la.k, a.pos, rope.cos, rope.sin, N, KVH, HD, rope.n)
		}
		if kv != nil {
			kv(l, la.k, la.v)
		}
		if kvOnly {
			return x
		}
		switch {
		case m.amp != nil && m.flashAttn(): // BF16 products, la.att the log-sum-exp
			fu.flashBF16.FlashAttentionForwardBF16(la.o, la.att, la.q, la.k, la.v, B, T, NH, KVH, HD, scale)
		case m.amp != nil: // autocast runs attention's products in BF16 too
			m.amp.mm.GQAttentionForwardBF16(la.o, la.att, la.q, la.k, la.v, B, T, NH, KVH, HD, scale)
		case m.flashAttn(): // la.att is the log-sum-exp; the backward also reads la.o
			fu.flash.FlashAttentionForward(la.o, la.att, la.q, la.k, la.v, B, T, NH, KVH, HD, scale)
		default:
			be.GQAttentionForward(la.o, la.att, la.q, la.k, la.v, B, T, NH, KVH, HD, scale)
		}
		m.baseForward(l, kO, la.res2, la.o, lp.o, lp.ob, N, QD, C)
		m.loraForward(m.la, l, tO, la.res2, la.o)
		m.residualNorm(la.res2, la.ln2, la.r2, la.res2, x, lp.mlpNorm, N, C)
		if m.packedMLP() {
			m.mlpGateUpForward(l, la.act, view(be, la.gu, 0, 2*N*I), la.ln2, N)
		} else {
			m.baseForward(l, kGate, la.gate, la.ln2, lp.gate, lp.gateb, N, C, I)
			m.loraForward(m.la, l, tGate, la.gate, la.ln2)
			m.baseForward(l, kUp, la.up, la.ln2, lp.up, lp.upb, N, C, I)
			m.loraForward(m.la, l, tUp, la.up, la.ln2)
			be.SwiGLUForward(la.act, la.gate, la.up, N*I)
		}
		m.baseForward(l, kDown, la.res3, la.act, lp.down, lp.downb, N, I, C)
		m.loraForward(m.la, l, tDown, la.res3, la.act)
		switch last := l == len(a.layers)-1; {
		case last && final:
			m.residualNorm(la.res3, a.lnf, a.rf, la.res3, la.res2, m.pv.all[kNorm], N, C)
		case !last && fu.norm != nil:
			// The next block's input norm. Inference shares one set of
			// activations: its ln1 is this block's, read by now.
			next := &a.layers[l+1]
			fu.norm.ResidualRMSNormForward(la.res3, next.ln1, next.r1, la.res3, la.res2, m.pv.layers[l+1].attnNorm, N, C, ar.eps)
			normed = true
		default:
			be.ResidualForward(la.res3, la.res3, la.res2, N*C)
		}
		x = la.res3
	}
	return x
}

// forward runs the network and the final norm over the loaded tokens
// (the head runs per chunk in the loss functions).
func (m *Llama) forward(B, T int) {
	m.forwardBlocks(B, T, false, nil, true)
}

// lastResidual is the input of the final norm after forward.
func (m *Llama) lastResidual() compute.Buffer {
	if L := len(m.a.layers); L > 0 {
		return m.a.layers[L-1].res3
	}
	return m.a.x0
}

// Loss heads.
const (
	headCE = iota
	headLogProb
)

// headChunk runs the output head on rows [r0, r0+n) of chunk c: logits,
// then the loss head's forward (softmax written over the logits, or with
// the LSE heads the logits kept and each row's log-sum-exp into
// a.lse[r0:]), losses into a.losses[r0:].
func (m *Llama) headChunk(c, r0, n, head int) {
	be, a, C, V := m.be, m.a, m.arch.C, m.arch.V
	lg := view(be, a.logits, 0, n*V)
	m.headMatmul(lg, view(be, a.lnf, r0*C, n*C), n)
	out := view(be, a.losses, r0, n)
	if h := m.fu.loss; h != nil {
		lse := view(be, a.lse, r0, n)
		if head == headCE {
			h.CrossEntropyLSEForward(out, lse, lg, a.targets[c], n, V)
		} else {
			h.LogProbLSEForward(out, lse, lg, a.targets[c], n, V)
		}
		return
	}
	if head == headCE {
		be.CrossEntropyForward(out, lg, lg, a.targets[c], n, V)
	} else {
		be.LogProbForward(out, lg, lg, a.targets[c], n, V)
	}
}

// headForward fills a.losses[:N] with per-token cross-entropies or
// log-probs and downloads them into a.hostOut.
func (m *Llama) headForward(N, head int) ([]float32, error) {
	a := m.a
	for c, r0 := 0, 0; r0 < N; c, r0 = c+1, r0+a.R {
		m.headChunk(c, r0, min(a.R, N-r0), head)
	}
	out := a.hostOut[:N]
	m.be.Download(out, a.losses)
	if err := m.be.Sync(); err != nil {
		return nil, fmt.Errorf("policy: forward: %w", err)
	}
	return out, nil
}

// headBackward turns a.dlosses[:N] into the gradient of the final norm's
// output (into bv.dl, zeroed first) and of the head weight.
func (m *Llama) headBackward(N, head int) {
	be, a, C, V := m.be, m.a, m.arch.C, m.arch.V
	be.Zero(a.bv.dl)
	for c, r0 := 0, 0; r0 < N; c, r0 = c+1, r0+a.R {
		n := min(a.R, N-r0)
		if N > a.R { // several chunks: the logits of this one are gone
			m.headChunk(c, r0, n, head)
		}
		lg := view(be, a.logits, 0, n*V)
		dl := view(be, a.dlosses, r0, n)
		if h := m.fu.loss; h != nil { // the gradient replaces the logits
			lse := view(be, a.lse, r0, n)
			if head == headCE {
				h.CrossEntropyLSEBackward(lg, lg, lse, dl, a.targets[c], n, V)
			} else {
				h.LogProbLSEBackward(lg, lg, lse, dl, a.targets[c], n, V)
			}
			m.headMatmulBackward(view(be, a.bv.dl, r0*C, n*C), lg, view(be, a.lnf, r0*C, n*C), n)
			continue
		}
		dlg := view(be, a.dlogits, 0, n*V)
		be.Zero(dlg)
		if head == headCE {
			be.CrossEntropyBackward(dlg, lg, dl, a.targets[c], n, V)
		} else {
			be.LogProbBackward(dlg, lg, dl, a.targets[c], n, V)
		}
		m.headMatmulBackward(view(be, a.bv.dl, r0*C, n*C), dlg, view(be, a.lnf, r0*C, n*C), n)
	}
}

// backward accumulates parameter gradients from a.dlosses through the head
// and every layer.
func (m *Llama) backward(B, T, head int) {
	be, a, p, g, ar := m.be, m.a, &m.pv, &m.gv, &m.arch
	C, V, I, NH, KVH, HD := ar.C, ar.V, ar.I, ar.NH, ar.KVH, ar.HD
	QD, KD, N := NH*HD, KVH*HD, B*T
	scale := float32(1 / math.Sqrt(float64(HD)))
	if a.viewN != N {
		v := func(x compute.Buffer, n int) compute.Buffer {
			if x == nil {
				return nil
			}
			return view(be, x, 0, n)
		}
		a.bv = lbackViews{
			dres: v(a.dres, N*C), dl: v(a.dl, N*C), dI1: v(a.dI1, N*I), dI2: v(a.dI2, N*I), dI3: v(a.dI3, N*I),
			dO: v(a.dO, N*QD), dq: v(a.dq, N*QD), dk: v(a.dk, N*KD), dv: v(a.dv, N*KD), dqr: v(a.dqr, N*QD), dkr: v(a.dkr, N*KD),
		}
		a.viewN = N
	}
	d := &a.bv
	m.headBackward(N, head)
	be.Zero(d.dres)
	be.RMSNormBackward(d.dres, g.all[kNorm], d.dl, m.lastResidual(), p.all[kNorm], a.rf, N, C)
	rope := m.rope
	// dres is the residual stream's gradient: each block's output
	// projections add to the stream, so their output gradient is dres.
	for l := len(a.layers) - 1; l >= 0; l-- {
		la, lp, lg := &a.layers[l], m.layerWeights(l), &g.layers[l]
		x := a.x0
		if l > 0 {
			x = a.layers[l-1].res3
		}
		// MLP
		be.Zero(d.dI1)
		m.baseBackward(l, kDown, d.dI1, lg.down, lg.downb, d.dres, la.act, lp.down, N, I, C)
		m.loraBackward(l, tDown, d.dI1, d.dres, la.act)
		if m.packedMLP() {
			dgu := view(be, a.dgu, 0, 2*N*I)
			be.Zero(dgu)
			m.fu.glu.SwiGLUPackedBackward(dgu, d.dI1, view(be, la.gu, 0, 2*N*I), N, I)
			be.Zero(d.dl)
			m.fu.stack.MatmulBackwardInputBF16Stacked(d.dl, dgu, m.bf16Mat(kGate, l), m.bf16Mat(kUp, l), N, C, I)
			if lg.gate != nil || lg.up != nil {
				m.fu.stack.MatmulBackwardWeightBF16Stacked(lg.gate, lg.up, dgu, la.ln2, N, C, I)
			}
		} else {
			be.Zero(d.dI2)
			be.Zero(d.dI3)
			be.SwiGLUBackward(d.dI2, d.dI3, d.dI1, la.gate, la.up, N*I)
			be.Zero(d.dl)
			m.baseBackward(l, kGate, d.dl, lg.gate, lg.gateb, d.dI2, la.ln2, lp.gate, N, C, I)
			m.loraBackward(l, tGate, d.dl, d.dI2, la.ln2)
			m.baseBackward(l, kUp, d.dl, lg.up, lg.upb, d.dI3, la.ln2, lp.up, N, C, I)
			m.loraBackward(l, tUp, d.dl, d.dI3, la.ln2)
		}
		be.RMSNormBackward(d.dres, lg.mlpNorm, d.dl, la.res2, lp.mlpNorm, la.r2, N, C)
		// attention
		be.Zero(d.dO)
		m.baseBackward(l, kO, d.dO, lg.o, lg.ob, d.dres, la.o, lp.o, N, QD, C)
		m.loraBackward(l, tO, d.dO, d.dres, la.o)
		be.Zero(d.dq)
		be.Zero(d.dk)
		be.Zero(d.dv)
		if m.flashAttn() && m.amp != nil {
			m.fu.flashBF16.FlashAttentionBackwardBF16(d.dq, d.dk, d.dv, d.dO, la.q, la.k, la.v, la.o, la.att, B, T, NH, KVH, HD, scale)
		} else if m.flashAttn() {
			m.fu.flash.FlashAttentionBackward(d.dq, d.dk, d.dv, d.dO, la.q, la.k, la.v, la.o, la.att, B, T, NH, KVH, HD, scale)
		} else {
			be.GQAttentionBackward(d.dq, d.dk, d.dv, d.dO, la.q, la.k, la.v, la.att, B, T, NH, KVH, HD, scale)
		}
		if m.fu.rope != nil {
			m.fu.rope.RopeQKBackward(d.dq, d.dk, a.pos, rope.cos, rope.sin, N, NH, KVH, HD, rope.n)
		} else {
			be.RopeBackward(d.dq, a.pos, rope.cos, rope.sin, N, NH, HD, rope.n)
			be.RopeBackward(d.dk, a.pos, rope.cos, rope.sin, N, KVH, HD, rope.n)
		}
		dq, dk := d.dq, d.dk
		if ar.qkNorm {
			be.Zero(d.dqr)
			be.Zero(d.dkr)
			be.RMSNormBackward(d.dqr, lg.qNorm, d.dq, la.qr, lp.qNorm, la.rq, N*NH, HD)
			be.RMSNormBackward(d.dkr, lg.kNorm, d.dk, la.kr, lp.kNorm, la.rk, N*KVH, HD)
			dq, dk = d.dqr, d.dkr
		}
		be.Zero(d.dl)
		m.baseBackward(l, kQ, d.dl, lg.q, lg.qb, dq, la.ln1, lp.q, N, C, QD)
		m.loraBackward(l, tQ, d.dl, dq, la.ln1)
		m.baseBackward(l, kK, d.dl, lg.k, lg.kb, dk, la.ln1, lp.k, N, C, KD)
		m.loraBackward(l, tK, d.dl, dk, la.ln1)
		m.baseBackward(l, kV, d.dl, lg.v, lg.vb, d.dv, la.ln1, lp.v, N, C, KD)
		m.loraBackward(l, tV, d.dl, d.dv, la.ln1)
		be.RMSNormBackward(d.dres, lg.attnNorm, d.dl, x, lp.attnNorm, la.r1, N, C)
	}
	if g.all[kEmbed] != nil { // nil: a frozen base
		be.EmbedBackward(g.all[kEmbed], d.dres, a.inputs, N, C, V)
	}
}

// ZeroGrad clears the accumulated gradients (the adapters' while the base
// is frozen).
func (m *Llama) ZeroGrad() error {
	if m.frozen() {
		return m.zeroAdapterGrads()
	}
	if m.grads == nil {
		var err error
		if m.grads, m.gv, err = m.allocParams("gradients"); err != nil {
			return err
		}
	}
	m.be.Zero(m.grads)
	return m.be.Sync()
}

// Loss returns the weighted mean cross-entropy of batch (no gradients).
func (m *Llama) Loss(batch Batch) (float64, error) {
	B, T, err := m.load(batch, false)
	if err != nil {
		return 0, err
	}
	m.forward(B, T)
	sum, wsum, err := m.ceLoss(B * T)
	if err != nil || wsum == 0 {
		return 0, err
	}
	return sum / wsum, nil
}

// ceLoss runs the cross-entropy head and returns sum w·loss and sum w.
func (m *Llama) ceLoss(N int) (float64, float64, error) {
	out, err := m.headForward(N, headCE)
	if err != nil {
		return 0, 0, err
	}
	var sum, wsum float64
	for i, w := range m.a.hostW[:N] {
		sum += float64(w) * float64(out[i])
		wsum += float64(w)
	}
	return sum, wsum, nil
}

// AccumulateCE adds the gradient of scale · sum_n w_n·CE_n over batch to
// the accumulated gradients (call ZeroGrad first) and returns sum w·CE and
// sum w, as Model.AccumulateCE.
func (m *Llama) AccumulateCE(batch Batch, scale float32) (float64, float64, error) {
	B, T, err := m.load(batch, true)
	if err != nil {
		return 0, 0, err
	}
	if err := m.ensureBackward(); err != nil {
		return 0, 0, err
	}
	m.forward(B, T)
	sum, wsum, err := m.ceLoss(B * T)
	if err != nil {
		return 0, 0, err
	}
	a, N := m.a, B*T
	d := a.hostW[:N]
	for i := range d {
		d[i] *= scale
	}
	m.be.Upload(a.dlosses, d)
	m.backward(B, T, headCE)
	if err := m.be.Sync(); err != nil {
		return 0, 0, fmt.Errorf("policy: backward: %w", err)
	}
	return sum, wsum, nil
}

// Step applies one AdamW update with the accumulated gradients (weight
// decay on matrices and embeddings only), clipping their global norm to
// Optim.ClipNorm, and returns the norm before clipping. While the model
// holds adapters it updates only those that received gradients since
// ZeroGrad, each clipped by its own norm (see stepAdapters).
func (m *Llama) Step() (float64, error) {
	if m.frozen() {
		return m.stepAdapters()
	}
	if m.grads == nil {
		return 0, fmt.Errorf("policy: Step before any backward: %w", ErrBatch)
	}
	be := m.be
	if m.mom == nil {
		var err error
		if m.mom, m.momV, err = m.allocParams("AdamW m"); err != nil {
			return 0, err
		}
		if m.vel, m.velV, err = m.allocParams("AdamW v"); err != nil {
			return 0, err
		}
	}
	norm, h, err := adamwStep(be, m.grads, m.nparams, m.step+1, m.Optim)
	if err != nil {
		return norm, err
	}
	m.step++
	o := m.Optim
	if m.fu.adam != nil { // one launch over every tensor
		ts := make([]compute.AdamWTensor, 0, numKinds)
		for k, kd := range m.kinds {
			if m.sizes[k] > 0 {
				ts = append(ts, compute.AdamWTensor{Params: m.pv.all[k], Grads: m.gv.all[k], M: m.momV.all[k], V: m.velV.all[k], N: m.sizes[k], NoDecay: !kd.decay})
			}
		}
		h.WeightDecay = o.WeightDecay
		m.fu.adam.AdamWUpdateMulti(ts, h)
	} else {
		for k, kd := range m.kinds {
			if m.sizes[k] == 0 {
				continue
			}
			h.WeightDecay = 0
			if kd.decay {
				h.WeightDecay = o.WeightDecay
			}
			be.AdamWUpdate(m.pv.all[k], m.gv.all[k], m.momV.all[k], m.velV.all[k], m.sizes[k], h)
		}
	}
	m.wver++
	if err := be.Sync(); err != nil {
		return norm, fmt.Errorf("policy: AdamW: %w", err)
	}
	return norm, nil
}

// TrainStep is one SFT step: zero gradients, weighted mean cross-entropy
// over batch, backward, clipped AdamW update.
func (m *Llama) TrainStep(batch Batch) (StepStats, error) { return trainStep(m, batch) }

// LogProbs returns, for each sequence b, log p(Tokens[b][t+1] | Tokens[b][:t+1])
// for t = 0..len(Tokens[b])-2 (Weights ignored).
func (m *Llama) LogProbs(batch Batch) ([][]float32, error) {
	B, T, err := m.load(batch, false)
	if err != nil {
		return nil, err
	}
	m.forward(B, T)
	return m.logProbs(batch, B, T)
}

func (m *Llama) logProbs(batch Batch, B, T int) ([][]float32, error) {
	out, err := m.headForward(B*T, headLogProb)
	if err != nil {
		return nil, err
	}
	res := make([][]float32, B)
	for b, seq := range batch.Tokens {
		s := m.slotOf(b)
		res[b] = append([]float32(nil), out[s*T:s*T+len(seq)-1]...)
	}
	return res, nil
}

// AccumulateLogProbFunc runs one forward pass over batch, hands the
// per-token log-probs to objective, which returns d loss / d logp of the
// same shape, and accumulates the loss's gradient (call ZeroGrad first,
// Step after), as Model.AccumulateLogProbFunc.
func (m *Llama) AccumulateLogProbFunc(batch Batch, objective func(logp [][]float32) ([][]float32, error)) error {
	B, T, err := m.load(batch, true)
	if err != nil {
		return err
	}
	if err := m.ensureBackward(); err != nil {
		return err
	}
	m.forward(B, T)
	lp, err := m.logProbs(batch, B, T)
	if err != nil {
		return err
	}
	grads, err := objective(lp)
	if err != nil {
		return err
	}
	a, N := m.a, B*T
	d := a.hostW[:N]
	if err := scatterLogProbGrads(d, batch, grads, T, m.slotOf); err != nil {
		return err
	}
	m.be.Upload(a.dlosses, d)
	m.backward(B, T, headLogProb)
	if err := m.be.Sync(); err != nil {
		return fmt.Errorf("policy: backward: %w", err)
	}
	return nil
}

// AccumulateLogProbGrads accumulates the gradient of sum grads[b][t]·logp[b][t].
func (m *Llama) AccumulateLogProbGrads(batch Batch, grads [][]float32) error {
	return accumulateLogProbGrads(m, batch, grads)
}

// StepFromLogProbGrads is one policy-gradient step: zero gradients,
// accumulate d loss/d logp = grads through the model, clipped AdamW update.
// Loss in the result is sum grads·logp at the pre-step weights.
func (m *Llama) StepFromLogProbGrads(batch Batch, grads [][]float32) (StepStats, error) {
	return stepFromLogProbGrads(m, batch, grads)
}

// slotOf is where the last load put batch row b.
func (m *Llama) slotOf(b int) int {
	if m.a.slot != nil {
		return m.a.slot[b]
	}
	return b
}
