package policy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
)

// This file holds LoRA (Hu et al. 2021, as Hugging Face PEFT implements it)
// on the Llama family: named adapters on one frozen base.
//
// An adapter adds to a target projection y = x·Wᵀ(+b) the low-rank term
//
//	y += s · (x·Aᵀ)·Bᵀ      A (r, in), B (out, r), s = alpha/r (alpha/√r with rsLoRA)
//
// computed with the backend's ordinary matmuls (so any compute.Backend
// runs it; in BF16 on a backend with compute.MixedMatmuler when the base
// computes in BF16): u = s·x·Aᵀ (N, r), then y += u·Bᵀ. The backward is the same two
// matmuls transposed. While a model holds an adapter its base is frozen:
// no gradient buffers or AdamW moments exist for it, and Step updates the
// adapters that received gradients since ZeroGrad, each with its own
// AdamW moments, step count and global-norm clipping, so one role's update
// never touches another's state.
//
// Rows choose their adapter (Batch.Adapters, GenerateOptions.Adapters; ""
// means the active adapter, NoAdapter the bare base). A batch's rows are
// ordered by adapter internally, so the base matmuls run once over all rows
// and each adapter's products over its contiguous group of rows.

// LoRA target modules, in the order of a layer's projections.
const (
	tQ = iota
	tK
	tV
	tO
	tGate
	tUp
	tDown
	numTargets
)

// loraTargets are PEFT's module names; loraPaths the modules' paths within
// a layer (HF names).
var (
	loraTargets = [numTargets]string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
	loraPaths   = [numTargets]string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}
)

// ErrAdapter reports an unknown adapter name, an invalid LoRA
// configuration or an adapter file that does not fit the model.
var ErrAdapter = errors.New("policy: bad adapter")

// NoAdapter, as a row's adapter name, runs the bare base model for that row
// (a reference policy for a KL term, say) whatever adapter is active.
const NoAdapter = "-"

// LoRAConfig is an adapter's shape: PEFT's LoraConfig fields that troupe
// implements.
type LoRAConfig struct {
	// Rank is r, the inner dimension of A (r, in) and B (out, r).
	Rank int
	// Alpha is lora_alpha; the update is scaled by Alpha/Rank
	// (Alpha/sqrt(Rank) with RSLoRA).
	Alpha float64
	// Targets lists the projections adapted, by PEFT's module names
	// (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj);
	// nil means q_proj and v_proj, PEFT's default for Llama and Qwen.
	Targets []string
	// RSLoRA is use_rslora (rank-stabilized scaling alpha/sqrt(r)).
	RSLoRA bool
	// Dropout is lora_dropout, kept for the saved config. troupe applies
	// no dropout (it changes nothing at inference; training runs as with 0).
	Dropout float64
	// BaseModel is base_model_name_or_path in the saved adapter_config.json.
	BaseModel string
}

// DefaultLoRA is rank 16, alpha 32, on every projection of a block.
func DefaultLoRA() LoRAConfig {
	return LoRAConfig{Rank: 16, Alpha: 32, Targets: loraTargets[:]}
}

// Scaling is the factor s multiplying the adapter's product.
func (c LoRAConfig) Scaling() float64 {
	if c.RSLoRA {
		return c.Alpha / math.Sqrt(float64(c.Rank))
	}
	return c.Alpha / float64(c.Rank)
}

// Matches reports whether adapters of c and o compute alike: the same
// rank, scaling and target modules.
func (c LoRAConfig) Matches(o LoRAConfig) bool {
	a, errA := c.targetMask()
	b, errB := o.targetMask()
	return errA == nil && errB == nil && a == b && c.Rank == o.Rank && c.Scaling() == o.Scaling()
}

// targetMask resolves Targets (nil: q_proj, v_proj).
func (c LoRAConfig) targetMask() ([numTargets]bool, error) {
	var on [numTargets]bool
	names := c.Targets
	if names == nil {
		names = []string{"q_proj", "v_proj"}
	}
	if len(names) == 0 {
		return on, fmt.Errorf("%w: no target modules", ErrAdapter)
	}
	for _, n := range names {
		i := slices.Index(loraTargets[:], n)
		if i < 0 {
			return on, fmt.Errorf("%w: unknown target module %q (want some of %v)", ErrAdapter, n, loraTargets)
		}
		on[i] = true
	}
	return on, nil
}

