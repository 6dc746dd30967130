package policy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"troupe/gpu/compute"
)

// ErrBatch reports a batch that does not fit the model (bad lengths, token
// ids out of range, mismatched weights or gradients).
var ErrBatch = errors.New("policy: bad batch")

// Optim holds the optimizer settings used by Step.
type Optim struct {
	LR          float32 // learning rate
	Beta1       float32 // AdamW beta1
	Beta2       float32 // AdamW beta2
	Eps         float32 // AdamW epsilon
	WeightDecay float32 // applied to 2-D matrices (embeddings included), not to biases or LayerNorm
	ClipNorm    float32 // global gradient-norm clip; 0 disables
}

// DefaultOptim is a conventional setting for small GPTs.
func DefaultOptim() Optim {
	return Optim{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, ClipNorm: 1}
}

// Model is a GPT on a Backend. Weights live in one backend buffer (each
// tensor a view of it); gradients and AdamW moments are allocated on the
// first backward / optimizer step, so inference-only copies (a frozen
// reference policy) cost only their weights and activations.
type Model struct {
	cfg   Config
	be    compute.Backend
	Optim Optim

	sizes    [numGroups]int
	nparams  int
	params   compute.Buffer
	pv       views // views of params
	grads    compute.Buffer
	gv       views
	mom, vel compute.Buffer
	momV     views
	velV     views
	groups   [numGroups]group
	step     int

	a *acts

	// wver counts weight changes; tw (transposed weights for decoding) is
	// rebuilt when its version is older.
	wver    int
	tw      *transposed
	wpeRows []compute.Buffer // per-position views of wpe for decoding
}

// views are per-tensor views of a flat parameter-shaped buffer.
type views struct {
	all    [numGroups]compute.Buffer // whole group
	layers []layerViews
}

type layerViews struct {
	ln1w, ln1b, qkvw, qkvb, attprojw, attprojb compute.Buffer
	ln2w, ln2b, fcw, fcb, fcprojw, fcprojb     compute.Buffer
}

// New builds a model with GPT-2 initialisation (weights N(0, 0.02),
// residual projections scaled by 1/sqrt(2L), biases 0, LayerNorm gains 1)
// drawn from seed.
func New(be compute.Backend, cfg Config, seed uint64) (*Model, error) {
	m, err := newEmpty(be, cfg)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	host := make([]float32, cfg.NumParams())
	off := 0
	for gi, g := range cfg.groups() {
		n := m.sizes[gi]
		x := host[off : off+n]
		switch {
		case gi == pLn1w || gi == pLn2w || gi == pLnfw:
			for i := range x {
				x[i] = 1
			}
		case g.decay: // matrices
			std := 0.02
			if gi == pAttprojw || gi == pFcprojw {
				std /= math.Sqrt(2 * float64(cfg.Layers))
			}
			for i := range x {
				x[i] = float32(r.NormFloat64() * std)
			}
		}
		off += n
	}
	be.Upload(m.params, host)
	if err := be.Sync(); err != nil {
		return nil, fmt.Errorf("policy: upload weights: %w", err)
	}
	return m, nil
}

// newEmpty allocates the weights (zero) and their views.
func newEmpty(be compute.Backend, cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, be: be, Optim: DefaultOptim(), sizes: cfg.groupSizes(), groups: cfg.groups(), nparams: cfg.NumParams()}
	var err error
	if m.params, m.pv, err = m.allocParams("weights"); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Model) allocParams(what string) (compute.Buffer, views, error) {
	n := m.cfg.NumParams()
	buf, err := m.be.Alloc(n)
	if err != nil {
		return nil, views{}, fmt.Errorf("policy: allocate %s (%d floats): %w", what, n, err)
	}
	v, err := m.makeViews(buf)
	if err != nil {
		return nil, views{}, fmt.Errorf("policy: %s views: %w", what, err)
	}
	return buf, v, nil
}

