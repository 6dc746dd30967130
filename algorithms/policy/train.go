package policy

import (
	"fmt"
	"troupe/gpu/compute"
)

// Batch is B token sequences, trained or scored with teacher forcing:
// position t of sequence b predicts Tokens[b][t+1] from Tokens[b][:t+1].
// Sequences may have different lengths (2..Context+1 tokens); shorter ones
// are padded internally and the padding never influences real positions
// (attention is causal).
type Batch struct {
	Tokens [][]int32
	// Weights, optional, scales each prediction's cross-entropy:
	// Weights[b][t] is the weight of predicting Tokens[b][t+1], so
	// len(Weights[b]) == len(Tokens[b])-1. SFT sets 1 on completion tokens
	// and 0 on the prompt. nil means every prediction has weight 1.
	Weights [][]float32
	// Adapters, optional, names the LoRA adapter of each row on a Llama
	// that holds adapters: "" the active adapter, NoAdapter the bare base.
	// Rows of different adapters share the base's matmuls. A GPT takes
	// none.
	Adapters []string
}

// StepStats reports one optimizer step.
type StepStats struct {
	Loss     float64 // weighted mean cross-entropy (TrainStep) or sum of grad·logp (log-prob steps)
	GradNorm float64 // global gradient norm before clipping
	Tokens   int     // predictions with non-zero weight (TrainStep) or all predictions
}

// acts holds the activations of one forward pass at up to capBT tokens and
// the backward's scratch, reused across steps so training does not allocate.
type acts struct {
	capBT, capAtt int
	B, T          int // shape of the last forward

	encoded          compute.Buffer
	layers           []layerActs
	lnf, lnfM, lnfR  compute.Buffer
	logits           compute.Buffer // (BT,V); softmax probabilities after the loss head
	losses, dlosses  compute.Buffer // (BT)
	inputs, targets  compute.IntBuffer
	dres, dA, dB, dl compute.Buffer // backward scratch: (BT,C), (BT,4C), (BT,4C), (BT,C)
	dlogits          compute.Buffer

	// views of the scratch at the last backward's N
	viewN                         int
	vA, vB, vl, vres, vatty, vqkv compute.Buffer

	hostIn, hostTg []int32
	hostW, hostOut []float32
	all            []any
}

type layerActs struct {
	ln1, ln1M, ln1R, qkv, atty, att, res2 compute.Buffer
	ln2, ln2M, ln2R, fch, fchGelu, res3   compute.Buffer
}

func (m *Model) freeActs() {
	if m.a == nil {
		return
	}
	for _, b := range m.a.all {
		m.be.Free(b)
	}
	m.a = nil
}

// ensureActs makes sure activations for B×T tokens exist.
func (m *Model) ensureActs(B, T int) error {
	BT, att := B*T, B*m.cfg.Heads*T*T
	if m.a != nil && m.a.capBT >= BT && m.a.capAtt >= att {
		return nil
	}
	if m.a != nil { // grow to cover both the old and the new shape
		BT, att = max(BT, m.a.capBT), max(att, m.a.capAtt)
		m.freeActs()
	}
	a := &acts{capBT: BT, capAtt: att}
	C, V := m.cfg.Width, m.cfg.Vocab
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
	a.encoded = f(BT * C)
	a.layers = make([]layerActs, m.cfg.Layers)
	for l := range a.layers {
		a.layers[l] = layerActs{
			ln1: f(BT * C), ln1M: f(BT), ln1R: f(BT), qkv: f(BT * 3 * C), atty: f(BT * C), att: f(att),
			res2: f(BT * C), ln2: f(BT * C), ln2M: f(BT), ln2R: f(BT), fch: f(BT * 4 * C), fchGelu: f(BT * 4 * C),
			res3: f(BT * C),
		}
	}
	a.lnf, a.lnfM, a.lnfR = f(BT*C), f(BT), f(BT)
	a.logits, a.losses, a.dlosses = f(BT*V), f(BT), f(BT)
	if err == nil {
		if a.inputs, err = m.be.AllocInt(BT); err == nil {
			a.all = append(a.all, a.inputs)
			a.targets, err = m.be.AllocInt(BT)
			a.all = append(a.all, a.targets)
		}
	}
	a.hostIn, a.hostTg = make([]int32, BT), make([]int32, BT)
	a.hostW, a.hostOut = make([]float32, BT), make([]float32, BT)
	if err != nil {
		m.a = a
		m.freeActs()
		return fmt.Errorf("policy: allocate activations for %d tokens: %w", BT, err)
	}
	m.a = a
	return nil
}