func (c LoRAConfig) validate() error {
	switch {
	case c.Rank < 1 || c.Rank > 1<<14:
		return fmt.Errorf("%w: rank %d", ErrAdapter, c.Rank)
	case !(c.Alpha > 0) || math.IsInf(c.Alpha, 0):
		return fmt.Errorf("%w: lora_alpha %v", ErrAdapter, c.Alpha)
	case !(c.Dropout >= 0 && c.Dropout < 1):
		return fmt.Errorf("%w: lora_dropout %v", ErrAdapter, c.Dropout)
	}
	_, err := c.targetMask()
	return err
}

// targetNames lists the enabled targets in layer order.
func targetNames(on [numTargets]bool) []string {
	var out []string
	for t, ok := range on {
		if ok {
			out = append(out, loraTargets[t])
		}
	}
	return out
}

// loraDims are target t's input and output widths.
func (a *llamaArch) loraDims(t int) (in, out int) {
	QD, KD := a.NH*a.HD, a.KVH*a.HD
	switch t {
	case tQ:
		return a.C, QD
	case tK, tV:
		return a.C, KD
	case tO:
		return QD, a.C
	case tGate, tUp:
		return a.C, a.I
	default: // tDown
		return a.I, a.C
	}
}

// Adapter is one named LoRA adapter of a Llama: A and B for each target of
// each layer, in one backend buffer, with its own gradients, AdamW moments
// and step count.
type Adapter struct {
	name  string
	cfg   LoRAConfig
	m     *Llama
	on    [numTargets]bool
	scale float32
	idx   int // position in the model's adapter order

	n                       int // parameters
	params, grads, mom, vel compute.Buffer
	pv, gv, mv, vv          []loraViews // per layer
	step                    int
	touched                 bool // received gradients since ZeroGrad
}

// loraViews are one layer's A and B views (nil for targets not adapted).
type loraViews struct{ a, b [numTargets]compute.Buffer }

// Name is the adapter's name.
func (ad *Adapter) Name() string { return ad.name }

// Config is the adapter's LoRA configuration (Targets resolved).
func (ad *Adapter) Config() LoRAConfig {
	c := ad.cfg
	c.Targets = targetNames(ad.on)
	return c
}

// NumParams is the number of trainable parameters (all A and B).
func (ad *Adapter) NumParams() int { return ad.n }

// Steps is the number of optimizer steps this adapter took.
func (ad *Adapter) Steps() int { return ad.step }

// loraState is a Llama's adapters and the per-call row grouping.
type loraState struct {
	ads    map[string]*Adapter
	order  []*Adapter
	active *Adapter // rows naming "" use it; nil: the base
	groups []loraGroup
}

// loraGroup is a run of token rows [t0, t0+n) using adapter ad.
type loraGroup struct {
	ad    *Adapter
	t0, n int
}

// loraActs are the adapters' activations: u = s·x·Aᵀ per layer and target
// (kept for the backward when training; one shared set otherwise), the
// output of the B product before it is added, and the backward's du.
type loraActs struct {
	capBT, maxR, maxOut int
	train               bool
	mask                [numTargets]bool
	u                   [][numTargets]compute.Buffer // (capBT, maxR), a group's block at its first token row
	tmp, du             compute.Buffer
	all                 []compute.Buffer
}

// frozen reports whether the base takes no gradients: it has adapters,
// or its matrices are BF16.
func (m *Llama) frozen() bool { return m.bf != nil || m.hasAdapters() }

// hasAdapters reports whether the model holds any adapter.
func (m *Llama) hasAdapters() bool { return m.lr != nil && len(m.lr.order) > 0 }

