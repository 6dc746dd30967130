package cpu

import (
	"math"

	"troupe/gpu/compute/cpu/gemm"
)

// Fast kernels of the decoder ops (RMSNorm, RoPE, GQA, SwiGLU), beside their
// references in ref_decoder.go. Pointwise and row ops are float32 loops
// parallel over rows; attention runs its q·kᵀ and att·v products through
// gemm in causal row blocks once T pays for gemm's packing (gemmMinT), and
// plain loops below that; the decode step is, per (row, head), the query's
// dot products with the cached keys and a weighted sum of the cached
// values (AVX2 kernels in attn_amd64.s).

// decArgs holds the arguments of a decoder kernel: the attention kernels
// take more than job's six slices, and named fields read better.
type decArgs struct {
	out, att, q, k, v       []float32
	dout, dq, dk, dv, d     []float32
	cache                   []float32
	qh, kh, vh              []uint16 // BF16 q, k and v (GQAttentionForwardBF16)
	pos                     []int32
	B, T, NH, KVH, HD, maxT int
	pairs                   int // row-block pairs per head (attention)
	scale                   float32
	fresh                   [3]bool // dq, dk, dv: overwrite instead of accumulate
	useGemm                 bool
}

// gemmMinT is the sequence length from which the attention products go
// through gemm: below it a product is a few hundred multiply-adds and
// gemm's packing and edge tiles cost more than plain loops. Measured at
// SmolLM2's heads (HD 64, 9/3 heads, B=4, forward+backward): loops and gemm
// tie at T=8, gemm is 1.7x faster at T=16 and 2.5x at T=32.
const gemmMinT = 8

// The causal attention kernels split each head's T rows into blocks of
// attBlock rows (block r0..r1 only needs key positions 0..r1). Block costs
// grow with r1, so each parallel item takes block j together with block
// nb-1-j: items then cost the same and parallelFor's contiguous chunks
// balance.
func blockPairs(T int) (nb, pairs int) {
	nb = (T + attBlock - 1) / attBlock
	return nb, (nb + 1) / 2
}

// pairBlocks calls fn for the (one or two) row blocks of pair j.
func pairBlocks(T, nb, j int, fn func(r0, r1 int)) {
	fn(j*attBlock, min((j+1)*attBlock, T))
	if o := nb - 1 - j; o != j {
		fn(o*attBlock, min((o+1)*attBlock, T))
	}
}

func (b *Backend) embedForward(out []float32, inp []int32, wte []float32, N, C int) {
	j := b.newJob(kEmbedForward)
	j.f[0], j.f[1], j.ints = out, wte, inp
	j.n[0] = C
	parallelFor(N, grainRows*4, j)
}

func kEmbedForward(j *job, _, lo, hi int) {
	out, wte, inp, C := j.f[0], j.f[1], j.ints, j.n[0]
	for n := lo; n < hi; n++ {
		copy(out[n*C:n*C+C], wte[int(inp[n])*C:][:C])
	}
}

// embedBackward splits the columns across cores: each core adds its
// columns of every row, so rows with the same token never race.
func (b *Backend) embedBackward(dwte, dout []float32, inp []int32, N, C int) {
	j := b.newJob(kEmbedBackward)
	j.f[0], j.f[1], j.ints = dwte, dout, inp
	j.n[0], j.n[1] = N, C
	grain := 64
	if N*C < grainElems {
		grain = C // not worth a fork
	}
	parallelFor(C, grain, j)
}

func kEmbedBackward(j *job, _, lo, hi int) {
	dwte, dout, inp := j.f[0], j.f[1], j.ints
	N, C := j.n[0], j.n[1]
	for n := 0; n < N; n++ {
		d := dout[n*C+lo : n*C+hi]
		w := dwte[int(inp[n])*C+lo:][:len(d)]
		for i, v := range d {
			w[i] += v
		}
	}
}

func (b *Backend) rmsNormForward(out, rstd, inp, weight []float32, N, C int, eps float32) {
	j := b.newJob(kRMSNormForward)
	j.f[0], j.f[1], j.f[2], j.f[3] = out, rstd, inp, weight[:C]
	j.n[0], j.x[0] = C, eps
	parallelFor(N, grainRows, j)
}

