package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
)

// This file holds the Llama family's shape and weights: Llama, Qwen2,
// Qwen3, and the Llama-shaped Mistral and SmolLM. A Llama block is
//
//	h  = RMSNorm(x)                         input_layernorm
//	q, k, v = h·Wqᵀ(+bq), h·Wkᵀ(+bk), h·Wvᵀ(+bv)
//	q, k = RMSNorm per head (Qwen3 only), then RoPE (rotate_half)
//	x += GQA(q, k, v)·Woᵀ(+bo)              grouped-query causal attention
//	h  = RMSNorm(x)                         post_attention_layernorm
//	x += (silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ          SwiGLU MLP (biases if mlp_bias)
//
// then a final RMSNorm and the output head (lm_head, or the token embedding
// when tied). There are no position embeddings: positions enter through
// RoPE only.

// llamaArch is the shape a Llama is built from, derived from an hf.Config
// (see llama_hf.go): everything the kernels need, nothing about files.
type llamaArch struct {
	family  string // HF model_type: llama, qwen2, qwen3, mistral
	L       int    // layers
	C       int    // hidden size
	NH, KVH int    // query and key/value heads
	HD      int    // head size (not necessarily C/NH)
	I       int    // MLP intermediate size
	V       int    // vocabulary (may exceed the tokenizer's)
	ctx     int    // context length: max_position_embeddings, capped
	eps     float32
	// invFreq are RoPE's HD/2 inverse frequencies with rope_theta and any
	// rope_scaling folded in; attnFactor scales cos and sin (1 unless the
	// scaling type defines an attention factor).
	invFreq    []float64
	attnFactor float64
	qkvBias    bool // q/k/v projections have biases (Qwen2, Llama attention_bias)
	oBias      bool // o_proj has a bias (Llama attention_bias)
	mlpBias    bool // gate/up/down have biases (Llama mlp_bias)
	qkNorm     bool // per-head RMSNorm of q and k before RoPE (Qwen3)
	tied       bool // output head is the token embedding
	initStd    float64
}

// The parameter kinds, in their order in the flat parameter buffer.
// Per-layer kinds are stacked over layers ([L][shape...]), so one AdamW
// call covers a kind in every layer.
const (
	kEmbed = iota
	kAttnNorm
	kQ
	kQb
	kK
	kKb
	kV
	kVb
	kQNorm
	kKNorm
	kO
	kOb
	kMLPNorm
	kGate
	kGateb
	kUp
	kUpb
	kDown
	kDownb
	kNorm
	kHead
	numKinds
)

// kind describes one parameter tensor (per layer when layered).
type kind struct {
	hf      string // HF name; per-layer names are "model.layers.<l>." + hf
	shape   []int  // per layer; nil when the model does not have it
	layered bool
	decay   bool // AdamW weight decay applies (2-D matrices, embeddings included)
	init    int  // initOne, initNormal or initZero
}

const (
	initZero = iota
	initOne
	initNormal
)