// adapterTraining reports the error of training a frozen base without
// adapters.
func (m *Llama) adapterTraining() error {
	if !m.hasAdapters() {
		return fmt.Errorf("%w: the BF16 base is frozen; add an adapter to train", ErrConfig)
	}
	return nil
}

// AddAdapter adds a LoRA adapter initialised as PEFT does: every A drawn
// from kaiming_uniform(a=√5), i.e. U(-1/√in, 1/√in), every B zero (so the
// new adapter leaves the model's outputs unchanged), from seed. The base
// becomes frozen: its gradients and AdamW moments, if any, are freed. The
// first adapter added becomes the active one.
func (m *Llama) AddAdapter(name string, cfg LoRAConfig, seed uint64) (*Adapter, error) {
	ad, err := m.newAdapter(name, cfg)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, 0x4c6f5241)) // "LoRA"
	host := make([]float32, ad.n)
	off := 0
	for l := 0; l < m.arch.L; l++ {
		for t, on := range ad.on {
			if !on {
				continue
			}
			in, out := m.arch.loraDims(t)
			bound := 1 / math.Sqrt(float64(in))
			for i := range cfg.Rank * in {
				host[off+i] = float32((2*r.Float64() - 1) * bound)
			}
			off += cfg.Rank*in + out*cfg.Rank // B stays zero
		}
	}
	m.be.Upload(ad.params, host)
	if err := m.be.Sync(); err != nil {
		ad.free()
		return nil, fmt.Errorf("policy: adapter %q: upload: %w", name, err)
	}
	m.attach(ad)
	return ad, nil
}

// newAdapter validates and allocates an adapter (zero weights), not yet
// attached to the model.
func (m *Llama) newAdapter(name string, cfg LoRAConfig) (*Adapter, error) {
	if name == "" || name == NoAdapter {
		return nil, fmt.Errorf("%w: adapter name %q is reserved", ErrAdapter, name)
	}
	if m.lr != nil && m.lr.ads[name] != nil {
		return nil, fmt.Errorf("%w: adapter %q already exists", ErrAdapter, name)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("adapter %q: %w", name, err)
	}
	on, _ := cfg.targetMask()
	cfg.Targets = targetNames(on)
	ad := &Adapter{name: name, cfg: cfg, m: m, on: on, scale: float32(cfg.Scaling())}
	for t, ok := range on {
		if ok {
			in, out := m.arch.loraDims(t)
			ad.n += cfg.Rank * (in + out)
		}
	}
	ad.n *= m.arch.L
	var err error
	if ad.params, ad.pv, err = ad.alloc("weights"); err != nil {
		return nil, err
	}
	return ad, nil
}

// alloc allocates an adapter-shaped buffer and its per-layer views: per
// layer, per enabled target, A (r, in) then B (out, r).
func (ad *Adapter) alloc(what string) (compute.Buffer, []loraViews, error) {
	be := ad.m.be
	buf, err := be.Alloc(ad.n)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: adapter %q: allocate %s (%d floats): %w", ad.name, what, ad.n, err)
	}
	vs := make([]loraViews, ad.m.arch.L)
	off := 0
	r := ad.cfg.Rank
	for l := range vs {
		for t, on := range ad.on {
			if !on {
				continue
			}
			in, out := ad.m.arch.loraDims(t)
			a, e1 := be.View(buf, off, r*in)
			b, e2 := be.View(buf, off+r*in, out*r)
			if err = errors.Join(e1, e2); err != nil {
				be.Free(buf)
				return nil, nil, fmt.Errorf("policy: adapter %q: %s views: %w", ad.name, what, err)
			}
			vs[l].a[t], vs[l].b[t] = a, b
			off += r * (in + out)
		}
	}
	return buf, vs, nil
}

func (ad *Adapter) free() {
	for _, b := range []compute.Buffer{ad.params, ad.grads, ad.mom, ad.vel} {
		if b != nil {
			ad.m.be.Free(b)
		}
	}
	ad.params, ad.grads, ad.mom, ad.vel = nil, nil, nil, nil
}

