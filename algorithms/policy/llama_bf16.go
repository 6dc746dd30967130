package policy

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"troupe/algorithms/policy/hf"
	"troupe/gpu/compute"
)

// This file keeps a frozen base's matrices in BF16, halving the memory of
// the weights a LoRA run holds (a Qwen2.5-0.5B base: 1.98 GB in float32,
// 0.99 GB in BF16). The backend's kernels take float32, so each layer's
// matrices are widened into a one-layer float32 scratch just before the
// layer runs (forward, and again in the backward), the embedding is
// gathered row by row on the host, and the output head runs in chunks of
// vocabulary rows. Norm gains and biases stay float32 on the backend.
//
// The widening costs one pass over the weights per forward and one per
// backward: small beside a training step's matmuls, but about as much as a
// decode step's memory traffic, so BF16 trades decode speed for memory.
// The weights live in host memory: on a GPU backend every layer is also an
// upload per pass.
//
// A backend with the compute.BF16Matmuler capability (both backends) skips all that:
// the projections and the head read the BF16 matrices in place, forward
// (MatmulForwardBF16) and backward (MatmulBackwardInputBF16, the input
// gradient; the base is frozen), and there is no float32 scratch. A decode
// step then reads half the bytes of a float32 base. On AVX512_BF16 CPUs the
// products of six or more rows round the float32 activations (and, in the
// backward, the output gradients) to BF16 as PyTorch's BF16 matmul does,
// so such a model agrees with its widened twin to BF16 precision of the
// activations, not to float32 rounding.

// bf16Kinds are the matrices held in BF16.
var bf16Kinds = [...]int{kEmbed, kQ, kK, kV, kO, kGate, kUp, kDown, kHead}

func isBF16Kind(k int) bool {
	switch k {
	case kEmbed, kQ, kK, kV, kO, kGate, kUp, kDown, kHead:
		return true
	}
	return false
}

// headRows is how many vocabulary rows of a BF16 head are widened at once.
var headRows = 4096

// bf16Kernels lets a model use the backend's compute.BF16Matmuler. Only the
// benchmarks turn it off, to measure widening against the kernels in one
// run; it is read when the BF16 base is set up.
var bf16Kernels = true

// bf16Base is a Llama's BF16 matrices and the float32 scratch they are
// widened into.
type bf16Base struct {
	mats  [numKinds][]uint16   // per kind, all layers (kind-major, as the flat weights)
	layer compute.Buffer       // one layer's q, k, v, o, gate, up, down
	lv    llayerViews          // views of layer plus the layer's float32 small kinds
	cur   int                  // the layer in the scratch, -1 none
	mm    compute.BF16Matmuler // the backend's BF16 matmuls; nil: widen into the scratch
	head  compute.Buffer       // headRows rows of the head (headRows, C)
	hout  compute.Buffer       // a head chunk's products (rows, headRows), grown
	stage []float32            // host staging (embedding rows; uploads on device backends)
	all   []compute.Buffer
}

// BaseDType is the storage type of the base's matrices: hf.F32, or hf.BF16
// after SetBaseDType(hf.BF16).
func (m *Llama) BaseDType() hf.DType {
	if m.bf != nil {
		return hf.BF16
	}
	return hf.F32
}

// SetBaseDType converts the base's matrices (embedding, projections, head)
// to dt: hf.BF16 keeps them in host memory at half the size (rounded to
// nearest even, as PyTorch's .to(torch.bfloat16)), hf.F32 widens them back.
// A BF16 base is frozen: it trains only through adapters.
func (m *Llama) SetBaseDType(dt hf.DType) error {
	if dt == m.BaseDType() {
		return nil
	}
	if dt != hf.BF16 && dt != hf.F32 {
		return fmt.Errorf("%w: base dtype %q (want F32 or BF16)", ErrConfig, dt)
	}
	if dt == hf.BF16 {
		m.amp = nil // a BF16 base computes in BF16 itself; its float32 matrices go
		return m.toBF16Base()
	}
	w, err := m.Weights()
	if err != nil {
		return err
	}
	for _, b := range []compute.Buffer{m.params, m.grads, m.mom, m.vel} {
		if b != nil {
			m.be.Free(b)
		}
	}
	m.params, m.grads, m.mom, m.vel = nil, nil, nil, nil
	m.gv, m.momV, m.velV = lviews{}, lviews{}, lviews{}
	m.freeTransposed()
	m.freeBF16()
	if dt == hf.BF16 {
		m.bf = &bf16Base{cur: -1}
	}
	if m.params, m.pv, err = m.allocParams("weights"); err != nil {
		return err
	}
	if m.bf != nil {
		if err := m.allocBF16(); err != nil {
			return err
		}
	}
	return m.SetWeights(w)
}