func (a *llamaArch) kinds() [numKinds]kind {
	C, V, I := a.C, a.V, a.I
	QD, KD := a.NH*a.HD, a.KVH*a.HD
	opt := func(on bool, s ...int) []int {
		if on {
			return s
		}
		return nil
	}
	return [numKinds]kind{
		kEmbed:    {"model.embed_tokens.weight", []int{V, C}, false, true, initNormal},
		kAttnNorm: {"input_layernorm.weight", []int{C}, true, false, initOne},
		kQ:        {"self_attn.q_proj.weight", []int{QD, C}, true, true, initNormal},
		kQb:       {"self_attn.q_proj.bias", opt(a.qkvBias, QD), true, false, initZero},
		kK:        {"self_attn.k_proj.weight", []int{KD, C}, true, true, initNormal},
		kKb:       {"self_attn.k_proj.bias", opt(a.qkvBias, KD), true, false, initZero},
		kV:        {"self_attn.v_proj.weight", []int{KD, C}, true, true, initNormal},
		kVb:       {"self_attn.v_proj.bias", opt(a.qkvBias, KD), true, false, initZero},
		kQNorm:    {"self_attn.q_norm.weight", opt(a.qkNorm, a.HD), true, false, initOne},
		kKNorm:    {"self_attn.k_norm.weight", opt(a.qkNorm, a.HD), true, false, initOne},
		kO:        {"self_attn.o_proj.weight", []int{C, QD}, true, true, initNormal},
		kOb:       {"self_attn.o_proj.bias", opt(a.oBias, C), true, false, initZero},
		kMLPNorm:  {"post_attention_layernorm.weight", []int{C}, true, false, initOne},
		kGate:     {"mlp.gate_proj.weight", []int{I, C}, true, true, initNormal},
		kGateb:    {"mlp.gate_proj.bias", opt(a.mlpBias, I), true, false, initZero},
		kUp:       {"mlp.up_proj.weight", []int{I, C}, true, true, initNormal},
		kUpb:      {"mlp.up_proj.bias", opt(a.mlpBias, I), true, false, initZero},
		kDown:     {"mlp.down_proj.weight", []int{C, I}, true, true, initNormal},
		kDownb:    {"mlp.down_proj.bias", opt(a.mlpBias, C), true, false, initZero},
		kNorm:     {"model.norm.weight", []int{C}, false, false, initOne},
		kHead:     {"lm_head.weight", opt(!a.tied, V, C), false, true, initNormal},
	}
}

// sizes returns each kind's total element count (all layers; 0 if absent).
func (a *llamaArch) sizes() [numKinds]int {
	var s [numKinds]int
	for i, k := range a.kinds() {
		if k.shape == nil {
			continue
		}
		s[i] = numel(k.shape)
		if k.layered {
			s[i] *= a.L
		}
	}
	return s
}

func (a *llamaArch) numParams() int {
	n := 0
	for _, s := range a.sizes() {
		n += s
	}
	return n
}

// tensorName is kind k's HF tensor name in layer l.
func (a *llamaArch) tensorName(k kind, l int) string {
	if !k.layered {
		return k.hf
	}
	return "model.layers." + strconv.Itoa(l) + "." + k.hf
}

// validate checks the shape is one the kernels can run.
func (a *llamaArch) validate() error {
	switch {
	case a.L < 1 || a.L > 1024:
		return fmt.Errorf("%w: num_hidden_layers=%d", ErrConfig, a.L)
	case a.C < 1 || a.C > 1<<16:
		return fmt.Errorf("%w: hidden_size=%d", ErrConfig, a.C)
	case a.NH < 1 || a.KVH < 1 || a.NH%a.KVH != 0:
		return fmt.Errorf("%w: num_attention_heads=%d num_key_value_heads=%d: key/value heads must divide query heads", ErrConfig, a.NH, a.KVH)
	case a.HD < 2 || a.HD%2 != 0 || a.HD > 1024:
		return fmt.Errorf("%w: head_dim=%d: RoPE needs an even head size", ErrConfig, a.HD)
	case a.I < 1 || a.I > 1<<18:
		return fmt.Errorf("%w: intermediate_size=%d", ErrConfig, a.I)
	case a.V < 2 || a.V > 1<<22:
		return fmt.Errorf("%w: vocab_size=%d", ErrConfig, a.V)
	case a.ctx < 1:
		return fmt.Errorf("%w: context %d", ErrConfig, a.ctx)
	case !(a.eps > 0):
		return fmt.Errorf("%w: rms_norm_eps=%v", ErrConfig, a.eps)
	case len(a.invFreq) != a.HD/2:
		return fmt.Errorf("%w: %d RoPE inverse frequencies for head_dim %d", ErrConfig, len(a.invFreq), a.HD)
	}
	if n := a.numParams(); n > 1<<34 {
		return fmt.Errorf("%w: %d parameters is too many", ErrConfig, n)
	}
	return nil
}