func kRMSNormForward(j *job, _, lo, hi int) {
	out, rstd, inp, weight := j.f[0], j.f[1], j.f[2], j.f[3]
	C, eps := j.n[0], j.x[0]
	for n := lo; n < hi; n++ {
		x := inp[n*C : n*C+C]
		ss := sumSqDev8(x, 0)
		r := float32(1 / math.Sqrt(float64(ss)/float64(C)+float64(eps)))
		o, w := out[n*C:n*C+C], weight[:len(x)]
		for i, v := range x {
			o[i] = v * r * w[i]
		}
		rstd[n] = r
	}
}

// rmsNormBackward: dweight is summed per chunk in scratch, then added (or,
// with freshW, stored); dinp rows are overwritten when fresh.
func (b *Backend) rmsNormBackward(dinp, dweight, dout, inp, weight, rstd []float32, N, C int, fresh, freshW bool) {
	j := b.newJob(kRMSNormBackward)
	j.f = [6][]float32{dinp, dout, inp, weight[:C], rstd}
	j.n[0], j.flag = C, fresh
	if dweight != nil {
		j.sc = b.scratchFor(C)
		for _, s := range j.sc {
			clear(s)
		}
	}
	parallelFor(N, grainRows, j)
	if dweight == nil {
		return
	}
	if freshW {
		clear(dweight)
	}
	for _, s := range j.sc {
		for i, v := range s[:C] {
			dweight[i] += v
		}
	}
}

func kRMSNormBackward(j *job, chunk, lo, hi int) {
	dinp, dout, inp, weight, rstd := j.f[0], j.f[1], j.f[2], j.f[3], j.f[4]
	C := j.n[0]
	var dw []float32
	if j.sc != nil {
		dw = j.sc[chunk][:C]
	}
	for n := lo; n < hi; n++ {
		x := inp[n*C : n*C+C]
		g, di, w := dout[n*C : n*C+C][:len(x)], dinp[n*C : n*C+C][:len(x)], weight[:len(x)]
		r := rstd[n]
		k := r * r * r * dot3(g, w, x) / float32(C)
		if j.flag {
			for i, xv := range x {
				di[i] = r*w[i]*g[i] - k*xv
			}
		} else {
			for i, xv := range x {
				di[i] += r*w[i]*g[i] - k*xv
			}
		}
		if dw != nil {
			dw = dw[:len(x)]
			for i, xv := range x {
				dw[i] += g[i] * xv * r
			}
		}
	}
}

// dot3 is Σ a·b·c with four independent sums.
func dot3(a, b, c []float32) float32 {
	var s [4]float32
	n := len(a)
	b, c = b[:n], c[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		s[0] += a[i] * b[i] * c[i]
		s[1] += a[i+1] * b[i+1] * c[i+1]
		s[2] += a[i+2] * b[i+2] * c[i+2]
		s[3] += a[i+3] * b[i+3] * c[i+3]
	}
	for ; i < n; i++ {
		s[0] += a[i] * b[i] * c[i]
	}
	return (s[0] + s[1]) + (s[2] + s[3])
}

func (b *Backend) rope(x []float32, pos []int32, cos, sin []float32, N, H, HD int, sign float64) {
	j := b.newJob(kRope)
	j.f[0], j.f[1], j.f[2], j.ints = x, cos, sin, pos
	j.n[0], j.n[1], j.x[0] = H, HD, float32(sign)
	parallelFor(N, max(1, grainElems/4/(H*HD)), j)
}

func kRope(j *job, _, lo, hi int) {
	x, cos, sin, pos := j.f[0], j.f[1], j.f[2], j.ints
	H, HD, sign := j.n[0], j.n[1], j.x[0]
	half := HD / 2
	for n := lo; n < hi; n++ {
		c := cos[int(pos[n])*half:][:half]
		s := sin[int(pos[n])*half:][:half]
		for h := 0; h < H; h++ {
			v := x[(n*H+h)*HD:][:HD]
			x0, x1 := v[:half], v[half:][:half]
			for i, a := range x0 {
				b, cc, ss := x1[i], c[i], sign*s[i]
				x0[i] = a*cc - b*ss
				x1[i] = b*cc + a*ss
			}
		}
	}
}

