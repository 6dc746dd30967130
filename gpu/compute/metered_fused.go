package compute

// Metered wrappers of the fused-kernel capabilities (fused.go), made once
// by Metered for the capabilities the wrapped backend has.

// meteredFused holds the metered fused capabilities; a nil field is one the
// wrapped backend lacks.
type meteredFused struct {
	flash *meteredFlash
	norm  *meteredResNorm
	rope  *meteredQKRope
	loss  *meteredLSE
	adam  *meteredMultiAdam
	glu   *meteredPackedGLU
	res   *meteredResident
	mix   *meteredMixed
	stack *meteredStacked
	fbf   *meteredFlashBF16
}

func newMeteredFused(m *metered, b Backend) meteredFused {
	var f meteredFused
	if c, ok := As[FlashAttender](b); ok {
		f.flash = &meteredFlash{m: m, c: c}
	}
	if c, ok := As[ResidualNormer](b); ok {
		f.norm = &meteredResNorm{m: m, c: c}
	}
	if c, ok := As[QKRoper](b); ok {
		f.rope = &meteredQKRope{m: m, c: c}
	}
	if c, ok := As[LSELossHeads](b); ok {
		f.loss = &meteredLSE{m: m, c: c}
	}
	if c, ok := As[MultiAdamW](b); ok {
		f.adam = &meteredMultiAdam{m: m, c: c}
	}
	if c, ok := As[PackedSwiGLU](b); ok {
		f.glu = &meteredPackedGLU{m: m, c: c}
	}
	if c, ok := As[BF16Resident](b); ok {
		f.res = &meteredResident{m: m, c: c}
	}
	if c, ok := As[MixedMatmuler](b); ok {
		f.mix = &meteredMixed{m: m, c: c}
	}
	if c, ok := As[StackedBF16Matmuler](b); ok {
		f.stack = &meteredStacked{m: m, c: c}
	}
	if c, ok := As[FlashAttenderBF16](b); ok {
		f.fbf = &meteredFlashBF16{m: m, c: c}
	}
	return f
}

// capability is metered.capability for the fused capabilities.
func (f *meteredFused) capability(target any) bool {
	switch p := target.(type) {
	case *FlashAttender:
		if f.flash != nil {
			*p = f.flash
		}
		return f.flash != nil
	case *ResidualNormer:
		if f.norm != nil {
			*p = f.norm
		}
		return f.norm != nil
	case *QKRoper:
		if f.rope != nil {
			*p = f.rope
		}
		return f.rope != nil
	case *LSELossHeads:
		if f.loss != nil {
			*p = f.loss
		}
		return f.loss != nil
	case *MultiAdamW:
		if f.adam != nil {
			*p = f.adam
		}
		return f.adam != nil
	case *PackedSwiGLU:
		if f.glu != nil {
			*p = f.glu
		}
		return f.glu != nil
	case *BF16Resident:
		if f.res != nil {
			*p = f.res
		}
		return f.res != nil
	case *MixedMatmuler:
		if f.mix != nil {
			*p = f.mix
		}
		return f.mix != nil
	case *StackedBF16Matmuler:
		if f.stack != nil {
			*p = f.stack
		}
		return f.stack != nil
	case *FlashAttenderBF16:
		if f.fbf != nil {
			*p = f.fbf
		}
		return f.fbf != nil
	}
	return false
}

type meteredFlash struct {
	m *metered
	c FlashAttender
}

func (o *meteredFlash) FlashAttentionForward(out, lse, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer o.m.done(o.m.now())
	o.c.FlashAttentionForward(out, lse, q, k, v, B, T, NH, KVH, HD, scale)
}

func (o *meteredFlash) FlashAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer o.m.done(o.m.now())
	o.c.FlashAttentionBackward(dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, KVH, HD, scale)
}

type meteredResNorm struct {
	m *metered
	c ResidualNormer
}

func (o *meteredResNorm) ResidualRMSNormForward(res, out, rstd, a, b, weight Buffer, N, C int, eps float32) {
	defer o.m.done(o.m.now())
	o.c.ResidualRMSNormForward(res, out, rstd, a, b, weight, N, C, eps)
}

type meteredQKRope struct {
	m *metered
	c QKRoper
}

func (o *meteredQKRope) RopeQKForward(q, k Buffer, pos IntBuffer, cos, sin Buffer, N, NH, KVH, HD, maxPos int) {
	defer o.m.done(o.m.now())
	o.c.RopeQKForward(q, k, pos, cos, sin, N, NH, KVH, HD, maxPos)
}

func (o *meteredQKRope) RopeQKBackward(dq, dk Buffer, pos IntBuffer, cos, sin Buffer, N, NH, KVH, HD, maxPos int) {
	defer o.m.done(o.m.now())
	o.c.RopeQKBackward(dq, dk, pos, cos, sin, N, NH, KVH, HD, maxPos)
}