// attach adds a ready adapter to the model and freezes the base.
func (m *Llama) attach(ad *Adapter) {
	if m.lr == nil {
		m.lr = &loraState{ads: map[string]*Adapter{}}
	}
	ad.idx = len(m.lr.order)
	m.lr.ads[ad.name] = ad
	m.lr.order = append(m.lr.order, ad)
	if m.lr.active == nil && len(m.lr.order) == 1 {
		m.lr.active = ad
	}
	// the base is frozen from now on: its gradients and moments go
	for _, b := range []compute.Buffer{m.grads, m.mom, m.vel} {
		if b != nil {
			m.be.Free(b)
		}
	}
	m.grads, m.mom, m.vel = nil, nil, nil
	m.gv, m.momV, m.velV = lviews{}, lviews{}, lviews{}
	m.freeLoraActs() // sized for the old set of adapters
}

// Adapter returns the named adapter, or nil.
func (m *Llama) Adapter(name string) *Adapter {
	if m.lr == nil {
		return nil
	}
	return m.lr.ads[name]
}

// Adapters lists the adapters' names in the order they were added.
func (m *Llama) Adapters() []string {
	if m.lr == nil {
		return nil
	}
	out := make([]string, len(m.lr.order))
	for i, ad := range m.lr.order {
		out[i] = ad.name
	}
	return out
}

// SetActiveAdapter chooses the adapter of rows that name none (""); name
// "" or NoAdapter makes such rows use the bare base.
func (m *Llama) SetActiveAdapter(name string) error {
	if name == "" || name == NoAdapter {
		if m.lr != nil {
			m.lr.active = nil
		}
		return nil
	}
	ad := m.Adapter(name)
	if ad == nil {
		return fmt.Errorf("%w: no adapter %q (have %v)", ErrAdapter, name, m.Adapters())
	}
	m.lr.active = ad
	return nil
}

// ActiveAdapter is the name of the active adapter ("" for none).
func (m *Llama) ActiveAdapter() string {
	if m.lr == nil || m.lr.active == nil {
		return ""
	}
	return m.lr.active.name
}

// RemoveAdapter drops an adapter and frees its buffers. Without adapters
// the base is trainable again.
func (m *Llama) RemoveAdapter(name string) error {
	ad := m.Adapter(name)
	if ad == nil {
		return fmt.Errorf("%w: no adapter %q (have %v)", ErrAdapter, name, m.Adapters())
	}
	ad.free()
	delete(m.lr.ads, name)
	m.lr.order = slices.DeleteFunc(m.lr.order, func(x *Adapter) bool { return x == ad })
	for i, x := range m.lr.order {
		x.idx = i
	}
	if m.lr.active == ad {
		m.lr.active = nil
	}
	m.freeLoraActs()
	return nil
}

// Weights downloads A and B of every target and layer as one flat array
// (per layer, per target in q, k, v, o, gate, up, down order, A then B).
func (ad *Adapter) Weights() ([]float32, error) {
	w := make([]float32, ad.n)
	ad.m.be.Download(w, ad.params)
	if err := ad.m.be.Sync(); err != nil {
		return nil, fmt.Errorf("policy: adapter %q: download: %w", ad.name, err)
	}
	return w, nil
}

// SetWeights replaces A and B with w (as Weights returns them). AdamW
// moments are kept.
func (ad *Adapter) SetWeights(w []float32) error {
	if len(w) != ad.n {
		return fmt.Errorf("policy: adapter %q: SetWeights: %d values for %d parameters: %w", ad.name, len(w), ad.n, ErrBatch)
	}
	ad.m.be.Upload(ad.params, w)
	if err := ad.m.be.Sync(); err != nil {
		return fmt.Errorf("policy: adapter %q: upload: %w", ad.name, err)
	}
	return nil
}

// Gradients downloads the accumulated gradients of A and B (Weights'
// layout); nil before the first backward.
func (ad *Adapter) Gradients() ([]float32, error) {
	if ad.grads == nil {
		return nil, nil
	}
	g := make([]float32, ad.n)
	ad.m.be.Download(g, ad.grads)
	if err := ad.m.be.Sync(); err != nil {
		return nil, fmt.Errorf("policy: adapter %q: download gradients: %w", ad.name, err)
	}
	return g, nil
}