// toBF16Base converts a float32 base kind by kind: at its peak it holds
// the float32 weights, the BF16 matrices and (off the host) one kind in
// staging, not a second float32 copy.
func (m *Llama) toBF16Base() error {
	bf := &bf16Base{cur: -1}
	var small, stage []float32
	host, isHost := m.params.(hostData)
	var hd []float32
	if isHost {
		hd = host.Data()
	}
	off := 0
	for k := range numKinds {
		n := m.sizes[k]
		if n == 0 {
			continue
		}
		var src []float32
		if isHost {
			src = hd[off : off+n]
		} else {
			if cap(stage) < n {
				stage = make([]float32, n)
			}
			src = stage[:n]
			m.be.Download(src, m.pv.all[k])
			if err := m.be.Sync(); err != nil {
				return fmt.Errorf("policy: download weights: %w", err)
			}
		}
		if isBF16Kind(k) {
			bf.mats[k] = make([]uint16, n)
			toBF16(bf.mats[k], src)
		} else {
			small = append(small, src...)
		}
		off += n
	}
	for _, b := range []compute.Buffer{m.params, m.grads, m.mom, m.vel} {
		if b != nil {
			m.be.Free(b)
		}
	}
	m.params, m.grads, m.mom, m.vel = nil, nil, nil, nil
	m.gv, m.momV, m.velV = lviews{}, lviews{}, lviews{}
	m.freeTransposed()
	m.bf = bf
	var err error
	if m.params, m.pv, err = m.allocParams("weights"); err != nil {
		return err
	}
	if err := m.allocBF16(); err != nil {
		return err
	}
	m.be.Upload(m.params, small)
	m.wver++
	return m.be.Sync()
}

func (m *Llama) freeBF16() {
	if m.bf == nil {
		return
	}
	for _, b := range m.bf.all {
		m.be.Free(b)
	}
	m.bf = nil
}

// allocBF16 allocates the host matrices and, unless the backend multiplies
// BF16 weights itself, the float32 scratch.
func (m *Llama) allocBF16() error {
	bf, ar := m.bf, &m.arch
	for _, k := range bf16Kinds {
		if bf.mats[k] == nil {
			bf.mats[k] = make([]uint16, m.sizes[k])
		}
	}
	if bf16Kernels {
		bf.mm, _ = compute.As[compute.BF16Matmuler](m.be)
	}
	if bf.mm != nil {
		return nil // no scratch: nothing is widened
	}
	QD, KD := ar.NH*ar.HD, ar.KVH*ar.HD
	per := 2*ar.C*QD + 2*ar.C*KD + 3*ar.C*ar.I
	var err error
	f := func(n int) compute.Buffer {
		if err != nil {
			return nil
		}
		var b compute.Buffer
		if b, err = m.be.Alloc(n); err == nil {
			bf.all = append(bf.all, b)
		}
		return b
	}
	bf.layer, bf.head = f(per), f(min(headRows, ar.V)*ar.C)
	if err != nil {
		return fmt.Errorf("policy: allocate BF16 scratch: %w", err)
	}
	off := 0
	v := func(n int) compute.Buffer {
		x := view(m.be, bf.layer, off, n)
		off += n
		return x
	}
	bf.lv.q, bf.lv.k, bf.lv.v, bf.lv.o = v(QD*ar.C), v(KD*ar.C), v(KD*ar.C), v(ar.C*QD)
	bf.lv.gate, bf.lv.up, bf.lv.down = v(ar.I*ar.C), v(ar.I*ar.C), v(ar.C*ar.I)
	return nil
}

// devSize is the float32 elements kind k takes in the backend's weights
// buffer (0 for a BF16 matrix).
func (m *Llama) devSize(k int) int {
	if m.bf != nil && isBF16Kind(k) {
		return 0
	}
	return m.sizes[k]
}