// matmulParams is the number of weights used in matmuls per token.
func (a *llamaArch) matmulParams() int {
	QD, KD := a.NH*a.HD, a.KVH*a.HD
	return a.L*(a.C*QD+2*a.C*KD+QD*a.C+3*a.C*a.I) + a.V*a.C
}

// Llama is a decoder of the Llama family on a compute.Backend: Llama,
// Qwen2, Qwen3, Mistral, SmolLM. Its weights live in one backend buffer
// with a view per tensor; gradients and AdamW moments are allocated on the
// first backward / step; backend errors are sticky and checked with Sync
// once per call. A Llama is not safe for concurrent use.
type Llama struct {
	arch  llamaArch
	cfg   hf.Config // what the model was built from; Save writes it back
	be    compute.Backend
	Optim Optim
	// DecodeTransposed keeps a transposed copy of the matmul weights for
	// generation on backends with compute.MatmulTransposer: a second copy of
	// the weights, which gave about 1.25× the tokens/s at batch 32 on an
	// AMD Zen 4 (SmolLM2-135M shape) and nothing on a Zen 5, whose
	// AVX-512 units pack the weights as fast as it streams them. At batch
	// 1 the weights as stored are faster (gemm.Gemv: 49 against 34
	// tokens/s on the Zen 4). Off by default, so a model costs one copy of
	// its weights.
	DecodeTransposed bool

	sizes    [numKinds]int
	kinds    [numKinds]kind
	nparams  int
	params   compute.Buffer
	pv       lviews
	grads    compute.Buffer
	gv       lviews
	mom, vel compute.Buffer
	momV     lviews
	velV     lviews
	step     int

	a    *lacts
	rope *ropeTables

	lr  *loraState // adapters (lora.go); the base is frozen while it has any
	la  *loraActs
	bf  *bf16Base // the base's matrices in BF16 (llama_bf16.go), or nil
	fu  fusedOps  // the backend's fused kernels the model uses (llama_fused.go)
	amp *ampState // mixed precision: BF16 copies of the float32 matrices (llama_amp.go), or nil

	wver int
	tw   *ltransposed
	// kept is the last Generate's decode state (KV cache and scratch),
	// reused by the next call with as many rows and no more positions: a
	// fresh cache costs a page fault on every first write, about 4% of a
	// 512-token prefill.
	kept *ldecode
}

// lviews are per-tensor views of a flat parameter-shaped buffer.
type lviews struct {
	all    [numKinds]compute.Buffer // whole kind (nil when absent)
	layers []llayerViews
	head   compute.Buffer // lm_head, or embed_tokens when tied
}

type llayerViews struct {
	attnNorm, q, qb, k, kb, v, vb, qNorm, kNorm, o, ob compute.Buffer
	mlpNorm, gate, gateb, up, upb, down, downb         compute.Buffer
}

func (v *llayerViews) kind(k int) *compute.Buffer {
	switch k {
	case kAttnNorm:
		return &v.attnNorm
	case kQ:
		return &v.q
	case kQb:
		return &v.qb
	case kK:
		return &v.k
	case kKb:
		return &v.kb
	case kV:
		return &v.v
	case kVb:
		return &v.vb
	case kQNorm:
		return &v.qNorm
	case kKNorm:
		return &v.kNorm
	case kO:
		return &v.o
	case kOb:
		return &v.ob
	case kMLPNorm:
		return &v.mlpNorm
	case kGate:
		return &v.gate
	case kGateb:
		return &v.gateb
	case kUp:
		return &v.up
	case kUpb:
		return &v.upb
	case kDown:
		return &v.down
	case kDownb:
		return &v.downb
	}
	return nil
}

// newLlamaEmpty allocates zero weights and their views.
func newLlamaEmpty(be compute.Backend, arch llamaArch, cfg hf.Config) (*Llama, error) {
	return newLlamaEmptyAs(be, arch, cfg, false)
}