// ---------------------------------------------------------------- rows

// noAdapters rejects adapter names given to a model without adapters:
// only "" and NoAdapter mean the bare model.
func noAdapters(names []string) error {
	for b, n := range names {
		if n != "" && n != NoAdapter {
			return fmt.Errorf("%w: row %d names adapter %q; the model has none", ErrAdapter, b, n)
		}
	}
	return nil
}

// planRows resolves each row's adapter (names may be nil: every row uses
// the active adapter) and orders the rows so each adapter's rows are
// contiguous, base rows first, then in adapter order; the order within an
// adapter is kept. It returns the adapter of each slot and slot[b], the
// slot of row b (nil when the order is unchanged).
func (m *Llama) planRows(names []string, B int) ([]*Adapter, []int, error) {
	if names != nil && len(names) != B {
		return nil, nil, fmt.Errorf("%w: %d adapter names for %d rows", ErrBatch, len(names), B)
	}
	if m.lr == nil || len(m.lr.order) == 0 {
		return nil, nil, noAdapters(names)
	}
	rows := make([]*Adapter, B)
	used := false
	for b := range rows {
		n := ""
		if names != nil {
			n = names[b]
		}
		switch n {
		case "":
			rows[b] = m.lr.active
		case NoAdapter:
		default:
			rows[b] = m.lr.ads[n]
			if rows[b] == nil {
				return nil, nil, fmt.Errorf("%w: row %d names adapter %q (have %v)", ErrAdapter, b, n, m.Adapters())
			}
		}
		used = used || rows[b] != nil
	}
	if !used {
		return nil, nil, nil
	}
	key := func(b int) int {
		if rows[b] == nil {
			return -1
		}
		return rows[b].idx
	}
	order := make([]int, B) // order[slot] = row
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return key(x) - key(y) })
	var slot []int
	sorted := make([]*Adapter, B)
	for s, b := range order {
		sorted[s] = rows[b]
		if s != b && slot == nil {
			slot = make([]int, B)
		}
	}
	if slot != nil {
		for s, b := range order {
			slot[b] = s
		}
	}
	return sorted, slot, nil
}

// setGroups records the runs of rows (T tokens each) sharing an adapter,
// for the next forward and backward. rows nil means no adapter work.
func (m *Llama) setGroups(rows []*Adapter, T int) {
	if m.lr == nil {
		return
	}
	m.lr.groups = m.lr.groups[:0]
	for b := 0; b < len(rows); {
		e := b + 1
		for e < len(rows) && rows[e] == rows[b] {
			e++
		}
		if rows[b] != nil {
			m.lr.groups = append(m.lr.groups, loraGroup{ad: rows[b], t0: b * T, n: (e - b) * T})
		}
		b = e
	}
}

// ---------------------------------------------------------------- activations

func (m *Llama) freeLoraActs() {
	if m.la == nil {
		return
	}
	for _, b := range m.la.all {
		m.be.Free(b)
	}
	m.la = nil
}

// loraNeeds is the union of the adapters' targets, the largest rank and
// the largest output width of an adapted projection.
func (m *Llama) loraNeeds() (mask [numTargets]bool, maxR, maxOut int) {
	for _, ad := range m.lr.order {
		maxR = max(maxR, ad.cfg.Rank)
		for t, on := range ad.on {
			if on {
				mask[t] = true
				_, out := m.arch.loraDims(t)
				maxOut = max(maxOut, out)
			}
		}
	}
	return
}

// ensureLoraActs sizes m.la for BT token rows (per layer when train).
func (m *Llama) ensureLoraActs(BT int, train bool) error {
	if !m.hasAdapters() {
		return nil
	}
	mask, maxR, maxOut := m.loraNeeds()
	if la := m.la; la != nil && la.capBT >= BT && (la.train || !train) && la.mask == mask && la.maxR >= maxR && la.maxOut >= maxOut {
		return nil
	}
	if m.la != nil {
		BT, train = max(BT, m.la.capBT), train || m.la.train
		m.freeLoraActs()
	}
	la, err := m.newLoraActs(BT, train, mask, maxR, maxOut)
	if err != nil {
		return err
	}
	m.la = la
	return nil
}

