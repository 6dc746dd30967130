package cpu

// Fast kernels of the decoder ops. TEMPORARY: they run the reference
// kernels until the parallel versions land, so New() already implements
// gpu.DecoderBackend correctly.

func (b *Backend) embedForward(out []float32, inp []int32, wte []float32, N, C int) {
	refEmbedForward(out, inp, wte, N, C)
}

func (b *Backend) embedBackward(dwte, dout []float32, inp []int32, N, C int) {
	refEmbedBackward(dwte, dout, inp, N, C)
}

func (b *Backend) rmsNormForward(out, rstd, inp, weight []float32, N, C int, eps float32) {
	refRMSNormForward(out, rstd, inp, weight, N, C, eps)
}

func (b *Backend) rmsNormBackward(dinp, dweight, dout, inp, weight, rstd []float32, N, C int, fresh, freshW bool) {
	if fresh {
		clear(dinp)
	}
	if freshW {
		clear(dweight)
	}
	refRMSNormBackward(dinp, dweight, dout, inp, weight, rstd, N, C)
}

func (b *Backend) rope(x []float32, pos []int32, cos, sin []float32, N, H, HD int, sign float64) {
	refRope(x, pos, cos, sin, N, H, HD, sign)
}

func (b *Backend) gqAttentionForward(out, att, q, k, v []float32, B, T, NH, KVH, HD int, scale float32) {
	refGQAttentionForward(out, att, q, k, v, B, T, NH, KVH, HD, scale)
}

func (b *Backend) gqAttentionBackward(dq, dk, dv, dout, q, k, v, att []float32, B, T, NH, KVH, HD int, scale float32, fresh [3]bool) {
	for i, d := range [3][]float32{dq, dk, dv} {
		if fresh[i] {
			clear(d)
		}
	}
	refGQAttentionBackward(dq, dk, dv, dout, q, k, v, att, B, T, NH, KVH, HD, scale)
}

func (b *Backend) gqAttentionDecode(out, cache, q, k, v []float32, pos []int32, B, maxT, NH, KVH, HD int, scale float32) {
	refGQAttentionDecode(out, cache, q, k, v, pos, B, maxT, NH, KVH, HD, scale)
}

func (b *Backend) swiGLUForward(out, gate, up []float32, N int) { refSwiGLUForward(out, gate, up, N) }

func (b *Backend) swiGLUBackward(dgate, dup, dout, gate, up []float32, N int, freshG, freshU bool) {
	if freshG {
		clear(dgate)
	}
	if freshU {
		clear(dup)
	}
	refSwiGLUBackward(dgate, dup, dout, gate, up, N)
}
