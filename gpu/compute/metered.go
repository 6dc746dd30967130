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
// The result implements MatmulTransposer, DecoderBackend and BF16Matmuler
// when b does.
//
// Like every Backend it is not safe for concurrent use. The cost is two
// clock reads per op, negligible next to a kernel.
func Metered(b Backend, c Meter, now func() time.Time) Backend {
	if now == nil {
		now = time.Now
	}
	m := &metered{b: b, c: c, now: now, sizes: map[any]int64{}}
	var core Backend = m
	t, isT := b.(MatmulTransposer)
	d, isD := b.(DecoderBackend)
	switch {
	case isT && isD:
		core = &meteredTD{&meteredT{metered: m, t: t}, &meteredDec{m: m, d: d}}
	case isT:
		core = &meteredT{metered: m, t: t}
	case isD:
		core = &meteredD{m, &meteredDec{m: m, d: d}}
	}
	f, isF := b.(BF16Matmuler)
	if !isF {
		return core
	}
	mf := &meteredBF{m: m, f: f}
	switch x := core.(type) {
	case *meteredTD:
		return &meteredTDB{x, mf}
	case *meteredT:
		return &meteredTB{x, mf}
	case *meteredD:
		return &meteredDB{x, mf}
	}
	return &meteredB{m, mf}
}

type metered struct {
	b     Backend
	c     Meter
	now   func() time.Time
	sizes map[any]int64 // bytes of each live allocation
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

func (m *metered) EncoderForward(out Buffer, inp IntBuffer, wte, wpe Buffer, B, T, C, V int) {
	defer m.done(m.now())
	m.b.EncoderForward(out, inp, wte, wpe, B, T, C, V)
}

func (m *metered) EncoderBackward(dwte, dwpe, dout Buffer, inp IntBuffer, B, T, C, V int) {
	defer m.done(m.now())
	m.b.EncoderBackward(dwte, dwpe, dout, inp, B, T, C, V)
}

func (m *metered) LayerNormForward(out, mean, rstd, inp, weight, bias Buffer, N, C int) {
	defer m.done(m.now())
	m.b.LayerNormForward(out, mean, rstd, inp, weight, bias, N, C)
}

func (m *metered) LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd Buffer, N, C int) {
	defer m.done(m.now())
	m.b.LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C)
}

func (m *metered) MatmulForward(out, inp, weight, bias Buffer, N, C, OC int) {
	defer m.done(m.now())
	m.b.MatmulForward(out, inp, weight, bias, N, C, OC)
}

func (m *metered) MatmulBackward(dinp, dweight, dbias, dout, inp, weight Buffer, N, C, OC int) {
	defer m.done(m.now())
	m.b.MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
}

func (m *metered) AttentionForward(out, att, qkv Buffer, B, T, C, NH int) {
	defer m.done(m.now())
	m.b.AttentionForward(out, att, qkv, B, T, C, NH)
}

func (m *metered) AttentionBackward(dqkv, dout, qkv, att Buffer, B, T, C, NH int) {
	defer m.done(m.now())
	m.b.AttentionBackward(dqkv, dout, qkv, att, B, T, C, NH)
}

func (m *metered) AttentionDecode(out, cache, qkv Buffer, B, maxT, pos, C, NH int) {
	defer m.done(m.now())
	m.b.AttentionDecode(out, cache, qkv, B, maxT, pos, C, NH)
}

func (m *metered) GeluForward(out, inp Buffer, N int) {
	defer m.done(m.now())
	m.b.GeluForward(out, inp, N)
}

func (m *metered) GeluBackward(dinp, inp, dout Buffer, N int) {
	defer m.done(m.now())
	m.b.GeluBackward(dinp, inp, dout, N)
}

func (m *metered) ResidualForward(out, a, b Buffer, N int) {
	defer m.done(m.now())
	m.b.ResidualForward(out, a, b, N)
}

