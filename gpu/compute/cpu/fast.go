package cpu

import (
	"math"

	"troupe/gpu/compute"
)

// Fast kernels: every matmul (including the ones inside attention) goes
// through the Backend's gemm.Engine; the rest are float32 loops parallel over rows or heads
// through the shared pool, with per-chunk scratch reused across calls.

// Grain sizes: below these, one goroutine is faster than a fork/join.
const (
	grainElems = 1 << 15 // pointwise ops, elements per chunk
	grainRows  = 16      // row ops, rows per chunk
)

// scratchFor returns per-chunk scratch slices of at least n floats.
func (b *Backend) scratchFor(n int) [][]float32 {
	w := b.workers()
	if len(b.scratch) != w {
		b.scratch = make([][]float32, w)
	}
	for i := range b.scratch {
		if cap(b.scratch[i]) < n {
			b.scratch[i] = make([]float32, n)
		}
		b.scratch[i] = b.scratch[i][:n]
	}
	return b.scratch
}

func (b *Backend) partials() []float64 {
	if w := b.workers(); len(b.partial) != w {
		b.partial = make([]float64, w)
	}
	clear(b.partial)
	return b.partial
}

// expf is a float32 exp (Cephes expf: range reduction to [-ln2/2, ln2/2] and
// a degree-6 polynomial), relative error ~2e-7, about 5x cheaper than
// float32(math.Exp(float64(x))).
func expf(x float32) float32 {
	if x < -87 {
		if x != x {
			return x
		}
		return 0
	}
	if x > 88 {
		return float32(math.Inf(1))
	}
	t := x * 1.4426950408889634
	var n int32
	if t >= 0 {
		n = int32(t + 0.5)
	} else {
		n = int32(t - 0.5)
	}
	fn := float32(n)
	r := x - fn*0.693359375 + fn*2.12194440e-4
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// Each parallel kernel is a top-level function reading its arguments from
// the Backend's job (a closure would be heap-allocated on every call).

// job resets and returns the Backend's job for kernel fn.
func (b *Backend) newJob(fn func(j *job, chunk, lo, hi int)) *job {
	b.job = job{fn: fn, g: b.gemm, w: b.workers()}
	return &b.job
}

// sumSqDev8 is sum (x-m)² over a row (RMSNorm's with m = 0) in eight
// independent float32 sums: one running sum is a chain of dependent adds
// (latency-bound, ~4 cycles each); eight keep the adders busy. The sum
// differs from a left-to-right loop only in rounding.
func sumSqDev8(x []float32, m float32) float32 {
	var a [8]float32
	i := 0
	for ; i+8 <= len(x); i += 8 {
		v := (*[8]float32)(x[i:])
		d0, d1, d2, d3 := v[0]-m, v[1]-m, v[2]-m, v[3]-m
		d4, d5, d6, d7 := v[4]-m, v[5]-m, v[6]-m, v[7]-m
		a[0] += d0 * d0
		a[1] += d1 * d1
		a[2] += d2 * d2
		a[3] += d3 * d3
		a[4] += d4 * d4
		a[5] += d5 * d5
		a[6] += d6 * d6
		a[7] += d7 * d7
	}
	for ; i < len(x); i++ {
		d := x[i] - m
		a[0] += d * d
	}
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

func (b *Backend) matmulForward(out, inp, weight, bias []float32, N, C, OC int) {
	if bias != nil {
		b.gemm.SgemmBias(false, true, N, OC, C, 1, inp, C, weight, C, bias, out, OC)
		return
	}
	b.gemm.Sgemm(false, true, N, OC, C, 1, inp, C, weight, C, 0, out, OC)
}

// matmulBackward accumulates the gradients; those marked fresh (dinp,
// dweight, dbias: a Zero is pending, see lazyzero.go) are overwritten.
func (b *Backend) matmulBackward(dinp, dweight, dbias, dout, inp, weight []float32, N, C, OC int, fresh [3]bool) {
	var beta [3]float32
	for i, f := range fresh {
		if !f {
			beta[i] = 1
		}
	}
	if dinp != nil {
		b.gemm.Sgemm(false, false, N, C, OC, 1, dout, OC, weight, C, beta[0], dinp, C)
	}
	if dweight != nil {
		b.gemm.Sgemm(true, false, OC, C, N, 1, dout, OC, inp, C, beta[1], dweight, C)
	}
	if dbias != nil {
		// column sums as a (1×N)·(N×OC) product with a ones vector
		if len(b.ones) < N {
			b.ones = make([]float32, N)
			for i := range b.ones {
				b.ones[i] = 1
			}
		}
		b.gemm.Sgemm(false, false, 1, OC, N, 1, b.ones, N, dout, OC, beta[2], dbias, OC)
	}
}

// softmaxRowsCausal turns row t of the T×T block a (raw scores) into softmax
// over columns 0..t and zeroes columns > t.
func softmaxRowsCausal(a []float32, T int) {
	for t := 0; t < T; t++ {
		row := a[t*T : t*T+T]
		maxv := maxVec(row[:t+1])
		scaleVec(row[:t+1], 1/expShift(row[:t+1], maxv))
		clear(row[t+1:])
	}
}

// attBlock is the row-block size of the causal attention products.
const attBlock = 32

// zero clears x on every core: each clears the part it will most likely
// write next (the row halves the other kernels use), so the lines stay in
// that core's cache instead of being pulled over from the other one.
func (b *Backend) zero(x []float32) {
	j := b.newJob(kZero)
	j.f[0] = x
	parallelFor(len(x), grainElems, j)
}

func kZero(j *job, _, lo, hi int) { clear(j.f[0][lo:hi]) }

func (b *Backend) residualForward(out, x, y []float32, N int) {
	j := b.newJob(kResidualForward)
	j.f[0], j.f[1], j.f[2] = out, x, y
	parallelFor(N, grainElems, j)
}

func kResidualForward(j *job, _, lo, hi int) {
	o, a, c := j.f[0][lo:hi], j.f[1][lo:hi], j.f[2][lo:hi]
	for i := range o {
		o[i] = a[i] + c[i]
	}
}

// softmaxGather writes probs = softmax(logits) and per row either the
// cross-entropy (ce) lse - logit[target] or the log-prob logit[target] - lse.
func (b *Backend) softmaxGather(out, probs, logits []float32, targets []int32, N, V int, ce bool) {
	j := b.newJob(kSoftmaxGather)
	j.f[0], j.f[1], j.f[2], j.ints = out, probs, logits, targets
	j.n[0], j.flag = V, ce
	parallelFor(N, grainRows, j)
}

func kSoftmaxGather(j *job, _, lo, hi int) {
	out, probs, logits, targets := j.f[0], j.f[1], j.f[2], j.ints
	V := j.n[0]
	for n := lo; n < hi; n++ {
		l, p := logits[n*V:n*V+V], probs[n*V:n*V+V]
		tgt := l[targets[n]]
		maxv := maxVec(l)
		copy(p, l) // no-op when probs aliases logits
		sum := expShift(p, maxv)
		scaleVec(p, 1/sum)
		lse := maxv + float32(math.Log(float64(sum)))
		if j.flag {
			out[n] = lse - tgt
		} else {
			out[n] = tgt - lse
		}
	}
}

// softmaxGatherBackward: dlogits += (probs - onehot) * d[n] * -sign, where
// sign is -1 for cross-entropy and +1 for log-prob.
func (b *Backend) softmaxGatherBackward(dlogits, probs, d []float32, targets []int32, N, V int, sign float32) {
	j := b.newJob(kSoftmaxGatherBackward)
	j.f[0], j.f[1], j.f[2], j.ints = dlogits, probs, d, targets
	j.n[0], j.x[0] = V, sign
	parallelFor(N, grainRows, j)
}

func kSoftmaxGatherBackward(j *job, _, lo, hi int) {
	dlogits, probs, d, targets := j.f[0], j.f[1], j.f[2], j.ints
	V, sign := j.n[0], j.x[0]
	for n := lo; n < hi; n++ {
		f := -sign * d[n]
		if f == 0 {
			continue
		}
		dl, p := dlogits[n*V:n*V+V], probs[n*V:n*V+V]
		for i, x := range p {
			dl[i] += x * f
		}
		dl[targets[n]] -= f
	}
}

func (b *Backend) adamW(params, grads, m, v []float32, N int, h compute.AdamW, scale float32) {
	b1, b2 := h.Beta1, h.Beta2
	c1 := float32(1 - math.Pow(float64(b1), float64(h.Step)))
	c2 := float32(1 - math.Pow(float64(b2), float64(h.Step)))
	k := &b.adamK
	for i, x := range [10]float32{scale, b1, 1 - b1, b2, 1 - b2, 1 / c1, 1 / c2, h.Eps, h.LR, h.WeightDecay} {
		for j := range k[i] {
			k[i][j] = x
		}
	}
	j := b.newJob(kAdamW)
	j.f[0], j.f[1], j.f[2], j.f[3] = params, grads, m, v
	j.x = [8]float32{scale, b1, b2, c1, c2, h.Eps, h.LR, h.WeightDecay}
	j.k = k
	parallelFor(N, grainElems, j)
}

func kAdamW(j *job, _, lo, hi int) {
	p, g, ms, vs := j.f[0][lo:hi], j.f[1][lo:hi], j.f[2][lo:hi], j.f[3][lo:hi]
	scale, b1, b2, c1, c2, eps, lr, wd := j.x[0], j.x[1], j.x[2], j.x[3], j.x[4], j.x[5], j.x[6], j.x[7]
	done := adamwVec(p, g, ms, vs, j.k)
	p, g, ms, vs = p[done:], g[done:], ms[done:], vs[done:]
	for i := range p {
		gi := g[i] * scale
		mi := b1*ms[i] + (1-b1)*gi
		vi := b2*vs[i] + (1-b2)*gi*gi
		ms[i], vs[i] = mi, vi
		den := float32(math.Sqrt(float64(vi/c2))) + eps
		p[i] -= lr * ((mi/c1)/den + wd*p[i])
	}
}

func (b *Backend) sumSquares(x []float32, N int) float64 {
	j := b.newJob(kSumSquares)
	j.f[0], j.part = x, b.partials()
	parallelFor(N, grainElems, j)
	var s float64
	for _, p := range j.part {
		s += p
	}
	return s
}

func kSumSquares(j *job, chunk, lo, hi int) {
	j.part[chunk] = sumSquaresVec(j.f[0][lo:hi])
}

// sumSquaresGo is sumSquaresVec in Go.
func sumSquaresGo(xs []float32) float64 {
	var s float64
	// float32 partial sums of 256 keep the float64 conversions rare
	for len(xs) > 0 {
		k := min(256, len(xs))
		var f float32
		for _, v := range xs[:k] {
			f += v * v
		}
		s += float64(f)
		xs = xs[k:]
	}
	return s
}

const transposeTile = 32 // cache-friendly blocks

func (b *Backend) transpose(dst, src []float32, rows, cols int) {
	j := b.newJob(kTranspose)
	j.f[0], j.f[1] = dst, src
	j.n[0], j.n[1] = rows, cols
	parallelFor((rows+transposeTile-1)/transposeTile, 1, j)
}

func kTranspose(j *job, _, lo, hi int) {
	dst, src := j.f[0], j.f[1]
	rows, cols := j.n[0], j.n[1]
	const tile = transposeTile
	for r0 := lo * tile; r0 < min(hi*tile, rows); r0 += tile {
		for c0 := 0; c0 < cols; c0 += tile {
			for r := r0; r < min(r0+tile, rows); r++ {
				for c := c0; c < min(c0+tile, cols); c++ {
					dst[c*rows+r] = src[r*cols+c]
				}
			}
		}
	}
}

func (b *Backend) matmulForwardT(out, inp, weightT, bias []float32, N, C, OC int) {
	beta := float32(0)
	if bias != nil {
		beta = 1
		for n := 0; n < N; n++ {
			copy(out[n*OC:n*OC+OC], bias)
		}
	}
	if N > 8 || OC < 64 || N*C*OC < 1<<17 {
		b.gemm.Sgemm(false, false, N, OC, C, 1, inp, C, weightT, OC, beta, out, OC)
		return
	}
	// A few rows (decoding) are matrix-vector products that gemm runs on one
	// goroutine; split the columns (in 16-wide panels) across cores instead,
	// since streaming the weight is the whole cost.
	j := b.newJob(kMatmulColumns)
	j.f[0], j.f[1], j.f[2] = out, inp, weightT
	j.n[0], j.n[1], j.n[2] = N, C, OC
	j.x[0] = beta
	parallelFor((OC+15)/16, 4, j)
}

func kMatmulColumns(j *job, _, lo, hi int) {
	out, inp, weightT := j.f[0], j.f[1], j.f[2]
	N, C, OC := j.n[0], j.n[1], j.n[2]
	c0, c1 := lo*16, min(hi*16, OC)
	j.g.Sgemm(false, false, N, c1-c0, C, 1, inp, C, weightT[c0:], OC, j.x[0], out[c0:], OC)
}