func (m *Llama) newLoraActs(BT int, train bool, mask [numTargets]bool, maxR, maxOut int) (*loraActs, error) {
	la := &loraActs{capBT: BT, maxR: maxR, maxOut: maxOut, train: train, mask: mask}
	var err error
	f := func(n int) compute.Buffer {
		if err != nil {
			return nil
		}
		var b compute.Buffer
		if b, err = m.be.Alloc(n); err == nil {
			la.all = append(la.all, b)
		}
		return b
	}
	layers := 1
	if train {
		layers = m.arch.L
	}
	la.u = make([][numTargets]compute.Buffer, layers)
	for l := range la.u {
		for t, on := range mask {
			if on {
				la.u[l][t] = f(BT * maxR)
			}
		}
	}
	la.tmp = f(BT * maxOut)
	if train {
		la.du = f(BT * maxR)
	}
	if err != nil {
		for _, b := range la.all {
			m.be.Free(b)
		}
		return nil, fmt.Errorf("policy: allocate adapter activations for %d tokens: %w", BT, err)
	}
	return la, nil
}

// ---------------------------------------------------------------- forward and backward

// loraForward adds every group's adapter term for target t of layer l:
// y += s·(x·Aᵀ)·Bᵀ, x (N, in), y (N, out), keeping u = s·x·Aᵀ in la.
func (m *Llama) loraForward(la *loraActs, l, t int, y, x compute.Buffer) {
	if la == nil || m.lr == nil {
		return
	}
	be := m.be
	in, out := m.arch.loraDims(t)
	li := 0
	if la.train {
		li = l
	}
	for _, g := range m.lr.groups {
		ad := g.ad
		if !ad.on[t] {
			continue
		}
		r, lv := ad.cfg.Rank, &ad.pv[l]
		u := view(be, la.u[li][t], g.t0*la.maxR, g.n*r)
		tmp := view(be, la.tmp, 0, g.n*out)
		yg := view(be, y, g.t0*out, g.n*out)
		m.loraMatmul(u, view(be, x, g.t0*in, g.n*in), lv.a[t], g.n, in, r)
		be.Scale(u, ad.scale, g.n*r)
		m.loraMatmul(tmp, u, lv.b[t], g.n, r, out)
		be.ResidualForward(yg, yg, tmp, g.n*out)
	}
}

// loraBackward accumulates A's and B's gradients of target t of layer l
// and the term's contribution to dx, given dy (the gradient of the
// projection's output) and x (its input).
func (m *Llama) loraBackward(l, t int, dx, dy, x compute.Buffer) {
	la := m.la
	if la == nil || m.lr == nil {
		return
	}
	be := m.be
	in, out := m.arch.loraDims(t)
	for _, g := range m.lr.groups {
		ad := g.ad
		if !ad.on[t] {
			continue
		}
		ad.touched = true
		r, lv, gv := ad.cfg.Rank, &ad.pv[l], &ad.gv[l]
		u := view(be, la.u[l][t], g.t0*la.maxR, g.n*r)
		du := view(be, la.du, 0, g.n*r)
		be.Zero(du)
		m.loraMatmulBackward(du, gv.b[t], view(be, dy, g.t0*out, g.n*out), u, lv.b[t], g.n, r, out)
		be.Scale(du, ad.scale, g.n*r)
		m.loraMatmulBackward(view(be, dx, g.t0*in, g.n*in), gv.a[t], du, view(be, x, g.t0*in, g.n*in), lv.a[t], g.n, in, r)
	}
}

// loraMixed is the backend's MixedMatmuler when the base's products run in
// BF16 (mixed precision, a BF16 base): LoRA's products then run in BF16
// too, as autocast runs every Linear. Without the capability (gpu/compute/cpu)
// they stay float32.
func (m *Llama) loraMixed() compute.MixedMatmuler {
	if m.fu.mix == nil || m.ComputeDType() != hf.BF16 {
		return nil
	}
	return m.fu.mix
}