// ensureBackward allocates gradients and the backward scratch.
func (m *Model) ensureBackward() error {
	if m.grads == nil {
		var err error
		if m.grads, m.gv, err = m.allocParams("gradients"); err != nil {
			return err
		}
	}
	a := m.a
	if a.dres != nil {
		return nil
	}
	C, V, BT := m.cfg.Width, m.cfg.Vocab, a.capBT
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
	a.dres, a.dA, a.dB, a.dl, a.dlogits = f(BT*C), f(BT*4*C), f(BT*4*C), f(BT*C), f(BT*V)
	if err != nil {
		return fmt.Errorf("policy: allocate backward scratch: %w", err)
	}
	return nil
}

// load validates a batch and uploads inputs, targets and per-prediction
// weights (padding gets weight 0). It returns B and T.
func (m *Model) load(batch Batch) (int, int, error) {
	B := len(batch.Tokens)
	if B == 0 {
		return 0, 0, fmt.Errorf("%w: no sequences", ErrBatch)
	}
	if err := noAdapters(batch.Adapters); err != nil {
		return 0, 0, err
	}
	if batch.Weights != nil && len(batch.Weights) != B {
		return 0, 0, fmt.Errorf("%w: %d weight rows for %d sequences", ErrBatch, len(batch.Weights), B)
	}
	T := 0
	for b, seq := range batch.Tokens {
		if len(seq) < 2 || len(seq) > m.cfg.Context+1 {
			return 0, 0, fmt.Errorf("%w: sequence %d has %d tokens, want 2..%d", ErrBatch, b, len(seq), m.cfg.Context+1)
		}
		for i, id := range seq {
			if id < 0 || int(id) >= m.cfg.Vocab {
				return 0, 0, fmt.Errorf("%w: sequence %d token %d is %d, vocab %d", ErrBatch, b, i, id, m.cfg.Vocab)
			}
		}
		if batch.Weights != nil && len(batch.Weights[b]) != len(seq)-1 {
			return 0, 0, fmt.Errorf("%w: sequence %d has %d weights for %d predictions", ErrBatch, b, len(batch.Weights[b]), len(seq)-1)
		}
		T = max(T, len(seq)-1)
	}
	if err := m.ensureActs(B, T); err != nil {
		return 0, 0, err
	}
	a := m.a
	in, tg, w := a.hostIn[:B*T], a.hostTg[:B*T], a.hostW[:B*T]
	for b, seq := range batch.Tokens {
		n := len(seq) - 1
		copy(in[b*T:], seq[:n])
		copy(tg[b*T:], seq[1:])
		for t := 0; t < T; t++ {
			switch {
			case t >= n:
				in[b*T+t], tg[b*T+t], w[b*T+t] = 0, 0, 0
			case batch.Weights != nil:
				w[b*T+t] = batch.Weights[b][t]
			default:
				w[b*T+t] = 1
			}
		}
	}
	m.be.UploadInt(a.inputs, in)
	m.be.UploadInt(a.targets, tg)
	a.B, a.T = B, T
	return B, T, nil
}

// forward runs the network on the loaded inputs up to the logits.
func (m *Model) forward(B, T int) {
	be, a, p := m.be, m.a, &m.pv
	C, NH, V := m.cfg.Width, m.cfg.Heads, m.cfg.Vocab
	N := B * T
	be.EncoderForward(a.encoded, a.inputs, p.all[pWte], p.all[pWpe], B, T, C, V)
	res := a.encoded
	for l := range a.layers {
		la, lp := &a.layers[l], &p.layers[l]
		be.LayerNormForward(la.ln1, la.ln1M, la.ln1R, res, lp.ln1w, lp.ln1b, N, C)
		be.MatmulForward(la.qkv, la.ln1, lp.qkvw, lp.qkvb, N, C, 3*C)
		be.AttentionForward(la.atty, la.att, la.qkv, B, T, C, NH)
		be.MatmulForward(la.res2, la.atty, lp.attprojw, lp.attprojb, N, C, C)
		be.ResidualForward(la.res2, la.res2, res, N*C)
		be.LayerNormForward(la.ln2, la.ln2M, la.ln2R, la.res2, lp.ln2w, lp.ln2b, N, C)
		be.MatmulForward(la.fch, la.ln2, lp.fcw, lp.fcb, N, C, 4*C)
		be.GeluForward(la.fchGelu, la.fch, N*4*C)
		be.MatmulForward(la.res3, la.fchGelu, lp.fcprojw, lp.fcprojb, N, 4*C, C)
		be.ResidualForward(la.res3, la.res3, la.res2, N*C)
		res = la.res3
	}
	be.LayerNormForward(a.lnf, a.lnfM, a.lnfR, res, p.all[pLnfw], p.all[pLnfb], N, C)
	be.MatmulForward(a.logits, a.lnf, p.all[pWte], nil, N, C, V)
}