// newLlamaEmptyAs is newLlamaEmpty with the base's matrices in BF16 when
// bf16 is set.
func newLlamaEmptyAs(be compute.Backend, arch llamaArch, cfg hf.Config, bf16 bool) (*Llama, error) {
	if err := arch.validate(); err != nil {
		return nil, err
	}
	m := &Llama{arch: arch, cfg: cfg, be: be, Optim: DefaultOptim(), sizes: arch.sizes(), kinds: arch.kinds(), nparams: arch.numParams(), fu: findFused(be)}
	if bf16 {
		m.bf = &bf16Base{cur: -1}
	}
	var err error
	if m.params, m.pv, err = m.allocParams("weights"); err != nil {
		return nil, err
	}
	if bf16 {
		if err := m.allocBF16(); err != nil {
			m.Free()
			return nil, err
		}
	}
	return m, nil
}

func (m *Llama) allocParams(what string) (compute.Buffer, lviews, error) {
	n := 0
	for k := range m.sizes {
		n += m.devSize(k)
	}
	buf, err := m.be.Alloc(n)
	if err != nil {
		return nil, lviews{}, fmt.Errorf("policy: allocate %s (%d floats): %w", what, n, err)
	}
	v, err := m.makeViews(buf)
	if err != nil {
		m.be.Free(buf)
		return nil, lviews{}, fmt.Errorf("policy: %s views: %w", what, err)
	}
	return buf, v, nil
}

func (m *Llama) makeViews(buf compute.Buffer) (lviews, error) {
	var v lviews
	var err error
	view := func(b compute.Buffer, off, n int) compute.Buffer {
		x, e := m.be.View(b, off, n)
		if e != nil && err == nil {
			err = e
		}
		return x
	}
	off := 0
	for k := range m.sizes {
		if n := m.devSize(k); n > 0 {
			v.all[k] = view(buf, off, n)
			off += n
		}
	}
	v.layers = make([]llayerViews, m.arch.L)
	for k, kd := range m.kinds {
		if !kd.layered || m.devSize(k) == 0 {
			continue
		}
		per := m.sizes[k] / m.arch.L
		for l := range v.layers {
			*v.layers[l].kind(k) = view(v.all[k], l*per, per)
		}
	}
	v.head = v.all[kHead]
	if m.arch.tied {
		v.head = v.all[kEmbed]
	}
	return v, err
}

// initRandom draws HF's initialisation: matrices and the embedding from
// N(0, initializer_range), biases 0, norm gains 1.
func (m *Llama) initRandom(seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	// host memory is filled in place (no second copy of a large model)
	var host []float32
	h, inPlace := m.params.(hostData)
	if inPlace {
		host = h.Data()[:m.nparams]
	} else {
		host = make([]float32, m.nparams)
	}
	off := 0
	std := m.arch.initStd
	if std <= 0 {
		std = 0.02
	}
	for k, kd := range m.kinds {
		x := host[off : off+m.sizes[k]]
		switch kd.init {
		case initZero:
			clear(x)
		case initOne:
			for i := range x {
				x[i] = 1
			}
		case initNormal:
			for i := range x {
				x[i] = float32(r.NormFloat64() * std)
			}
		}
		off += len(x)
	}
	if inPlace {
		m.wver++
		return m.be.Sync()
	}
	return m.SetWeights(host)
}

// ContextLen is the longest sequence the model takes (positions 0..ContextLen-1).
func (m *Llama) ContextLen() int { return m.arch.ctx }

// VocabSize is the number of logits (may exceed the tokenizer's vocabulary).
func (m *Llama) VocabSize() int { return m.arch.V }

// Family is the HF model_type ("llama", "qwen2", "qwen3", "mistral").
func (m *Llama) Family() string { return m.arch.family }

// Backend returns the backend the model runs on.
func (m *Llama) Backend() compute.Backend { return m.be }

// NumParams is the number of parameters (a tied head counted once).
func (m *Llama) NumParams() int { return m.nparams }