func (m *metered) ResidualBackward(da, db, dout Buffer, N int) {
	defer m.done(m.now())
	m.b.ResidualBackward(da, db, dout, N)
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

// meteredT is metered over a backend with the transposed-weight matmul.
type meteredT struct {
	*metered
	t MatmulTransposer
}

func (m *meteredT) Transpose(dst, src Buffer, rows, cols int) {
	defer m.done(m.now())
	m.t.Transpose(dst, src, rows, cols)
}

func (m *meteredT) MatmulForwardT(out, inp, weightT, bias Buffer, N, C, OC int) {
	defer m.done(m.now())
	m.t.MatmulForwardT(out, inp, weightT, bias, N, C, OC)
}

// meteredD is metered over a backend with the decoder ops; meteredTD has
// the transposed-weight matmul too.
type (
	meteredD struct {
		*metered
		*meteredDec
	}
	meteredTD struct {
		*meteredT
		*meteredDec
	}
)

// meteredBF times the BF16Matmuler ops; meteredB, meteredTB, meteredDB
// and meteredTDB add them to the combinations above.
type (
	meteredBF struct {
		m *metered
		f BF16Matmuler
	}
	meteredB struct {
		*metered
		*meteredBF
	}
	meteredTB struct {
		*meteredT
		*meteredBF
	}
	meteredDB struct {
		*meteredD
		*meteredBF
	}
	meteredTDB struct {
		*meteredTD
		*meteredBF
	}
)

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

// meteredDec times the ops DecoderBackend adds to Backend.
type meteredDec struct {
	m *metered
	d DecoderBackend
}

func (o *meteredDec) EmbedForward(out Buffer, inp IntBuffer, wte Buffer, N, C, V int) {
	defer o.m.done(o.m.now())
	o.d.EmbedForward(out, inp, wte, N, C, V)
}

func (o *meteredDec) EmbedBackward(dwte, dout Buffer, inp IntBuffer, N, C, V int) {
	defer o.m.done(o.m.now())
	o.d.EmbedBackward(dwte, dout, inp, N, C, V)
}

func (o *meteredDec) RMSNormForward(out, rstd, inp, weight Buffer, N, C int, eps float32) {
	defer o.m.done(o.m.now())
	o.d.RMSNormForward(out, rstd, inp, weight, N, C, eps)
}

func (o *meteredDec) RMSNormBackward(dinp, dweight, dout, inp, weight, rstd Buffer, N, C int) {
	defer o.m.done(o.m.now())
	o.d.RMSNormBackward(dinp, dweight, dout, inp, weight, rstd, N, C)
}

func (o *meteredDec) RopeForward(x Buffer, pos IntBuffer, cos, sin Buffer, N, H, HD, maxPos int) {
	defer o.m.done(o.m.now())
	o.d.RopeForward(x, pos, cos, sin, N, H, HD, maxPos)
}

func (o *meteredDec) RopeBackward(dx Buffer, pos IntBuffer, cos, sin Buffer, N, H, HD, maxPos int) {
	defer o.m.done(o.m.now())
	o.d.RopeBackward(dx, pos, cos, sin, N, H, HD, maxPos)
}

func (o *meteredDec) GQAttentionForward(out, att, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer o.m.done(o.m.now())
	o.d.GQAttentionForward(out, att, q, k, v, B, T, NH, KVH, HD, scale)
}

func (o *meteredDec) GQAttentionBackward(dq, dk, dv, dout, q, k, v, att Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer o.m.done(o.m.now())
	o.d.GQAttentionBackward(dq, dk, dv, dout, q, k, v, att, B, T, NH, KVH, HD, scale)
}

func (o *meteredDec) GQAttentionDecode(out, cache, q, k, v Buffer, pos IntBuffer, B, maxT, NH, KVH, HD int, scale float32) {
	defer o.m.done(o.m.now())
	o.d.GQAttentionDecode(out, cache, q, k, v, pos, B, maxT, NH, KVH, HD, scale)
}

func (o *meteredDec) SwiGLUForward(out, gate, up Buffer, N int) {
	defer o.m.done(o.m.now())
	o.d.SwiGLUForward(out, gate, up, N)
}

func (o *meteredDec) SwiGLUBackward(dgate, dup, dout, gate, up Buffer, N int) {
	defer o.m.done(o.m.now())
	o.d.SwiGLUBackward(dgate, dup, dout, gate, up, N)
}