func (o *meteredQKRope) HeadNormRopeForward(out, rstd, inp, weight Buffer, pos IntBuffer, cos, sin Buffer, N, H, HD, maxPos int, eps float32) {
	defer o.m.done(o.m.now())
	o.c.HeadNormRopeForward(out, rstd, inp, weight, pos, cos, sin, N, H, HD, maxPos, eps)
}

type meteredLSE struct {
	m *metered
	c LSELossHeads
}

func (o *meteredLSE) CrossEntropyLSEForward(losses, lse, logits Buffer, targets IntBuffer, N, V int) {
	defer o.m.done(o.m.now())
	o.c.CrossEntropyLSEForward(losses, lse, logits, targets, N, V)
}

func (o *meteredLSE) CrossEntropyLSEBackward(dlogits, logits, lse, dlosses Buffer, targets IntBuffer, N, V int) {
	defer o.m.done(o.m.now())
	o.c.CrossEntropyLSEBackward(dlogits, logits, lse, dlosses, targets, N, V)
}

func (o *meteredLSE) LogProbLSEForward(logp, lse, logits Buffer, targets IntBuffer, N, V int) {
	defer o.m.done(o.m.now())
	o.c.LogProbLSEForward(logp, lse, logits, targets, N, V)
}

func (o *meteredLSE) LogProbLSEBackward(dlogits, logits, lse, dlogp Buffer, targets IntBuffer, N, V int) {
	defer o.m.done(o.m.now())
	o.c.LogProbLSEBackward(dlogits, logits, lse, dlogp, targets, N, V)
}

type meteredMultiAdam struct {
	m *metered
	c MultiAdamW
}

func (o *meteredMultiAdam) AdamWUpdateMulti(ts []AdamWTensor, h AdamW) {
	defer o.m.done(o.m.now())
	o.c.AdamWUpdateMulti(ts, h)
}

type meteredPackedGLU struct {
	m *metered
	c PackedSwiGLU
}

func (o *meteredPackedGLU) SwiGLUPackedForward(out, gu Buffer, N, I int) {
	defer o.m.done(o.m.now())
	o.c.SwiGLUPackedForward(out, gu, N, I)
}

func (o *meteredPackedGLU) SwiGLUPackedBackward(dgu, dout, gu Buffer, N, I int) {
	defer o.m.done(o.m.now())
	o.c.SwiGLUPackedBackward(dgu, dout, gu, N, I)
}

type meteredResident struct {
	m *metered
	c BF16Resident
}

func (o *meteredResident) RoundBF16Resident(dst []uint16, src Buffer) {
	defer o.m.done(o.m.now())
	o.c.RoundBF16Resident(dst, src)
}

func (o *meteredResident) EmbedForwardBF16(out Buffer, inp IntBuffer, table []uint16, N, C, V int) {
	defer o.m.done(o.m.now())
	o.c.EmbedForwardBF16(out, inp, table, N, C, V)
}

type meteredMixed struct {
	m *metered
	c MixedMatmuler
}

func (o *meteredMixed) MatmulForwardMixed(out, inp, weight, bias Buffer, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.c.MatmulForwardMixed(out, inp, weight, bias, N, C, OC)
}

func (o *meteredMixed) MatmulBackwardMixed(dinp, dweight, dbias, dout, inp, weight Buffer, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.c.MatmulBackwardMixed(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
}

type meteredStacked struct {
	m *metered
	c StackedBF16Matmuler
}

func (o *meteredStacked) MatmulForwardBF16Stacked(out, inp Buffer, w1, w2 []uint16, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.c.MatmulForwardBF16Stacked(out, inp, w1, w2, N, C, OC)
}

func (o *meteredStacked) MatmulBackwardInputBF16Stacked(dinp, dout Buffer, w1, w2 []uint16, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.c.MatmulBackwardInputBF16Stacked(dinp, dout, w1, w2, N, C, OC)
}

func (o *meteredStacked) MatmulBackwardWeightBF16Stacked(dw1, dw2, dout, inp Buffer, N, C, OC int) {
	defer o.m.done(o.m.now())
	o.c.MatmulBackwardWeightBF16Stacked(dw1, dw2, dout, inp, N, C, OC)
}

type meteredFlashBF16 struct {
	m *metered
	c FlashAttenderBF16
}

func (o *meteredFlashBF16) FlashAttentionForwardBF16(out, lse, q, k, v Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer o.m.done(o.m.now())
	o.c.FlashAttentionForwardBF16(out, lse, q, k, v, B, T, NH, KVH, HD, scale)
}

func (o *meteredFlashBF16) FlashAttentionBackwardBF16(dq, dk, dv, dout, q, k, v, out, lse Buffer, B, T, NH, KVH, HD int, scale float32) {
	defer o.m.done(o.m.now())
	o.c.FlashAttentionBackwardBF16(dq, dk, dv, dout, q, k, v, out, lse, B, T, NH, KVH, HD, scale)
}