// Steps is the number of optimizer steps taken.
func (m *Llama) Steps() int { return m.step }

// Optimizer returns the AdamW settings.
func (m *Llama) Optimizer() Optim { return m.Optim }

// SetOptimizer replaces the AdamW settings (moments are kept).
func (m *Llama) SetOptimizer(o Optim) { m.Optim = o }

// ForwardFLOPsPerToken is the forward pass's floating-point operations per
// token at sequence length T: the matmuls plus attention's scores and
// weighted sum over all T positions (the usual estimate).
func (m *Llama) ForwardFLOPsPerToken(T int) int {
	return 2*m.arch.matmulParams() + 4*m.arch.L*m.arch.NH*m.arch.HD*T
}

// TrainFLOPsPerToken is forward plus backward, about 3x the forward.
func (m *Llama) TrainFLOPsPerToken(T int) int { return 3 * m.ForwardFLOPsPerToken(T) }

// Weights downloads all parameters as one flat array, kind-major: each
// tensor kind stacked over layers, in the order of the k* constants.
func (m *Llama) Weights() ([]float32, error) {
	w := make([]float32, m.nparams)
	if m.bf != nil {
		if err := m.weightsBF16(w); err != nil {
			return nil, fmt.Errorf("policy: download weights: %w", err)
		}
		return w, nil
	}
	m.be.Download(w, m.params)
	if err := m.be.Sync(); err != nil {
		return nil, fmt.Errorf("policy: download weights: %w", err)
	}
	return w, nil
}

// SetWeights replaces all parameters with w (as returned by Weights).
// Optimizer state is kept.
func (m *Llama) SetWeights(w []float32) error {
	if len(w) != m.nparams {
		return fmt.Errorf("policy: SetWeights: %d values for %d parameters: %w", len(w), m.nparams, ErrBatch)
	}
	m.wver++
	if m.bf != nil {
		if err := m.setWeightsBF16(w); err != nil {
			return fmt.Errorf("policy: upload weights: %w", err)
		}
		return nil
	}
	m.be.Upload(m.params, w)
	if err := m.be.Sync(); err != nil {
		return fmt.Errorf("policy: upload weights: %w", err)
	}
	return nil
}

// sameArch reports whether two shapes have the same parameters and
// behaviour.
func (a *llamaArch) same(b *llamaArch) bool {
	if a.family != b.family || a.L != b.L || a.C != b.C || a.NH != b.NH || a.KVH != b.KVH || a.HD != b.HD ||
		a.I != b.I || a.V != b.V || a.ctx != b.ctx || a.eps != b.eps || a.attnFactor != b.attnFactor ||
		a.qkvBias != b.qkvBias || a.oBias != b.oBias || a.mlpBias != b.mlpBias || a.qkNorm != b.qkNorm ||
		a.tied != b.tied || len(a.invFreq) != len(b.invFreq) {
		return false
	}
	for i := range a.invFreq {
		if a.invFreq[i] != b.invFreq[i] {
			return false
		}
	}
	return true
}

// CopyWeightsFrom copies src's weights into m; src must be a *Llama of the
// same shape. Across backends it goes through host memory. It copies the
// base only: adapters stay as they are (Clone copies them too).
func (m *Llama) CopyWeightsFrom(src LM) error {
	s, ok := src.(*Llama)
	if !ok {
		return fmt.Errorf("policy: CopyWeightsFrom: source is a %T, not a *Llama: %w", src, ErrConfig)
	}
	if !s.arch.same(&m.arch) {
		return fmt.Errorf("policy: CopyWeightsFrom: %s shape %s differs from %s: %w", s.arch.family, s.arch.describe(), m.arch.describe(), ErrConfig)
	}
	if compute.Backend(s.be) == compute.Backend(m.be) && s.bf == nil && m.bf == nil {
		m.be.Copy(m.params, s.params, m.nparams)
		m.wver++
		return m.be.Sync()
	}
	w, err := s.Weights()
	if err != nil {
		return err
	}
	return m.SetWeights(w)
}