// swigluBlock is how many elements the SwiGLU kernels put through the
// vector exp at once (a stack array).
const swigluBlock = 256

func (b *Backend) swiGLUForward(out, gate, up []float32, N int) {
	j := b.newJob(kSwiGLUForward)
	j.f[0], j.f[1], j.f[2] = out, gate, up
	parallelFor(N, grainElems/4, j)
}

func kSwiGLUForward(j *job, _, lo, hi int) {
	out, gate, up := j.f[0][lo:hi], j.f[1][lo:hi], j.f[2][lo:hi]
	v := swigluFwdVec(out, gate, up)
	out, gate, up = out[v:], gate[v:], up[v:]
	var e [swigluBlock]float32
	for len(gate) > 0 {
		m := min(len(gate), swigluBlock)
		g, u, o, ex := gate[:m], up[:m], out[:m], e[:m]
		for i, x := range g {
			ex[i] = -x
		}
		expShift(ex, 0) // e^-g
		for i, x := range g {
			o[i] = x * u[i] / (1 + ex[i])
		}
		gate, up, out = gate[m:], up[m:], out[m:]
	}
}

func (b *Backend) swiGLUBackward(dgate, dup, dout, gate, up []float32, N int, freshG, freshU bool) {
	j := b.newJob(kSwiGLUBackward)
	j.f[0], j.f[1], j.f[2], j.f[3], j.f[4] = dgate, dup, dout, gate, up
	j.n[0], j.n[1] = b2i(freshG), b2i(freshU)
	parallelFor(N, grainElems/4, j)
}

func b2i(x bool) int {
	if x {
		return 1
	}
	return 0
}

func kSwiGLUBackward(j *job, _, lo, hi int) {
	dgate, dup, dout, gate, up := j.f[0][lo:hi], j.f[1][lo:hi], j.f[2][lo:hi], j.f[3][lo:hi], j.f[4][lo:hi]
	setG, setU := j.n[0] == 1, j.n[1] == 1
	v := swigluBwdVec(dgate, dup, dout, gate, up, setG, setU)
	dgate, dup, dout, gate, up = dgate[v:], dup[v:], dout[v:], gate[v:], up[v:]
	var e [swigluBlock]float32
	for len(gate) > 0 {
		m := min(len(gate), swigluBlock)
		g, u, d, dg, du, ex := gate[:m], up[:m], dout[:m], dgate[:m], dup[:m], e[:m]
		for i, x := range g {
			ex[i] = -x
		}
		expShift(ex, 0)
		for i, x := range g {
			s := 1 / (1 + ex[i]) // σ(g)
			dgv := d[i] * u[i] * s * (1 + x*(1-s))
			duv := d[i] * x * s
			if setG {
				dg[i] = dgv
			} else {
				dg[i] += dgv
			}
			if setU {
				du[i] = duv
			} else {
				du[i] += duv
			}
		}
		gate, up, dout, dgate, dup = gate[m:], up[m:], dout[m:], dgate[m:], dup[m:]
	}
}

// ---- attention ----

// prodNT: c (m×n, ldc) = alpha · a (m×k, lda) · bᵀ, b (n×k, ldb), c
// overwritten; gemm from gemmMinT on, else dot products.
func prodNT(g *gemm.Engine, useGemm bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if useGemm {
		g.Sgemm(false, true, m, n, k, alpha, a, lda, b, ldb, 0, c, ldc)
		return
	}
	for i := 0; i < m; i++ {
		cr := c[i*ldc:][:n]
		dots(cr, a[i*lda:][:k], b, ldb)
		if alpha != 1 {
			for j := range cr {
				cr[j] *= alpha
			}
		}
	}
}

// prodNN: c (m×n) = a (m×k) · b (k×n) (+ c when acc).
func prodNN(g *gemm.Engine, useGemm bool, m, n, k int, a []float32, lda int, b []float32, ldb int, acc bool, c []float32, ldc int) {
	if useGemm {
		g.Sgemm(false, false, m, n, k, 1, a, lda, b, ldb, beta(acc), c, ldc)
		return
	}
	for i := 0; i < m; i++ {
		cr := c[i*ldc:][:n]
		if !acc {
			wsum(cr, b, ldb, a[i*lda:][:k])
			continue
		}
		for p, x := range a[i*lda:][:k] {
			if x != 0 {
				axpy(cr, b[p*ldb:][:n], x)
			}
		}
	}
}