// layerWeights returns layer l's weights as float32 views: the model's own,
// or with a BF16 base the scratch, widened now unless it holds l already.
// With the backend's BF16 matmuls the matrices' views are nil: baseForward
// and baseBackward read the BF16 matrices instead.
func (m *Llama) layerWeights(l int) *llayerViews {
	bf := m.bf
	if bf == nil {
		return &m.pv.layers[l]
	}
	small := &m.pv.layers[l]
	lv := &bf.lv
	lv.attnNorm, lv.qb, lv.kb, lv.vb, lv.qNorm, lv.kNorm, lv.ob = small.attnNorm, small.qb, small.kb, small.vb, small.qNorm, small.kNorm, small.ob
	lv.mlpNorm, lv.gateb, lv.upb, lv.downb = small.mlpNorm, small.gateb, small.upb, small.downb
	if bf.cur != l && bf.mm == nil {
		for _, k := range []int{kQ, kK, kV, kO, kGate, kUp, kDown} {
			per := m.sizes[k] / m.arch.L
			m.widen(*lv.kind(k), bf.mats[k][l*per:(l+1)*per])
		}
		bf.cur = l
	}
	return lv
}

// layerBF16 is layer l's BF16 matrix of kind k.
func (m *Llama) layerBF16(k, l int) []uint16 {
	per := m.sizes[k] / m.arch.L
	return m.bf.mats[k][l*per : (l+1)*per]
}

// baseForward is MatmulForward of layer l's base matrix of kind k (w, its
// float32 view from layerWeights), out (N, OC) = inp (N, C)·wᵀ + bias; with
// the backend's BF16 matmuls it reads the BF16 matrix in place.
func (m *Llama) baseForward(l, k int, out, inp, w, bias compute.Buffer, N, C, OC int) {
	if m.amp != nil {
		m.amp.mm.MatmulForwardBF16(out, inp, m.ampMat(k, l), bias, N, C, OC)
		return
	}
	if bf := m.bf; bf != nil && bf.mm != nil {
		bf.mm.MatmulForwardBF16(out, inp, m.layerBF16(k, l), bias, N, C, OC)
		return
	}
	m.be.MatmulForward(out, inp, w, bias, N, C, OC)
}

// baseBackward is MatmulBackward of layer l's base matrix of kind k: dinp
// += dout·w and the weight's and bias's gradients where not nil. With the
// backend's BF16 matmuls dinp reads the BF16 matrix in place and the
// gradients (which need no weight) go through MatmulBackward.
func (m *Llama) baseBackward(l, k int, dinp, dweight, dbias, dout, inp, w compute.Buffer, N, C, OC int) {
	if a := m.amp; a != nil {
		if dinp != nil {
			a.mm.MatmulBackwardInputBF16(dinp, dout, m.ampMat(k, l), N, C, OC)
		}
		if dweight != nil || dbias != nil {
			a.mm.MatmulBackwardWeightBF16(dweight, dbias, dout, inp, N, C, OC)
		}
		return
	}
	bf := m.bf
	if bf == nil || bf.mm == nil {
		m.be.MatmulBackward(dinp, dweight, dbias, dout, inp, w, N, C, OC)
		return
	}
	if dinp != nil {
		bf.mm.MatmulBackwardInputBF16(dinp, dout, m.layerBF16(k, l), N, C, OC)
	}
	if dweight != nil || dbias != nil {
		m.be.MatmulBackward(nil, dweight, dbias, dout, inp, nil, N, C, OC)
	}
}

// widen writes src, widened to float32, into dst.
func (m *Llama) widen(dst compute.Buffer, src []uint16) {
	if h, ok := dst.(hostData); ok {
		fromBF16(h.Data()[:len(src)], src)
		return
	}
	st := m.bf.staging(len(src))
	fromBF16(st, src)
	m.be.Upload(dst, st)
}

func (bf *bf16Base) staging(n int) []float32 {
	if cap(bf.stage) < n {
		bf.stage = make([]float32, n)
	}
	return bf.stage[:n]
}