// loraMatmul is out (N, OC) = inp (N, C)·wᵀ for an adapter's A or B.
func (m *Llama) loraMatmul(out, inp, w compute.Buffer, N, C, OC int) {
	if mx := m.loraMixed(); mx != nil {
		mx.MatmulForwardMixed(out, inp, w, nil, N, C, OC)
		return
	}
	m.be.MatmulForward(out, inp, w, nil, N, C, OC)
}

// loraMatmulBackward is loraMatmul's backward: dinp += dout·w, dw +=
// doutᵀ·inp.
func (m *Llama) loraMatmulBackward(dinp, dw, dout, inp, w compute.Buffer, N, C, OC int) {
	if mx := m.loraMixed(); mx != nil {
		mx.MatmulBackwardMixed(dinp, dw, nil, dout, inp, w, N, C, OC)
		return
	}
	m.be.MatmulBackward(dinp, dw, nil, dout, inp, w, N, C, OC)
}

// ---------------------------------------------------------------- optimizer

// ensureAdapterGrads allocates every adapter's gradients.
func (m *Llama) ensureAdapterGrads() error {
	if err := m.adapterTraining(); err != nil {
		return err
	}
	for _, ad := range m.lr.order {
		if ad.grads != nil {
			continue
		}
		var err error
		if ad.grads, ad.gv, err = ad.alloc("gradients"); err != nil {
			return err
		}
		m.be.Zero(ad.grads)
	}
	return nil
}

// zeroAdapterGrads clears every adapter's gradients.
func (m *Llama) zeroAdapterGrads() error {
	if err := m.ensureAdapterGrads(); err != nil {
		return err
	}
	for _, ad := range m.lr.order {
		m.be.Zero(ad.grads)
		ad.touched = false
	}
	return m.be.Sync()
}

// stepAdapters is Step with a frozen base: one AdamW update of each adapter
// that received gradients since ZeroGrad, each clipped by its own global
// norm. It returns the norm over all of them (the square root of the sum
// of their squared norms).
func (m *Llama) stepAdapters() (float64, error) {
	if err := m.adapterTraining(); err != nil {
		return 0, err
	}
	be := m.be
	var total float64
	stepped := false
	for _, ad := range m.lr.order {
		if !ad.touched || ad.grads == nil {
			continue
		}
		if ad.mom == nil {
			var err error
			if ad.mom, ad.mv, err = ad.alloc("AdamW m"); err != nil {
				return 0, err
			}
			if ad.vel, ad.vv, err = ad.alloc("AdamW v"); err != nil {
				return 0, err
			}
		}
		norm := math.Sqrt(be.SumSquares(ad.grads, ad.n))
		if math.IsNaN(norm) || math.IsInf(norm, 0) {
			return norm, fmt.Errorf("policy: adapter %q: gradient norm is %v; step skipped", ad.name, norm)
		}
		total += norm * norm
		ad.step++
		o := m.Optim
		be.AdamWUpdate(ad.params, ad.grads, ad.mom, ad.vel, ad.n, compute.AdamW{LR: o.LR, Beta1: o.Beta1, Beta2: o.Beta2,
			Eps: o.Eps, WeightDecay: o.WeightDecay, Step: ad.step, GradScale: compute.ClipScale(norm, float64(o.ClipNorm))})
		stepped = true
	}
	if !stepped {
		return 0, fmt.Errorf("policy: Step: no adapter received gradients since ZeroGrad: %w", ErrBatch)
	}
	m.step++
	if err := be.Sync(); err != nil {
		return 0, fmt.Errorf("policy: AdamW: %w", err)
	}
	return math.Sqrt(total), nil
}

// ---------------------------------------------------------------- copies and merging