// backward accumulates parameter gradients, given dlogits already filled by
// a loss head's backward.
func (m *Model) backward(B, T int) {
	be, a, p, g := m.be, m.a, &m.pv, &m.gv
	C, NH, V := m.cfg.Width, m.cfg.Heads, m.cfg.Vocab
	N := B * T
	L := len(a.layers)
	last := a.encoded
	if L > 0 {
		last = a.layers[L-1].res3
	}
	// Zero clears a whole buffer: work on views of exactly this batch's
	// size so a smaller batch does not pay for the capacity (cached per N).
	if a.viewN != N {
		view := func(x compute.Buffer, n int) compute.Buffer {
			v, err := be.View(x, 0, n)
			if err != nil {
				return x // a too-short buffer then fails the op with a clear error
			}
			return v
		}
		a.vA, a.vB, a.vl, a.vres = view(a.dA, N*4*C), view(a.dB, N*4*C), view(a.dl, N*C), view(a.dres, N*C)
		a.vatty, a.vqkv = view(a.dB, N*C), view(a.dA, N*3*C) // reuse: free again by then
		a.viewN = N
	}
	dA, dB, dl, datty, dqkv := a.vA, a.vB, a.vl, a.vatty, a.vqkv
	be.Zero(dl)
	be.MatmulBackward(dl, g.all[pWte], nil, a.dlogits, a.lnf, p.all[pWte], N, C, V)
	be.Zero(a.vres)
	be.LayerNormBackward(a.dres, g.all[pLnfw], g.all[pLnfb], dl, last, p.all[pLnfw], a.lnfM, a.lnfR, N, C)
	// dres is the gradient of the residual stream; the projections' outputs
	// are added to it, so their gradient is dres itself.
	for l := L - 1; l >= 0; l-- {
		la, lp, lg := &a.layers[l], &p.layers[l], &g.layers[l]
		res := a.encoded
		if l > 0 {
			res = a.layers[l-1].res3
		}
		be.Zero(dA)
		be.MatmulBackward(dA, lg.fcprojw, lg.fcprojb, a.dres, la.fchGelu, lp.fcprojw, N, 4*C, C)
		be.Zero(dB)
		be.GeluBackward(dB, la.fch, dA, N*4*C)
		be.Zero(dl)
		be.MatmulBackward(dl, lg.fcw, lg.fcb, dB, la.ln2, lp.fcw, N, C, 4*C)
		be.LayerNormBackward(a.dres, lg.ln2w, lg.ln2b, dl, la.res2, lp.ln2w, la.ln2M, la.ln2R, N, C)
		be.Zero(datty)
		be.MatmulBackward(datty, lg.attprojw, lg.attprojb, a.dres, la.atty, lp.attprojw, N, C, C)
		be.Zero(dqkv)
		be.AttentionBackward(dqkv, datty, la.qkv, la.att, B, T, C, NH)
		be.Zero(dl)
		be.MatmulBackward(dl, lg.qkvw, lg.qkvb, dqkv, la.ln1, lp.qkvw, N, C, 3*C)
		be.LayerNormBackward(a.dres, lg.ln1w, lg.ln1b, dl, res, lp.ln1w, la.ln1M, la.ln1R, N, C)
	}
	be.EncoderBackward(g.all[pWte], g.all[pWpe], a.dres, a.inputs, B, T, C, V)
}