func (m *Model) makeViews(buf compute.Buffer) (views, error) {
	var v views
	off := 0
	var err error
	for gi := range m.sizes {
		if v.all[gi], err = m.be.View(buf, off, m.sizes[gi]); err != nil {
			return v, err
		}
		off += m.sizes[gi]
	}
	L := m.cfg.Layers
	v.layers = make([]layerViews, L)
	sub := func(g, l int) compute.Buffer {
		per := m.sizes[g] / L
		b, e := m.be.View(v.all[g], l*per, per)
		if e != nil && err == nil {
			err = e
		}
		return b
	}
	for l := range v.layers {
		v.layers[l] = layerViews{
			ln1w: sub(pLn1w, l), ln1b: sub(pLn1b, l), qkvw: sub(pQkvw, l), qkvb: sub(pQkvb, l),
			attprojw: sub(pAttprojw, l), attprojb: sub(pAttprojb, l),
			ln2w: sub(pLn2w, l), ln2b: sub(pLn2b, l), fcw: sub(pFcw, l), fcb: sub(pFcb, l),
			fcprojw: sub(pFcprojw, l), fcprojb: sub(pFcprojb, l),
		}
	}
	return v, err
}

// Config returns the model's shape.
func (m *Model) Config() Config { return m.cfg }

// Backend returns the backend the model runs on.
func (m *Model) Backend() compute.Backend { return m.be }

// NumParams is the number of parameters.
func (m *Model) NumParams() int { return m.nparams }

// Steps is the number of optimizer steps taken.
func (m *Model) Steps() int { return m.step }

// Weights downloads all parameters as one flat array in the safetensors
// tensor order.
func (m *Model) Weights() ([]float32, error) {
	w := make([]float32, m.cfg.NumParams())
	m.be.Download(w, m.params)
	if err := m.be.Sync(); err != nil {
		return nil, fmt.Errorf("policy: download weights: %w", err)
	}
	return w, nil
}

// SetWeights replaces all parameters with w (as returned by Weights).
// Optimizer state is kept.
func (m *Model) SetWeights(w []float32) error {
	if len(w) != m.cfg.NumParams() {
		return fmt.Errorf("policy: SetWeights: %d values for %d parameters: %w", len(w), m.cfg.NumParams(), ErrBatch)
	}
	m.be.Upload(m.params, w)
	m.wver++
	if err := m.be.Sync(); err != nil {
		return fmt.Errorf("policy: upload weights: %w", err)
	}
	return nil
}

// CopyWeightsFrom copies src's weights into m; src must be a GPT (*Model)
// of the same Config. Across backends it goes through host memory.
func (m *Model) CopyWeightsFrom(lm LM) error {
	src, err := asModel(lm)
	if err != nil {
		return err
	}
	if src.cfg != m.cfg {
		return fmt.Errorf("policy: CopyWeightsFrom: config %+v differs from %+v: %w", src.cfg, m.cfg, ErrConfig)
	}
	if src.be == m.be {
		m.be.Copy(m.params, src.params, m.cfg.NumParams())
		m.wver++
		return m.be.Sync()
	}
	w, err := src.Weights()
	if err != nil {
		return err
	}
	return m.SetWeights(w)
}

// Clone returns a copy of the model's weights and optimizer settings on be
// (nil: the same backend), without gradients or optimizer moments: the
// frozen reference policy of a KL penalty, or a rollout worker's replica.
func (m *Model) Clone(be compute.Backend) (*Model, error) {
	if be == nil {
		be = m.be
	}
	c, err := newEmpty(be, m.cfg)
	if err != nil {
		return nil, err
	}
	c.Optim = m.Optim
	if err := c.CopyWeightsFrom(m); err != nil {
		return nil, err
	}
	return c, nil
}

// Free releases the model's backend buffers. The model must not be used
// afterwards.
func (m *Model) Free() {
	for _, b := range []compute.Buffer{m.params, m.grads, m.mom, m.vel} {
		if b != nil {
			m.be.Free(b)
		}
	}
	if m.tw != nil {
		m.be.Free(m.tw.all)
		m.tw = nil
	}
	m.freeActs()
	m.params, m.grads, m.mom, m.vel = nil, nil, nil, nil
}