// embedForward is EmbedForward of tokens (inp on the backend, host the same
// ids on the host) into out (N, C).
func (m *Llama) embedForward(out compute.Buffer, inp compute.IntBuffer, host []int32, N int) {
	C, V := m.arch.C, m.arch.V
	if m.bf == nil {
		m.be.EmbedForward(out, inp, m.pv.all[kEmbed], N, C, V)
		return
	}
	if m.bf.mm != nil && m.fu.res != nil {
		// Gathered on the device from the table's resident copy: only the
		// ids cross the bus.
		m.fu.res.EmbedForwardBF16(out, inp, m.bf.mats[kEmbed], N, C, V)
		return
	}
	var dst []float32
	h, direct := out.(hostData)
	if direct {
		dst = h.Data()[:N*C]
	} else {
		dst = m.bf.staging(N * C)
	}
	e := m.bf.mats[kEmbed]
	for n, id := range host[:N] {
		if id < 0 || int(id) >= V { // checked by the callers; stay safe
			clear(dst[n*C : (n+1)*C])
			continue
		}
		fromBF16(dst[n*C:(n+1)*C], e[int(id)*C:(int(id)+1)*C])
	}
	if !direct {
		m.be.Upload(out, dst)
	}
}

// headMatmul is out (n, V) = inp (n, C) · headᵀ.
func (m *Llama) headMatmul(out, inp compute.Buffer, n int) {
	be, C, V := m.be, m.arch.C, m.arch.V
	if m.amp != nil {
		m.amp.mm.MatmulForwardBF16(out, inp, m.ampHead(), nil, n, C, V)
		return
	}
	if m.bf == nil {
		be.MatmulForward(out, inp, m.pv.head, nil, n, C, V)
		return
	}
	if m.bf.mm != nil {
		m.bf.mm.MatmulForwardBF16(out, inp, m.headBF16(), nil, n, C, V)
		return
	}
	hout := m.headOut(n)
	for v0 := 0; v0 < V; v0 += headRows {
		vc := min(headRows, V-v0)
		m.widen(m.bf.head, m.headBF16()[v0*C:(v0+vc)*C])
		o := view(be, hout, 0, n*vc)
		be.MatmulForward(o, inp, m.bf.head, nil, n, C, vc)
		for r := 0; r < n; r++ {
			be.Copy(view(be, out, r*V+v0, vc), view(be, o, r*vc, vc), vc)
		}
	}
}

// headMatmulBackward accumulates dinp (n, C) += dout (n, V) · head (and
// the head's gradient, unless the base is frozen).
func (m *Llama) headMatmulBackward(dinp, dout, inp compute.Buffer, n int) {
	be, C, V := m.be, m.arch.C, m.arch.V
	if a := m.amp; a != nil {
		a.mm.MatmulBackwardInputBF16(dinp, dout, m.ampHead(), n, C, V)
		if m.gv.head != nil {
			a.mm.MatmulBackwardWeightBF16(m.gv.head, nil, dout, inp, n, C, V)
		}
		return
	}
	if m.bf == nil {
		be.MatmulBackward(dinp, m.gv.head, nil, dout, inp, m.pv.head, n, C, V)
		return
	}
	if m.bf.mm != nil {
		m.bf.mm.MatmulBackwardInputBF16(dinp, dout, m.headBF16(), n, C, V)
		return
	}
	hout := m.headOut(n)
	for v0 := 0; v0 < V; v0 += headRows {
		vc := min(headRows, V-v0)
		m.widen(m.bf.head, m.headBF16()[v0*C:(v0+vc)*C])
		d := view(be, hout, 0, n*vc)
		for r := 0; r < n; r++ {
			be.Copy(view(be, d, r*vc, vc), view(be, dout, r*V+v0, vc), vc)
		}
		be.MatmulBackward(dinp, nil, nil, d, nil, m.bf.head, n, C, vc)
	}
}

func (m *Llama) headBF16() []uint16 {
	if m.arch.tied {
		return m.bf.mats[kEmbed]
	}
	return m.bf.mats[kHead]
}

// headOut is the head chunk products' scratch for n rows.
func (m *Llama) headOut(n int) compute.Buffer {
	bf := m.bf
	need := n * min(headRows, m.arch.V)
	if bf.hout == nil || bf.hout.Len() < need {
		if bf.hout != nil {
			m.be.Free(bf.hout)
			bf.all = deleteBuf(bf.all, bf.hout)
		}
		b, err := m.be.Alloc(need)
		if err != nil {
			// recorded on the backend by the op using the short buffer
			b = bf.head
		} else {
			bf.all = append(bf.all, b)
		}
		bf.hout = b
	}
	return bf.hout
}

