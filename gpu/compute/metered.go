package compute

import "time"

// Meter receives the work a metered backend does: the wall time of each op
// and the change in its allocated memory. gpu/busy's Counter implements it;
// the compute half names only this interface, so it never links the devices
// package.
type Meter interface {
	AddBusy(d time.Duration)
	AddMemory(delta int64)
}

// Metered returns a Backend that runs every op on b and adds the op's wall
// time to c, and the memory of its allocations (4 bytes per element, until
// Free) to c's memory. now is the clock (time.Now if nil; tests inject
// one). Bind a backend this way to the GPU its actor was placed on so that
// a simulated GPU's utilization follows the actor's work (see gpu/busy).
// As finds on the result the optional capabilities of b, their ops metered
// too.
//
// Like every Backend it is not safe for concurrent use. The cost is two
// clock reads per op, negligible next to a kernel.
func Metered(b Backend, c Meter, now func() time.Time) Backend {
	if now == nil {
		now = time.Now
	}
	m := &metered{b: b, c: c, now: now, sizes: map[any]int64{}}
	// Made once: As hands out the same wrapper every time.
	if t, ok := As[MatmulTransposer](b); ok {
		m.t = &meteredT{m: m, t: t}
	}
	if f, ok := As[BF16Matmuler](b); ok {
		m.f = &meteredBF{m: m, f: f}
	}
	m.fused = newMeteredFused(m, b)
	return m
}

type metered struct {
	b     Backend
	c     Meter
	now   func() time.Time
	sizes map[any]int64 // bytes of each live allocation
	t     *meteredT     // b's MatmulTransposer, metered; nil without
	f     *meteredBF    // b's BF16Matmuler, metered; nil without
	fused meteredFused  // b's fused-kernel capabilities, metered
}

// capability implements capabler: the wrapped backend's capabilities,
// metered.
func (m *metered) capability(target any) bool {
	switch p := target.(type) {
	case *MatmulTransposer:
		if m.t != nil {
			*p = m.t
		}
		return m.t != nil
	case *BF16Matmuler:
		if m.f != nil {
			*p = m.f
		}
		return m.f != nil
	}
	return m.fused.capability(target)
}

// done adds the time since start to the counter.
func (m *metered) done(start time.Time) { m.c.AddBusy(m.now().Sub(start)) }

func (m *metered) Name() string { return m.b.Name() }

func (m *metered) Alloc(n int) (Buffer, error) {
	buf, err := m.b.Alloc(n)
	if err == nil && buf != nil {
		m.sizes[buf] = 4 * int64(n)
		m.c.AddMemory(4 * int64(n))
	}
	return buf, err
}

func (m *metered) AllocInt(n int) (IntBuffer, error) {
	buf, err := m.b.AllocInt(n)
	if err == nil && buf != nil {
		m.sizes[buf] = 4 * int64(n)
		m.c.AddMemory(4 * int64(n))
	}
	return buf, err
}

func (m *metered) View(b Buffer, off, n int) (Buffer, error) { return m.b.View(b, off, n) }

func (m *metered) Free(b any) {
	if sz, ok := m.sizes[b]; ok {
		delete(m.sizes, b)
		m.c.AddMemory(-sz)
	}
	m.b.Free(b)
}

func (m *metered) Upload(dst Buffer, src []float32) {
	defer m.done(m.now())
	m.b.Upload(dst, src)
}

func (m *metered) UploadInt(dst IntBuffer, src []int32) {
	defer m.done(m.now())
	m.b.UploadInt(dst, src)
}

func (m *metered) Download(dst []float32, src Buffer) {
	defer m.done(m.now())
	m.b.Download(dst, src)
}

func (m *metered) Zero(b Buffer) {
	defer m.done(m.now())
	m.b.Zero(b)
}

func (m *metered) Copy(dst, src Buffer, n int) {
	defer m.done(m.now())
	m.b.Copy(dst, src, n)
}

func (m *metered) Sync() error {
	defer m.done(m.now())
	return m.b.Sync()
}

func (m *metered) Err() error { return m.b.Err() }

func (m *metered) MatmulForward(out, inp, weight, bias Buffer, N, C, OC int) {
	defer m.done(m.now())
	m.b.MatmulForward(out, inp, weight, bias, N, C, OC)
}

func (m *metered) MatmulBackward(dinp, dweight, dbias, dout, inp, weight Buffer, N, C, OC int) {
	defer m.done(m.now())
	m.b.MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
}

func (m *metered) ResidualForward(out, a, b Buffer, N int) {
	defer m.done(m.now())
	m.b.ResidualForward(out, a, b, N)
}

func (m *metered) Scale(x Buffer, s float32, N int) {
	defer m.done(m.now())
	m.b.Scale(x, s, N)
}

func (m *metered) CrossEntropyForward(losses, probs, logits Buffer, targets IntBuffer, N, V int) {
	defer m.done(m.now())
	m.b.CrossEntropyForward(losses, probs, logits, targets, N, V)
}