func (a *llamaArch) describe() string {
	return fmt.Sprintf("{layers %d hidden %d heads %d/%d head_dim %d mlp %d vocab %d context %d}", a.L, a.C, a.NH, a.KVH, a.HD, a.I, a.V, a.ctx)
}

// Clone returns a copy of the weights and optimizer settings on be (nil:
// the same backend), without gradients or optimizer moments.
func (m *Llama) Clone(be compute.Backend) (*Llama, error) {
	if be == nil {
		be = m.be
	}
	c, err := newLlamaEmptyAs(be, m.arch, m.cfg, m.bf != nil)
	if err != nil {
		return nil, err
	}
	c.Optim, c.DecodeTransposed = m.Optim, m.DecodeTransposed
	if m.amp != nil {
		if err := c.SetComputeDType(hf.BF16); err != nil {
			c.Free()
			return nil, err
		}
	}
	if err := c.CopyWeightsFrom(m); err != nil {
		c.Free()
		return nil, err
	}
	if err := m.cloneAdaptersTo(c); err != nil {
		c.Free()
		return nil, err
	}
	return c, nil
}

// CloneLM is Clone returning the LM interface.
func (m *Llama) CloneLM(be compute.Backend) (LM, error) { return m.Clone(be) }

// Free releases the model's backend buffers. The model must not be used
// afterwards.
func (m *Llama) Free() {
	for _, b := range []compute.Buffer{m.params, m.grads, m.mom, m.vel} {
		if b != nil {
			m.be.Free(b)
		}
	}
	m.params, m.grads, m.mom, m.vel = nil, nil, nil, nil
	m.freeActs()
	m.freeLoraActs()
	m.freeTransposed()
	if m.kept != nil {
		m.freeDecode(m.kept)
		m.kept = nil
	}
	m.freeBF16()
	m.amp = nil
	if m.lr != nil {
		for _, ad := range m.lr.order {
			ad.free()
		}
		m.lr = nil
	}
	if m.rope != nil {
		m.be.Free(m.rope.cos)
		m.be.Free(m.rope.sin)
		m.rope = nil
	}
}

// ropeTables are cos and sin of position·invFreq for positions
// 0..n-1, (n, HD/2), grown on demand up to the context length.
type ropeTables struct {
	n        int
	cos, sin compute.Buffer
}

// ensureRope makes sure the tables cover positions 0..n-1.
func (m *Llama) ensureRope(n int) (*ropeTables, error) {
	if m.rope != nil && m.rope.n >= n {
		return m.rope, nil
	}
	// grow geometrically so a growing generation does not rebuild each time
	if m.rope != nil {
		n = max(n, 2*m.rope.n)
	}
	n = min(max(n, 64), m.arch.ctx)
	half := m.arch.HD / 2
	c, s := make([]float32, n*half), make([]float32, n*half)
	att := m.arch.attnFactor
	if att == 0 {
		att = 1
	}
	for p := 0; p < n; p++ {
		for i, f := range m.arch.invFreq {
			// HF computes the angle in float32 (inv_freq @ position_ids)
			ang := float64(float32(p) * float32(f))
			c[p*half+i] = float32(math.Cos(ang) * att)
			s[p*half+i] = float32(math.Sin(ang) * att)
		}
	}
	cb, err := m.be.Alloc(n * half)
	if err != nil {
		return nil, fmt.Errorf("policy: allocate RoPE tables: %w", err)
	}
	sb, err := m.be.Alloc(n * half)
	if err != nil {
		m.be.Free(cb)
		return nil, fmt.Errorf("policy: allocate RoPE tables: %w", err)
	}
	m.be.Upload(cb, c)
	m.be.Upload(sb, s)
	if m.rope != nil {
		m.be.Free(m.rope.cos)
		m.be.Free(m.rope.sin)
	}
	m.rope = &ropeTables{n: n, cos: cb, sin: sb}
	return m.rope, nil
}
