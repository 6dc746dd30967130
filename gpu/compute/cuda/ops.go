package cuda

import (
	"fmt"
	"math"
	"troupe/gpu/compute"
)

// ---- matmul ----

func matmulGrid(rows, cols int) [3]uint32 {
	return [3]uint32{uint32(ceilDiv(cols, matmulTile)), uint32(ceilDiv(rows, matmulTile)), 1}
}

var matmulBlock = [3]uint32{matmulThread, matmulThread, 1}

// MatmulForward implements compute.Backend (kernel matmul_forward).
func (b *Backend) MatmulForward(out, inp, weight, bias compute.Buffer, N, C, OC int) {
	const op = "MatmulForward"
	if !b.dims(op, N, C, OC) || !b.gridRows(op, N) {
		return
	}
	o, in, w := b.f(op, "out", out, N*OC), b.f(op, "inp", inp, N*C), b.f(op, "weight", weight, OC*C)
	bi := b.opt(op, "bias", bias, OC)
	b.launch("matmul_forward", matmulGrid(N, OC), matmulBlock, ptr(o), ptr(in), ptr(w), ptr(bi), N, C, OC)
}

// gridRows checks a row count fits the y dimension of a matmul grid.
func (b *Backend) gridRows(op string, rows int) bool {
	if ceilDiv(rows, matmulTile) > 65535 {
		b.fail(compute.ShapeError(op, "%d rows exceed the matmul grid (%d)", rows, 65535*matmulTile))
		return false
	}
	return true
}

// MatmulBackward implements compute.Backend (kernels matmul_backward_input,
// matmul_backward_weight, matmul_backward_bias).
func (b *Backend) MatmulBackward(dinp, dweight, dbias, dout, inp, weight compute.Buffer, N, C, OC int) {
	const op = "MatmulBackward"
	if !b.dims(op, N, C, OC) || !b.gridRows(op, N) || !b.gridRows(op, OC) {
		return
	}
	di, dw, db := b.opt(op, "dinp", dinp, N*C), b.opt(op, "dweight", dweight, OC*C), b.opt(op, "dbias", dbias, OC)
	do := b.f(op, "dout", dout, N*OC)
	var in, w uintptr
	if di != 0 {
		w = b.f(op, "weight", weight, OC*C)
	}
	if dw != 0 {
		in = b.f(op, "inp", inp, N*C)
	}
	if di != 0 {
		b.launch("matmul_backward_input", matmulGrid(N, C), matmulBlock, ptr(di), ptr(do), ptr(w), N, C, OC)
	}
	if dw != 0 {
		b.launch("matmul_backward_weight", matmulGrid(OC, C), matmulBlock, ptr(dw), ptr(do), ptr(in), N, C, OC)
	}
	if db != 0 {
		b.launch("matmul_backward_bias", [3]uint32{uint32(ceilDiv(OC, 32)), 1, 1}, [3]uint32{32, 8, 1},
			ptr(db), ptr(do), N, OC)
	}
}

// ---- pointwise ----

// ResidualForward implements compute.Backend (kernel residual_forward).
func (b *Backend) ResidualForward(out, x, y compute.Buffer, N int) {
	const op = "ResidualForward"
	if !b.dims(op, N) {
		return
	}
	o, xs, ys := b.f(op, "out", out, N), b.f(op, "a", x, N), b.f(op, "b", y, N)
	b.launch("residual_forward", b.elemGrid(N), b.elemBlock(), ptr(o), ptr(xs), ptr(ys), N)
}

// Scale implements compute.Backend (kernel scale_inplace).
func (b *Backend) Scale(x compute.Buffer, s float32, N int) {
	const op = "Scale"
	if !b.dims(op, N) {
		return
	}
	d := b.f(op, "x", x, N)
	b.launch("scale_inplace", b.elemGrid(N), b.elemBlock(), ptr(d), s, N)
}

// ---- loss heads ----

func (b *Backend) lossArgs(op string, out, probs, logits compute.Buffer, targets compute.IntBuffer, N, V int) (o, p, l, t uintptr) {
	if !b.dims(op, N, V) {
		return
	}
	o, p, l = b.f(op, "out", out, N), b.f(op, "probs", probs, N*V), b.f(op, "logits", logits, N*V)
	t = b.ints(op, "targets", targets, N)
	return
}