func (m *metered) CrossEntropyBackward(dlogits, probs, dlosses Buffer, targets IntBuffer, N, V int) {
	defer m.done(m.now())
	m.b.CrossEntropyBackward(dlogits, probs, dlosses, targets, N, V)
}

func (m *metered) LogProbForward(logp, probs, logits Buffer, targets IntBuffer, N, V int) {
	defer m.done(m.now())
	m.b.LogProbForward(logp, probs, logits, targets, N, V)
}

func (m *metered) LogProbBackward(dlogits, probs, dlogp Buffer, targets IntBuffer, N, V int) {
	defer m.done(m.now())
	m.b.LogProbBackward(dlogits, probs, dlogp, targets, N, V)
}

func (m *metered) AdamWUpdate(params, grads, mom, v Buffer, N int, h AdamW) {
	defer m.done(m.now())
	m.b.AdamWUpdate(params, grads, mom, v, N, h)
}

func (m *metered) SumSquares(x Buffer, N int) float64 {
	defer m.done(m.now())
	return m.b.SumSquares(x, N)
}

func (m *metered) EmbedForward(out Buffer, inp IntBuffer, wte Buffer, N, C, V int) {
	defer m.done(m.now())
	m.b.EmbedForward(out, inp, wte, N, C, V)
}

func (m *metered) EmbedBackward(dwte, dout Buffer, inp IntBuffer, N, C, V int) {
	defer m.done(m.now())
	m.b.EmbedBackward(dwte, dout, inp, N, C, V)
}

func (m *metered) RMSNormForward(out, rstd, inp, weight Buffer, N, C int, eps float32) {
	defer m.done(m.now())
	m.b.RMSNormForward(out, rstd, inp, weight, N, C, eps)
}

func (m *metered) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd Buffer, N, C int) {
	defer m.done(m.now())
	m.b.RMSNormBackward(dinp, dweight, dout, inp, weight, rstd, N, C)
}

func (m *metered) RopeForward(x Buffer, pos IntBuffer, cos, sin Buffer, N, H, HD, maxPos int) {
	defer m.done(m.now())
	m.b.RopeForward(x, pos, cos, sin, N, H, HD, maxPos)
}

func (m *metered) RopeBackward(dx Buffer, pos IntBuffer, cos, sin Buffer, N, H, HD, maxPos int) {
	defer m.done(m.now())
	m.b.RopeBackward(dx, pos, cos, sin, N, H, HD, maxPos)
}

func (m *metered) GQAttentionForward(out, att, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer m.done(m.now())
	m.b.GQAttentionForward(out, att, q, k, v, B, T, NH, KVH, HD, scale)
}

func (m *metered) GQAttentionBackward(dq, dk, dv, dout, q, k, v, att Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer m.done(m.now())
	m.b.GQAttentionBackward(dq, dk, dv, dout, q, k, v, att, B, T, NH, KVH, HD, scale)
}

func (m *metered) GQAttentionDecode(out, cache, q, k, v Buffer, pos IntBuffer, B, maxT, NH, KVH, HD int, scale float32) {
	defer m.done(m.now())
	m.b.GQAttentionDecode(out, cache, q, k, v, pos, B, maxT, NH, KVH, HD, scale)
}

func (m *metered) SwiGLUForward(out, gate, up Buffer, N int) {
	defer m.done(m.now())
	m.b.SwiGLUForward(out, gate, up, N)
}

func (m *metered) SwiGLUBackward(dgate, dup, dout, gate, up Buffer, N int) {
	defer m.done(m.now())
	m.b.SwiGLUBackward(dgate, dup, dout, gate, up, N)
}

// meteredT times the MatmulTransposer ops.
type meteredT struct {
	m *metered
	t MatmulTransposer
}

func (o *meteredT) Transpose(dst, src Buffer, rows, cols int) {
	defer o.m.done(o.m.now())
	o.t.Transpose(dst, src, rows, cols)
}

func (o *meteredT) MatmulForwardT(out, inp, weightT, bias Buffer, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.t.MatmulForwardT(out, inp, weightT, bias, N, C, OC)
}

// meteredBF times the BF16Matmuler ops.
type meteredBF struct {
	m *metered
	f BF16Matmuler
}

func (o *meteredBF) MatmulForwardBF16(out, inp Buffer, weight []uint16, bias Buffer, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.f.MatmulForwardBF16(out, inp, weight, bias, N, C, OC)
}

func (o *meteredBF) MatmulBackwardInputBF16(dinp, dout Buffer, weight []uint16, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.f.MatmulBackwardInputBF16(dinp, dout, weight, N, C, OC)
}

func (o *meteredBF) MatmulBackwardWeightBF16(dweight, dbias, dout, inp Buffer, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.f.MatmulBackwardWeightBF16(dweight, dbias, dout, inp, N, C, OC)
}

func (o *meteredBF) GQAttentionForwardBF16(out, att, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer o.m.done(o.m.now())
	o.f.GQAttentionForwardBF16(out, att, q, k, v, B, T, NH, KVH, HD, scale)
}

func (o *meteredBF) RoundBF16(dst []uint16, src Buffer) {
	defer o.m.done(o.m.now())
	o.f.RoundBF16(dst, src)
}