// ZeroGrad clears the accumulated gradients.
func (m *Model) ZeroGrad() error {
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
func (m *Model) Loss(batch Batch) (float64, error) {
	B, T, err := m.load(batch)
	if err != nil {
		return 0, err
	}
	m.forward(B, T)
	sum, wsum, err := m.ceLoss(B, T)
	if err != nil {
		return 0, err
	}
	if wsum == 0 {
		return 0, nil
	}
	return sum / wsum, nil
}

// ceLoss runs the cross-entropy head and returns sum w·loss and sum w.
func (m *Model) ceLoss(B, T int) (float64, float64, error) {
	a, N := m.a, B*T
	m.be.CrossEntropyForward(a.losses, a.logits, a.logits, a.targets, N, m.cfg.Vocab)
	out := a.hostOut[:N]
	m.be.Download(out, a.losses)
	if err := m.be.Sync(); err != nil {
		return 0, 0, fmt.Errorf("policy: forward: %w", err)
	}
	var sum, wsum float64
	for i, w := range a.hostW[:N] {
		sum += float64(w) * float64(out[i])
		wsum += float64(w)
	}
	return sum, wsum, nil
}

// AccumulateCE adds the gradient of scale · sum_n w_n·CE_n over batch to
// the accumulated gradients (call ZeroGrad first) and returns sum w·CE and
// sum w. TrainStep uses scale = 1/sum w; gradient accumulation over
// micro-batches passes 1/(total weight).
func (m *Model) AccumulateCE(batch Batch, scale float32) (float64, float64, error) {
	B, T, err := m.load(batch)
	if err != nil {
		return 0, 0, err
	}
	if err := m.ensureBackward(); err != nil {
		return 0, 0, err
	}
	m.forward(B, T)
	sum, wsum, err := m.ceLoss(B, T)
	if err != nil {
		return 0, 0, err
	}
	a, N := m.a, B*T
	d := a.hostW[:N]
	for i := range d {
		d[i] *= scale
	}
	m.be.Upload(a.dlosses, d)
	m.be.Zero(a.dlogits) // capacity-sized; (BT,V) is small next to the layers
	m.be.CrossEntropyBackward(a.dlogits, a.logits, a.dlosses, a.targets, N, m.cfg.Vocab)
	m.backward(B, T)
	if err := m.be.Sync(); err != nil {
		return 0, 0, fmt.Errorf("policy: backward: %w", err)
	}
	return sum, wsum, nil
}

// Step applies one AdamW update with the accumulated gradients, clipping
// their global norm to Optim.ClipNorm, and returns the norm before clipping.
func (m *Model) Step() (float64, error) {
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
	for gi, g := range m.groups {
		h.WeightDecay = 0
		if g.decay {
			h.WeightDecay = o.WeightDecay
		}
		be.AdamWUpdate(m.pv.all[gi], m.gv.all[gi], m.momV.all[gi], m.velV.all[gi], m.sizes[gi], h)
	}
	m.wver++
	if err := be.Sync(); err != nil {
		return norm, fmt.Errorf("policy: AdamW: %w", err)
	}
	return norm, nil
}

// TrainStep is one SFT step: zero gradients, weighted mean cross-entropy
// over batch, backward, clipped AdamW update.
func (m *Model) TrainStep(batch Batch) (StepStats, error) { return trainStep(m, batch) }

// LogProbs returns, for each sequence b, log p(Tokens[b][t+1] | Tokens[b][:t+1])
// for t = 0..len(Tokens[b])-2 under the current weights (Weights ignored).
// GRPO takes the entries of the completion tokens.
func (m *Model) LogProbs(batch Batch) ([][]float32, error) {
	B, T, err := m.load(batch)
	if err != nil {
		return nil, err
	}
	m.forward(B, T)
	return m.logProbs(batch, B, T)
}

func (m *Model) logProbs(batch Batch, B, T int) ([][]float32, error) {
	a, N := m.a, B*T
	m.be.LogProbForward(a.losses, a.logits, a.logits, a.targets, N, m.cfg.Vocab)
	out := a.hostOut[:N]
	m.be.Download(out, a.losses)
	if err := m.be.Sync(); err != nil {
		return nil, fmt.Errorf("policy: log-probs: %w", err)
	}
	res := make([][]float32, B)
	for b, seq := range batch.Tokens {
		res[b] = append([]float32(nil), out[b*T:b*T+len(seq)-1]...)
	}
	return res, nil
}

// AccumulateLogProbFunc runs one forward pass over batch, hands the
// per-token log-probs (as LogProbs returns them) to objective, which
// returns d loss / d logp with the same shape, and accumulates the
// gradient of the loss into the model's gradients (call ZeroGrad first,
// Step after). This is how a GRPO-style clipped objective, computed outside
// the model, is pushed through it with a single forward and backward. It
// returns objective's error, if any, unchanged.
func (m *Model) AccumulateLogProbFunc(batch Batch, objective func(logp [][]float32) ([][]float32, error)) error {
	B, T, err := m.load(batch)
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
	if err := scatterLogProbGrads(d, batch, grads, T, func(b int) int { return b }); err != nil {
		return err
	}
	m.be.Upload(a.dlosses, d)
	m.be.Zero(a.dlogits) // capacity-sized; (BT,V) is small next to the layers
	m.be.LogProbBackward(a.dlogits, a.logits, a.dlosses, a.targets, N, m.cfg.Vocab)
	m.backward(B, T)
	if err := m.be.Sync(); err != nil {
		return fmt.Errorf("policy: backward: %w", err)
	}
	return nil
}

// AccumulateLogProbGrads accumulates the gradient of sum grads[b][t]·logp[b][t]
// (grads shaped like LogProbs' result).
func (m *Model) AccumulateLogProbGrads(batch Batch, grads [][]float32) error {
	return accumulateLogProbGrads(m, batch, grads)
}

// StepFromLogProbGrads is one policy-gradient step: zero gradients,
// accumulate d loss/d logp = grads through the model, clipped AdamW update.
// Loss in the result is sum grads·logp at the pre-step weights.
func (m *Model) StepFromLogProbGrads(batch Batch, grads [][]float32) (StepStats, error) {
	return stepFromLogProbGrads(m, batch, grads)
}