// CrossEntropyForward implements compute.Backend (kernel crossentropy_forward).
func (b *Backend) CrossEntropyForward(losses, probs, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	o, p, l, t := b.lossArgs("CrossEntropyForward", losses, probs, logits, targets, N, V)
	b.launch("crossentropy_forward", [3]uint32{uint32(N), 1, 1}, b.rowBlock(),
		ptr(o), ptr(p), ptr(l), ptr(t), N, V, ptr(b.errFlag))
}

// CrossEntropyBackward implements compute.Backend (kernel crossentropy_backward).
func (b *Backend) CrossEntropyBackward(dlogits, probs, dlosses compute.Buffer, targets compute.IntBuffer, N, V int) {
	d, p, dl, t := b.lossArgs("CrossEntropyBackward", dlosses, probs, dlogits, targets, N, V)
	b.launch("crossentropy_backward", [3]uint32{uint32(N), 1, 1}, b.rowBlock(),
		ptr(dl), ptr(p), ptr(d), ptr(t), N, V, ptr(b.errFlag))
}

// LogProbForward implements compute.Backend (kernel logprob_forward).
func (b *Backend) LogProbForward(logp, probs, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	o, p, l, t := b.lossArgs("LogProbForward", logp, probs, logits, targets, N, V)
	b.launch("logprob_forward", [3]uint32{uint32(N), 1, 1}, b.rowBlock(),
		ptr(o), ptr(p), ptr(l), ptr(t), N, V, ptr(b.errFlag))
}

// LogProbBackward implements compute.Backend (kernel logprob_backward).
func (b *Backend) LogProbBackward(dlogits, probs, dlogp compute.Buffer, targets compute.IntBuffer, N, V int) {
	d, p, dl, t := b.lossArgs("LogProbBackward", dlogp, probs, dlogits, targets, N, V)
	b.launch("logprob_backward", [3]uint32{uint32(N), 1, 1}, b.rowBlock(),
		ptr(dl), ptr(p), ptr(d), ptr(t), N, V, ptr(b.errFlag))
}

// ---- optimizer ----

// adamArgs validates h and returns the scalar kernel arguments.
func (b *Backend) adamArgs(op string, h compute.AdamW) []any {
	if h.Step < 1 {
		b.fail(compute.ShapeError(op, "Step=%d, must be >= 1", h.Step))
		return nil
	}
	scale := h.GradScale
	if scale == 0 {
		scale = 1
	}
	bc1 := float32(1 - math.Pow(float64(h.Beta1), float64(h.Step)))
	bc2 := float32(1 - math.Pow(float64(h.Beta2), float64(h.Step)))
	return []any{h.LR, h.Beta1, h.Beta2, h.Eps, h.WeightDecay, bc1, bc2, scale}
}

// AdamWUpdate implements compute.Backend (kernel adamw_update).
func (b *Backend) AdamWUpdate(params, grads, m, v compute.Buffer, N int, h compute.AdamW) {
	const op = "AdamWUpdate"
	if !b.dims(op, N) {
		return
	}
	hp := b.adamArgs(op, h)
	p, g := b.f(op, "params", params, N), b.f(op, "grads", grads, N)
	ms, vs := b.f(op, "m", m, N), b.f(op, "v", v, N)
	if b.err != nil {
		return
	}
	b.launch("adamw_update", b.elemGrid(N), b.elemBlock(), append([]any{ptr(p), ptr(g), ptr(ms), ptr(vs), N}, hp...)...)
}

// SumSquares implements compute.Backend (kernel sum_squares: float64 partial
// sums, warp shuffles, one double atomicAdd per block).
func (b *Backend) SumSquares(x compute.Buffer, N int) float64 {
	const op = "SumSquares"
	if !b.dims(op, N) {
		return 0
	}
	d := b.f(op, "x", x, N)
	if b.err != nil {
		return 0
	}
	if err := b.dev.Memset32(b.sumsq, 0, 2); err != nil {
		b.fail(fmt.Errorf("%s: %w: %v", op, ErrDevice, err))
		return 0
	}
	b.launch("sum_squares", b.elemGrid(N), b.elemBlock(), ptr(b.sumsq), ptr(d), N)
	if b.Sync() != nil {
		return 0
	}
	var s float64
	if err := b.dev.DtoH(unsafePointer(&s), b.sumsq, 8); err != nil {
		b.fail(fmt.Errorf("%s: %w: %v", op, ErrDevice, err))
		return 0
	}
	return s
}