func deleteBuf(all []compute.Buffer, b compute.Buffer) []compute.Buffer {
	for i, x := range all {
		if x == b {
			return append(all[:i], all[i+1:]...)
		}
	}
	return all
}

// weightsBF16 is Weights for a BF16 base: kind by kind, matrices widened.
func (m *Llama) weightsBF16(w []float32) error {
	off := 0
	for k := range numKinds {
		n := m.sizes[k]
		switch {
		case n == 0:
		case isBF16Kind(k):
			fromBF16(w[off:off+n], m.bf.mats[k])
		default:
			m.be.Download(w[off:off+n], m.pv.all[k])
		}
		off += n
	}
	return m.be.Sync()
}

// setWeightsBF16 is SetWeights for a BF16 base: matrices rounded.
func (m *Llama) setWeightsBF16(w []float32) error {
	off := 0
	for k := range numKinds {
		n := m.sizes[k]
		switch {
		case n == 0:
		case isBF16Kind(k):
			toBF16(m.bf.mats[k], w[off:off+n])
		default:
			m.be.Upload(m.pv.all[k], w[off:off+n])
		}
		off += n
	}
	m.bf.cur = -1
	return m.be.Sync()
}

// bf16Bytes is the host memory of the BF16 matrices.
func (m *Llama) bf16Bytes() int {
	if m.bf == nil {
		return 0
	}
	n := 0
	for _, x := range m.bf.mats {
		n += 2 * len(x)
	}
	return n
}

// parallelConvert splits n elements over the CPUs when there are enough
// to pay for the goroutines.
func parallelConvert(n int, f func(lo, hi int)) {
	p := runtime.GOMAXPROCS(0)
	if n < 1<<16 || p == 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + p - 1) / p
	for lo := 0; lo < n; lo += step {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, min(n, lo+step))
	}
	wg.Wait()
}

// fromBF16 widens BF16 (the top half of a float32) to float32, exactly.
func fromBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	parallelConvert(len(src), func(lo, hi int) {
		d, s := dst[lo:hi], src[lo:hi]
		for i, x := range s {
			d[i] = math.Float32frombits(uint32(x) << 16)
		}
	})
}

// toBF16 rounds float32 to BF16, to nearest with ties to even; NaNs stay
// NaN (quiet).
func toBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	parallelConvert(len(src), func(lo, hi int) {
		d, s := dst[lo:hi], src[lo:hi]
		for i, f := range s {
			b := math.Float32bits(f)
			if b&0x7fffffff > 0x7f800000 {
				d[i] = uint16(b>>16) | 0x40
				continue
			}
			d[i] = uint16((b + 0x7fff + (b>>16)&1) >> 16)
		}
	})
}

// MemoryBytes is what the model holds: weights (BF16 host matrices
// included), gradients, AdamW moments, activations and scratch, adapters
// with their gradients and moments, RoPE tables and the transposed decode
// copy, in bytes (4 per float32 or int32 element).
func (m *Llama) MemoryBytes() int {
	n := 0
	add := func(bs ...any) {
		for _, b := range bs {
			switch x := b.(type) {
			case compute.Buffer:
				if x != nil {
					n += 4 * x.Len()
				}
			case compute.IntBuffer:
				if x != nil {
					n += 4 * x.Len()
				}
			}
		}
	}
	add(m.params, m.grads, m.mom, m.vel)
	if m.a != nil {
		add(m.a.all...)
	}
	if m.la != nil {
		for _, b := range m.la.all {
			add(b)
		}
	}
	if m.lr != nil {
		for _, ad := range m.lr.order {
			add(ad.params, ad.grads, ad.mom, ad.vel)
		}
	}
	if m.bf != nil {
		for _, b := range m.bf.all {
			add(b)
		}
		n += m.bf16Bytes()
	}
	n += m.ampBytes()
	if m.rope != nil {
		add(m.rope.cos, m.rope.sin)
	}
	if m.tw != nil {
		add(m.tw.all)
	}
	return n
}