// cloneAdaptersTo copies every adapter's configuration and weights (not
// gradients or moments) to c, and the active adapter.
func (m *Llama) cloneAdaptersTo(c *Llama) error {
	if m.lr == nil {
		return nil
	}
	for _, ad := range m.lr.order {
		w, err := ad.Weights()
		if err != nil {
			return err
		}
		nad, err := c.newAdapter(ad.name, ad.cfg)
		if err != nil {
			return err
		}
		if err := nad.SetWeights(w); err != nil {
			nad.free()
			return err
		}
		c.attach(nad)
	}
	return c.SetActiveAdapter(m.ActiveAdapter())
}

// MergeAdapter adds the named adapter's s·B·A into the base weights and
// removes the adapter (PEFT's merge_and_unload for one adapter). Every row
// then sees the merged weights, so with several adapters prefer
// MergedClone.
func (m *Llama) MergeAdapter(name string) error {
	ad := m.Adapter(name)
	if ad == nil {
		return fmt.Errorf("%w: no adapter %q (have %v)", ErrAdapter, name, m.Adapters())
	}
	if err := m.mergeInto(ad); err != nil {
		return err
	}
	return m.RemoveAdapter(name)
}

// MergedClone returns a copy of the model on be (nil: the same backend)
// with the named adapter merged into its weights and no adapters: a plain
// model for inference or to save in Hugging Face's layout. m is unchanged.
func (m *Llama) MergedClone(name string, be compute.Backend) (*Llama, error) {
	ad := m.Adapter(name)
	if ad == nil {
		return nil, fmt.Errorf("%w: no adapter %q (have %v)", ErrAdapter, name, m.Adapters())
	}
	c, err := m.Clone(be)
	if err != nil {
		return nil, err
	}
	if err := c.SetBaseDType(hf.F32); err != nil { // merge at full precision
		c.Free()
		return nil, err
	}
	for _, n := range c.Adapters() {
		if n != name {
			if err := c.RemoveAdapter(n); err != nil {
				c.Free()
				return nil, err
			}
		}
	}
	if err := c.MergeAdapter(name); err != nil {
		c.Free()
		return nil, err
	}
	return c, nil
}

// mergeInto adds s·B·A to each adapted base weight W (out, in), as the
// accumulating input-gradient product of a matmul backward: W += (s·B)·A.
func (m *Llama) mergeInto(ad *Adapter) error {
	if m.bf != nil {
		return fmt.Errorf("%w: merge adapter %q into a BF16 base: use MergedClone", ErrConfig, ad.name)
	}
	be, r := m.be, ad.cfg.Rank
	maxOut := 0
	for t, on := range ad.on {
		if on {
			_, out := m.arch.loraDims(t)
			maxOut = max(maxOut, out)
		}
	}
	sb, err := be.Alloc(maxOut * r)
	if err != nil {
		return fmt.Errorf("policy: merge adapter %q: %w", ad.name, err)
	}
	defer be.Free(sb)
	for l := 0; l < m.arch.L; l++ {
		for t, on := range ad.on {
			if !on {
				continue
			}
			in, out := m.arch.loraDims(t)
			w := m.baseWeight(l, t)
			b := view(be, sb, 0, out*r)
			be.Copy(b, ad.pv[l].b[t], out*r)
			be.Scale(b, ad.scale, out*r)
			be.MatmulBackward(w, nil, nil, b, nil, ad.pv[l].a[t], out, in, r)
		}
	}
	m.wver++
	if err := be.Sync(); err != nil {
		return fmt.Errorf("policy: merge adapter %q: %w", ad.name, err)
	}
	return nil
}

// baseWeight is the base weight of target t in layer l.
func (m *Llama) baseWeight(l, t int) compute.Buffer {
	lp := &m.pv.layers[l]
	return [numTargets]compute.Buffer{lp.q, lp.k, lp.v, lp.o, lp.gate, lp.up, lp.down}[t]
}

// peftKey is PEFT's tensor name of target t's A or B in layer l.
func peftKey(l, t int, ab string) string {
	return "base_model.model.model.layers." + strconv.Itoa(l) + "." + loraPaths[t] + ".lora_" + ab + ".weight"
}