// prodTN: c (m×n) = aᵀ · b, a (k×m), b (k×n) (+ c when acc).
func prodTN(g *gemm.Engine, useGemm bool, m, n, k int, a []float32, lda int, b []float32, ldb int, acc bool, c []float32, ldc int) {
	if useGemm {
		g.Sgemm(true, false, m, n, k, 1, a, lda, b, ldb, beta(acc), c, ldc)
		return
	}
	if !acc {
		for i := 0; i < m; i++ {
			clear(c[i*ldc:][:n])
		}
	}
	for p := 0; p < k; p++ {
		br := b[p*ldb:][:n]
		for i, x := range a[p*lda:][:m] {
			if x != 0 {
				axpy(c[i*ldc:][:n], br, x)
			}
		}
	}
}

func beta(acc bool) float32 {
	if acc {
		return 1
	}
	return 0
}

// dot8 is Σ a·b with eight independent sums.
func dot8(a, b []float32) float32 {
	var s [8]float32
	n := len(a)
	b = b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		x, y := (*[8]float32)(a[i:]), (*[8]float32)(b[i:])
		s[0] += x[0] * y[0]
		s[1] += x[1] * y[1]
		s[2] += x[2] * y[2]
		s[3] += x[3] * y[3]
		s[4] += x[4] * y[4]
		s[5] += x[5] * y[5]
		s[6] += x[6] * y[6]
		s[7] += x[7] * y[7]
	}
	for ; i < n; i++ {
		s[0] += a[i] * b[i]
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// dotsGo is dots in Go: out[s] = q·k[s*ldk:][:len(q)].
func dotsGo(out, q, k []float32, ldk int) {
	for s := range out {
		out[s] = dot8(q, k[s*ldk:][:len(q)])
	}
}

// wsumGo is wsum in Go: out = Σ_s w[s]·v[s*ldv:][:len(out)].
func wsumGo(out, v []float32, ldv int, w []float32) {
	clear(out)
	for s, x := range w {
		axpy(out, v[s*ldv:][:len(out)], x)
	}
}

// axpy: y += a·x.
func axpy(y, x []float32, a float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// softmaxRowsCausalRange does softmaxRowsCausal's work on rows r0..r1 of
// the T×T block a, writing columns 0..r1 only (the caller's products read
// no further; the forward clears the rest itself).
func softmaxRowsCausalRange(a []float32, T, r0, r1 int) {
	for t := r0; t < r1; t++ {
		row := a[t*T : t*T+r1]
		maxv := maxVec(row[:t+1])
		scaleVec(row[:t+1], 1/expShift(row[:t+1], maxv))
		clear(row[t+1:])
	}
}

func (b *Backend) gqAttentionForward(out, att, q, k, v []float32, B, T, NH, KVH, HD int, scale float32) {
	_, pairs := blockPairs(T)
	b.dec = decArgs{out: out, att: att, q: q, k: k, v: v, B: B, T: T, NH: NH, KVH: KVH, HD: HD,
		pairs: pairs, scale: scale, useGemm: T >= gemmMinT}
	j := b.newJob(kGQAttentionForward)
	j.d = &b.dec
	parallelFor(B*NH*pairs, 1, j)
}

// kGQAttentionForward runs the causal attention of its (row, head, block
// pair) items; with d.qh set (GQAttentionForwardBF16) both products take
// the BF16 q, k and v through gemm.GemmBF16.
func kGQAttentionForward(j *job, _, lo, hi int) {
	d := j.d
	T, NH, HD := d.T, d.NH, d.HD
	qs, ks := NH*HD, d.KVH*HD
	nb, _ := blockPairs(T)
	bf := d.qh != nil
	for it := lo; it < hi; it++ {
		bh, pj := it/d.pairs, it%d.pairs
		bb, h := bh/NH, bh%NH
		g := h / (NH / d.KVH)
		qo, ko := bb*T*qs+h*HD, bb*T*ks+g*HD
		a := d.att[bh*T*T : (bh+1)*T*T]
		o := d.out[qo:]
		pairBlocks(T, nb, pj, func(r0, r1 int) {
			if bf {
				gemm.GemmBF16(j.g, false, true, r1-r0, r1, HD, d.scale, d.qh[qo+r0*qs:], qs, d.kh[ko:], ks, 0, a[r0*T:], T)
			} else {
				prodNT(j.g, d.useGemm, r1-r0, r1, HD, d.scale, d.q[qo+r0*qs:], qs, d.k[ko:], ks, a[r0*T:], T)
			}
			softmaxRowsCausalRange(a, T, r0, r1)
			for t := r0; t < r1; t++ {
				clear(a[t*T+r1 : t*T+T])
			}
			if bf {
				gemm.GemmBF16(j.g, false, false, r1-r0, HD, r1, 1, a[r0*T:], T, d.vh[ko:], ks, 0, o[r0*qs:], qs)
			} else {
				prodNN(j.g, d.useGemm, r1-r0, HD, r1, a[r0*T:], T, d.v[ko:], ks, false, o[r0*qs:], qs)
			}
		})
	}
}

// gqAttentionBackward runs in two parallel passes so that no two cores
// write the same gradient: pass 1 over (row, query head, row blocks)
// writes the score gradients dpre (into scratch the size of att) and dq;
// pass 2 over (row, key/value head, key blocks) sums, over the query heads
// sharing the key/value head, dv = attᵀ·dout and dk = dpreᵀ·q.
func (b *Backend) gqAttentionBackward(dq, dk, dv, dout, q, k, v, att []float32, B, T, NH, KVH, HD int, scale float32, fresh [3]bool) {
	_, pairs := blockPairs(T)
	n := B * NH * T * T
	if cap(b.decD) < n {
		b.decD = make([]float32, n)
	}
	b.dec = decArgs{dq: dq, dk: dk, dv: dv, dout: dout, q: q, k: k, v: v, att: att, d: b.decD[:n],
		B: B, T: T, NH: NH, KVH: KVH, HD: HD, pairs: pairs, scale: scale, fresh: fresh, useGemm: T >= gemmMinT}
	j := b.newJob(kGQAttentionBackwardQ)
	j.d = &b.dec
	parallelFor(B*NH*pairs, 1, j)
	j = b.newJob(kGQAttentionBackwardKV)
	j.d = &b.dec
	parallelFor(B*KVH*pairs, 1, j)
}

func kGQAttentionBackwardQ(j *job, _, lo, hi int) {
	d := j.d
	T, NH, HD := d.T, d.NH, d.HD
	qs, ks := NH*HD, d.KVH*HD
	nb, _ := blockPairs(T)
	for it := lo; it < hi; it++ {
		bh, pj := it/d.pairs, it%d.pairs
		bb, h := bh/NH, bh%NH
		g := h / (NH / d.KVH)
		k, v := d.k[bb*T*ks+g*HD:], d.v[bb*T*ks+g*HD:]
		do, dq := d.dout[bb*T*qs+h*HD:], d.dq[bb*T*qs+h*HD:]
		a, dp := d.att[bh*T*T:(bh+1)*T*T], d.d[bh*T*T:(bh+1)*T*T]
		pairBlocks(T, nb, pj, func(r0, r1 int) {
			// datt = dout · Vᵀ on rows r0..r1, key columns 0..r1
			prodNT(j.g, d.useGemm, r1-r0, r1, HD, 1, do[r0*qs:], qs, v, ks, dp[r0*T:], T)
			// softmax backward in place: dpre = att ⊙ (datt − rowdot) · scale
			for t := r0; t < r1; t++ {
				ar, dr := a[t*T:t*T+t+1], dp[t*T:t*T+r1]
				dot := dot8(ar, dr[:t+1])
				for s, x := range ar {
					dr[s] = x * (dr[s] - dot) * d.scale
				}
				clear(dr[t+1:])
			}
			// dq (+)= dpre · K
			prodNN(j.g, d.useGemm, r1-r0, HD, r1, dp[r0*T:], T, k, ks, !d.fresh[0], dq[r0*qs:], qs)
		})
	}
}

// kGQAttentionBackwardKV: key block s0..s1 gets contributions from query
// rows s0..T; pass 1 wrote dpre on rows t of block [r0,r1) for columns
// 0..r1, with the same block boundaries, so every column s <= t it reads
// here is written (zeros for s > t).
func kGQAttentionBackwardKV(j *job, _, lo, hi int) {
	d := j.d
	T, NH, KVH, HD := d.T, d.NH, d.KVH, d.HD
	qs, ks := NH*HD, KVH*HD
	group := NH / KVH
	nb, _ := blockPairs(T)
	for it := lo; it < hi; it++ {
		bg, pj := it/d.pairs, it%d.pairs
		bb, g := bg/KVH, bg%KVH
		dk, dv := d.dk[bb*T*ks+g*HD:], d.dv[bb*T*ks+g*HD:]
		pairBlocks(T, nb, pj, func(s0, s1 int) {
			for i := 0; i < group; i++ {
				h := g*group + i
				bh := bb*NH + h
				a, dp := d.att[bh*T*T:(bh+1)*T*T], d.d[bh*T*T:(bh+1)*T*T]
				q, do := d.q[bb*T*qs+h*HD:], d.dout[bb*T*qs+h*HD:]
				accV, accK := i > 0 || !d.fresh[2], i > 0 || !d.fresh[1]
				// dv[s0:s1] (+)= att[s0:T, s0:s1]ᵀ · dout[s0:T]
				prodTN(j.g, d.useGemm, s1-s0, HD, T-s0, a[s0*T+s0:], T, do[s0*qs:], qs, accV, dv[s0*ks:], ks)
				// dk[s0:s1] (+)= dpre[s0:T, s0:s1]ᵀ · q[s0:T]
				prodTN(j.g, d.useGemm, s1-s0, HD, T-s0, dp[s0*T+s0:], T, q[s0*qs:], qs, accK, dk[s0*ks:], ks)
			}
		})
	}
}

// gqAttentionDecode writes each row's k, v into the cache, then computes
// each (row, head)'s attention over its own cached positions.
func (b *Backend) gqAttentionDecode(out, cache, q, k, v []float32, pos []int32, B, maxT, NH, KVH, HD int, scale float32) {
	kd := KVH * HD
	work := 0
	for bb, p := range pos {
		copy(cache[(bb*maxT+int(p))*2*kd:][:kd], k[bb*kd:][:kd])
		copy(cache[((bb*maxT+int(p))*2+1)*kd:][:kd], v[bb*kd:][:kd])
		work += (int(p) + 1) * NH * HD
	}
	b.dec = decArgs{out: out, cache: cache, q: q, pos: pos, B: B, maxT: maxT, NH: NH, KVH: KVH, HD: HD, scale: scale}
	j := b.newJob(kGQAttentionDecode)
	j.d = &b.dec
	j.sc = b.scratchFor(maxT + HD)
	// a fork costs a few µs: split only when each core gets real work
	grain := B * NH
	if work >= 1<<14 {
		grain = 1
	}
	parallelFor(B*NH, grain, j)
}

func kGQAttentionDecode(j *job, chunk, lo, hi int) {
	d := j.d
	NH, HD, maxT := d.NH, d.HD, d.maxT
	kd := d.KVH * HD
	group := NH / d.KVH
	sc := j.sc[chunk]
	qs := sc[maxT : maxT+HD] // the query times scale
	for bh := lo; bh < hi; bh++ {
		bb, h := bh/NH, bh%NH
		g := h / group
		p := int(d.pos[bb])
		for i, x := range d.q[bh*HD:][:HD] {
			qs[i] = x * d.scale
		}
		rows := d.cache[bb*maxT*2*kd+g*HD:]
		w := sc[:p+1]
		dots(w, qs, rows, 2*kd)
		maxv := w[0]
		for _, x := range w[1:] {
			maxv = max(maxv, x)
		}
		inv := 1 / expShift(w, maxv)
		o := d.out[bh*HD:][:HD]
		wsum(o, rows[kd:], 2*kd, w)
		for i := range o {
			o[i] *= inv
		}
	}
}
