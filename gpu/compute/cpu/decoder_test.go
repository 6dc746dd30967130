package cpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"troupe/gpu/compute"
)

// decShape is a decoder-op test shape: B rows of T tokens, NH query heads
// and KVH key/value heads of HD channels, model width C, vocabulary V,
// MLP width I.
type decShape struct{ B, T, NH, KVH, HD, C, V, I int }

// Odd sizes: HD unrelated to C/NH, MQA (KVH=1), MHA (KVH=NH), GQA
// (1<KVH<NH), T=1, T not a multiple of the attention row block and T on
// both sides of gemmMinT.
var decShapes = []decShape{
	{1, 1, 1, 1, 2, 3, 4, 5},
	{2, 5, 4, 1, 6, 10, 7, 9},
	{1, 7, 3, 3, 4, 5, 11, 13},
	{2, 9, 6, 2, 10, 12, 5, 3},
	{1, 31, 4, 2, 8, 16, 9, 17},
	{1, 40, 3, 1, 12, 7, 3, 33},
	{2, 70, 6, 3, 6, 20, 70, 20},
	{1, 97, 2, 2, 18, 9, 6, 130},
	{1, 50, 9, 3, 64, 24, 5, 8}, // SmolLM2-135M heads
}

func ropeTables(maxPos, HD int) (cos, sin []float32) {
	half := HD / 2
	cos, sin = make([]float32, maxPos*half), make([]float32, maxPos*half)
	for p := 0; p < maxPos; p++ {
		for i := 0; i < half; i++ {
			th := float64(p) * math.Pow(10000, -float64(2*i)/float64(HD))
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(th)), float32(math.Sin(th))
		}
	}
	return
}

// randPos draws n positions in [0, maxPos).
func randPos(r *rand.Rand, n, maxPos int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(r.IntN(maxPos))
	}
	return p
}

type decCase struct {
	name string
	run  func(e env, r *rand.Rand, s decShape) [][]float32
}

var decCases = []decCase{
	{"Embed", func(e env, r *rand.Rand, s decShape) [][]float32 {
		N, C, V := s.B*s.T, s.C, s.V
		inp := e.ints(randTok(r, N, V))
		out, dwte := e.buf(make([]float32, N*C)), e.buf(randf(r, V*C, 1))
		e.be.EmbedForward(out, inp, e.buf(randf(r, V*C, 1)), N, C, V)
		e.be.EmbedBackward(dwte, e.buf(randf(r, N*C, 1)), inp, N, C, V)
		// a lazily zeroed gradient on the fast backend
		dz := e.buf(randf(r, V*C, 1))
		e.be.Zero(dz)
		e.be.EmbedBackward(dz, e.buf(randf(r, N*C, 1)), inp, N, C, V)
		return [][]float32{data(out), data(dwte), data(dz)}
	}},
	{"RMSNorm", func(e env, r *rand.Rand, s decShape) [][]float32 {
		N, C := s.B*s.T*s.NH, s.HD // Qwen3's per-head norm shape
		inp, w := randf(r, N*C, 2), randf(r, C, 1)
		out, rstd := e.buf(make([]float32, N*C)), e.buf(make([]float32, N))
		din, dw := e.buf(randf(r, N*C, 1)), e.buf(randf(r, C, 1))
		ib, wb, do := e.buf(inp), e.buf(w), e.buf(randf(r, N*C, 1))
		e.be.RMSNormForward(out, rstd, ib, wb, N, C, 1e-6)
		e.be.RMSNormBackward(din, dw, do, ib, wb, rstd, N, C)
		din2 := e.buf(randf(r, N*C, 1))
		e.be.Zero(din2)
		e.be.RMSNormBackward(din2, nil, do, ib, wb, rstd, N, C) // frozen weight
		dw3 := e.buf(randf(r, C, 1))
		e.be.Zero(dw3)
		e.be.RMSNormBackward(din2, dw3, do, ib, wb, rstd, N, C)
		return [][]float32{data(out), data(rstd), data(din), data(dw), data(din2), data(dw3)}
	}},
	{"Rope", func(e env, r *rand.Rand, s decShape) [][]float32 {
		N, H, HD := s.B*s.T, s.NH, s.HD
		maxPos := s.T + 3
		cos, sin := ropeTables(maxPos, HD)
		pos := e.ints(randPos(r, N, maxPos))
		x, dx := e.buf(randf(r, N*H*HD, 1)), e.buf(randf(r, N*H*HD, 1))
		cb, sb := e.buf(cos), e.buf(sin)
		e.be.RopeForward(x, pos, cb, sb, N, H, HD, maxPos)
		e.be.RopeBackward(dx, pos, cb, sb, N, H, HD, maxPos)
		return [][]float32{data(x), data(dx)}
	}},
	{"GQAttention", func(e env, r *rand.Rand, s decShape) [][]float32 {
		B, T, NH, KVH, HD := s.B, s.T, s.NH, s.KVH, s.HD
		nq, nk := B*T*NH*HD, B*T*KVH*HD
		scale := float32(1 / math.Sqrt(float64(HD)))
		q, k, v := e.buf(randf(r, nq, 1)), e.buf(randf(r, nk, 1)), e.buf(randf(r, nk, 1))
		out, att := e.buf(randf(r, nq, 1)), e.buf(randf(r, B*NH*T*T, 1)) // garbage: must be overwritten
		e.be.GQAttentionForward(out, att, q, k, v, B, T, NH, KVH, HD, scale)
		dq, dk, dv := e.buf(randf(r, nq, 1)), e.buf(randf(r, nk, 1)), e.buf(randf(r, nk, 1))
		do := e.buf(randf(r, nq, 1))
		e.be.GQAttentionBackward(dq, dk, dv, do, q, k, v, att, B, T, NH, KVH, HD, scale)
		// lazily zeroed gradients (overwritten, not accumulated, by the fast
		// kernels), one of them a view of a larger buffer
		dq2, dkv := e.buf(randf(r, nq, 1)), e.buf(randf(r, 2*nk+1, 1))
		dk2, _ := e.be.View(dkv, 0, nk)
		dv2, _ := e.be.View(dkv, nk, nk)
		e.be.Zero(dq2)
		e.be.Zero(dk2)
		e.be.GQAttentionBackward(dq2, dk2, dv2, do, q, k, v, att, B, T, NH, KVH, HD, scale)
		return [][]float32{data(out), data(att), data(dq), data(dk), data(dv), data(dq2), data(dkv)}
	}},
	{"GQAttentionDecode", func(e env, r *rand.Rand, s decShape) [][]float32 {
		B, NH, KVH, HD := s.B+1, s.NH, s.KVH, s.HD
		maxT := s.T + 2
		scale := float32(0.37)
		cache := e.buf(randf(r, B*maxT*2*KVH*HD, 1))
		out := e.buf(make([]float32, B*NH*HD))
		pos := e.ints(randPos(r, B, maxT)) // ragged
		e.be.GQAttentionDecode(out, cache, e.buf(randf(r, B*NH*HD, 1)), e.buf(randf(r, B*KVH*HD, 1)), e.buf(randf(r, B*KVH*HD, 1)), pos, B, maxT, NH, KVH, HD, scale)
		return [][]float32{data(out), data(cache)}
	}},
	{"SwiGLU", func(e env, r *rand.Rand, s decShape) [][]float32 {
		N := s.B * s.T * s.I
		gate, up := randf(r, N, 4), randf(r, N, 1)
		if N > 3 {
			gate[0], gate[1], gate[2] = -120, 95, 0 // past the exp's range
		}
		out := e.buf(make([]float32, N))
		gb, ub, do := e.buf(gate), e.buf(up), e.buf(randf(r, N, 1))
		e.be.SwiGLUForward(out, gb, ub, N)
		dg, du := e.buf(randf(r, N, 1)), e.buf(randf(r, N, 1))
		e.be.Zero(du)
		e.be.SwiGLUBackward(dg, du, do, gb, ub, N)
		dg2, du2 := e.buf(randf(r, N, 1)), e.buf(randf(r, N, 1))
		e.be.Zero(dg2)
		e.be.SwiGLUBackward(dg2, du2, do, gb, ub, N)
		return [][]float32{data(out), data(dg), data(du), data(dg2), data(du2)}
	}},
}

func TestDecoderFastMatchesReference(t *testing.T) {
	for _, dc := range decCases {
		for si, s := range decShapes {
			t.Run(fmt.Sprintf("%s/%d", dc.name, si), func(t *testing.T) {
				seed := uint64(si*1000 + len(dc.name))
				fast, ref := env{t, New()}, env{t, NewReference()}
				got := dc.run(fast, rand.New(rand.NewPCG(seed, 2)), s)
				want := dc.run(ref, rand.New(rand.NewPCG(seed, 2)), s)
				if err := fast.be.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := ref.be.Sync(); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					assertClose(t, fmt.Sprintf("out%d", i), got[i], want[i], tolFast)
				}
			})
		}
	}
}

// fdCheckTol is fdCheck with a given step and tolerance, and a gradient
// accumulated onto g0 (the backward's += is part of what is checked).
func fdCheckTol(t *testing.T, name string, r *rand.Rand, x, g0, grad []float32, forward func() []float32, w []float32, eps float32, tol float64) {
	t.Helper()
	g := make([]float32, len(grad))
	for i := range g {
		g[i] = grad[i] - g0[i]
	}
	loss := func() float64 {
		var s float64
		for i, v := range forward() {
			s += float64(w[i]) * float64(v)
		}
		return s
	}
	sc := scaleOf(g)
	idx := r.Perm(len(x))
	if len(idx) > 30 {
		idx = idx[:30]
	}
	for _, i := range idx {
		old := x[i]
		x[i] = old + eps
		lp := loss()
		x[i] = old - eps
		lm := loss()
		x[i] = old
		fd := (lp - lm) / float64((old+eps)-(old-eps))
		if d := math.Abs(fd - float64(g[i])); d > tol*(sc+math.Abs(fd)) {
			t.Fatalf("%s[%d]: finite difference %g, analytic %g (grad scale %g)", name, i, fd, g[i], sc)
		}
	}
	forward() // leave the outputs of the unperturbed inputs
}

// The reference backward ops against central differences of
// L = Σ w·forward. The reference works in float64 and rounds only its
// float32 outputs, so the differences match to ~1e-4; the tolerance is
// 1e-3 of the gradient's scale (TestBackwardFiniteDifferences, of the
// other ops, allows 2e-2).
func TestDecoderBackwardFiniteDifferences(t *testing.T) {
	const eps, tol = 3e-3, 1e-3
	for si, s := range []decShape{{1, 3, 2, 1, 4, 6, 5, 7}, {2, 5, 6, 2, 6, 10, 7, 5}, {1, 9, 3, 3, 2, 3, 4, 3}} {
		be := NewReference()
		e := env{t, be}
		r := rand.New(rand.NewPCG(uint64(si), 11))
		B, T, NH, KVH, HD, C, V := s.B, s.T, s.NH, s.KVH, s.HD, s.C, s.V
		N := B * T
		t.Run(fmt.Sprint(si), func(t *testing.T) {
			{ // embedding
				inp := e.ints(randTok(r, N, V))
				wte, out := e.buf(randf(r, V*C, 1)), e.buf(make([]float32, N*C))
				w, g0 := randf(r, N*C, 1), randf(r, V*C, 1)
				dwte := e.buf(clone(g0))
				be.EmbedBackward(dwte, e.buf(w), inp, N, C, V)
				fwd := func() []float32 { be.EmbedForward(out, inp, wte, N, C, V); return data(out) }
				fdCheckTol(t, "embed.wte", r, data(wte), g0, data(dwte), fwd, w, eps, tol)
			}
			{ // RMSNorm
				inp, wt := e.buf(randf(r, N*C, 1)), e.buf(randf(r, C, 1))
				out, rstd := e.buf(make([]float32, N*C)), e.buf(make([]float32, N))
				w := randf(r, N*C, 1)
				fwd := func() []float32 { be.RMSNormForward(out, rstd, inp, wt, N, C, 1e-5); return data(out) }
				fwd()
				g0, gw0 := randf(r, N*C, 1), randf(r, C, 1)
				din, dw := e.buf(clone(g0)), e.buf(clone(gw0))
				be.RMSNormBackward(din, dw, e.buf(w), inp, wt, rstd, N, C)
				fdCheckTol(t, "rmsnorm.inp", r, data(inp), g0, data(din), fwd, w, eps, tol)
				fdCheckTol(t, "rmsnorm.weight", r, data(wt), gw0, data(dw), fwd, w, eps, tol)
			}
			{ // RoPE: the backward replaces dx by the gradient w.r.t. x
				maxPos := T + 5
				cos, sin := ropeTables(maxPos, HD)
				pos := e.ints(randPos(r, N, maxPos))
				cb, sb := e.buf(cos), e.buf(sin)
				x := randf(r, N*NH*HD, 1)
				xb := e.buf(clone(x))
				out := e.buf(make([]float32, len(x)))
				w := randf(r, len(x), 1)
				dx := e.buf(clone(w))
				be.RopeBackward(dx, pos, cb, sb, N, NH, HD, maxPos)
				fwd := func() []float32 {
					be.Copy(out, xb, len(x))
					be.RopeForward(out, pos, cb, sb, N, NH, HD, maxPos)
					return data(out)
				}
				fdCheckTol(t, "rope.x", r, data(xb), make([]float32, len(x)), data(dx), fwd, w, eps, tol)
			}
			{ // attention
				nq, nk := N*NH*HD, N*KVH*HD
				scale := float32(0.6)
				q, k, v := e.buf(randf(r, nq, 1)), e.buf(randf(r, nk, 1)), e.buf(randf(r, nk, 1))
				out, att := e.buf(make([]float32, nq)), e.buf(make([]float32, B*NH*T*T))
				w := randf(r, nq, 1)
				fwd := func() []float32 {
					be.GQAttentionForward(out, att, q, k, v, B, T, NH, KVH, HD, scale)
					return data(out)
				}
				fwd()
				gq, gk, gv := randf(r, nq, 1), randf(r, nk, 1), randf(r, nk, 1)
				dq, dk, dv := e.buf(clone(gq)), e.buf(clone(gk)), e.buf(clone(gv))
				be.GQAttentionBackward(dq, dk, dv, e.buf(w), q, k, v, att, B, T, NH, KVH, HD, scale)
				fdCheckTol(t, "attention.q", r, data(q), gq, data(dq), fwd, w, eps, tol)
				fdCheckTol(t, "attention.k", r, data(k), gk, data(dk), fwd, w, eps, tol)
				fdCheckTol(t, "attention.v", r, data(v), gv, data(dv), fwd, w, eps, tol)
			}
			{ // SwiGLU
				n := N * s.I
				gate, up := e.buf(randf(r, n, 2)), e.buf(randf(r, n, 1))
				out := e.buf(make([]float32, n))
				w := randf(r, n, 1)
				fwd := func() []float32 { be.SwiGLUForward(out, gate, up, n); return data(out) }
				g0, u0 := randf(r, n, 1), randf(r, n, 1)
				dg, du := e.buf(clone(g0)), e.buf(clone(u0))
				be.SwiGLUBackward(dg, du, e.buf(w), gate, up, n)
				fdCheckTol(t, "swiglu.gate", r, data(gate), g0, data(dg), fwd, w, eps, tol)
				fdCheckTol(t, "swiglu.up", r, data(up), u0, data(du), fwd, w, eps, tol)
			}
			if err := be.Sync(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// RoPE forward then backward is the identity (rotations are orthogonal),
// and the rotation is the one of HF's rotate_half, checked on one element.
func TestRopeInverseAndConvention(t *testing.T) {
	for _, be := range []*Backend{New(), NewReference()} {
		e := env{t, be}
		r := rand.New(rand.NewPCG(5, 5))
		const N, H, HD, maxPos = 7, 3, 8, 20
		cos, sin := ropeTables(maxPos, HD)
		pos := randPos(r, N, maxPos)
		x := randf(r, N*H*HD, 1)
		xb, pb, cb, sb := e.buf(clone(x)), e.ints(pos), e.buf(cos), e.buf(sin)
		be.RopeForward(xb, pb, cb, sb, N, H, HD, maxPos)
		// row 2, head 1, i = 1: x'[1] = x[1]c - x[5]s, x'[5] = x[5]c + x[1]s
		p, base := int(pos[2]), (2*H+1)*HD
		c, s := cos[p*HD/2+1], sin[p*HD/2+1]
		if got, want := data(xb)[base+1], x[base+1]*c-x[base+5]*s; math.Abs(float64(got-want)) > 1e-6 {
			t.Errorf("%s: x'[1] = %g, want %g", be.Name(), got, want)
		}
		if got, want := data(xb)[base+5], x[base+5]*c+x[base+1]*s; math.Abs(float64(got-want)) > 1e-6 {
			t.Errorf("%s: x'[5] = %g, want %g", be.Name(), got, want)
		}
		be.RopeBackward(xb, pb, cb, sb, N, H, HD, maxPos)
		assertClose(t, be.Name()+" rope inverse", data(xb), x, 1e-6)
		if err := be.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// Decoding rows of different lengths one token at a time must give, at
// every position, the last row of full causal attention up to there. Row
// b starts lag[b] steps late and repeats position 0 until then (rewriting
// the same k, v), so one call mixes positions; the cache starts as garbage,
// which no position past a row's own may reach.
func TestGQADecodeMatchesFullAttention(t *testing.T) {
	for _, s := range []decShape{{3, 11, 6, 2, 10, 0, 0, 0}, {2, 40, 4, 1, 64, 0, 0, 0}, {2, 6, 3, 3, 4, 0, 0, 0}} {
		for _, be := range []*Backend{New(), NewReference()} {
			e := env{t, be}
			r := rand.New(rand.NewPCG(3, 3))
			B, T, NH, KVH, HD := s.B, s.T, s.NH, s.KVH, s.HD
			nq, nk := NH*HD, KVH*HD
			scale := float32(1 / math.Sqrt(float64(HD)))
			q, k, v := randf(r, B*T*nq, 1), randf(r, B*T*nk, 1), randf(r, B*T*nk, 1)
			full, att := e.buf(make([]float32, B*T*nq)), e.buf(make([]float32, B*NH*T*T))
			be.GQAttentionForward(full, att, e.buf(q), e.buf(k), e.buf(v), B, T, NH, KVH, HD, scale)
			maxT := T + 1
			cache := e.buf(randf(r, B*maxT*2*nk, 5))
			sq, sk, sv := e.buf(make([]float32, B*nq)), e.buf(make([]float32, B*nk)), e.buf(make([]float32, B*nk))
			out, pos := e.buf(make([]float32, B*nq)), e.ints(make([]int32, B))
			lag := []int{0, 3, 1}
			for step := 0; step < T+3; step++ {
				for b := 0; b < B; b++ {
					p := min(max(step-lag[b], 0), T-1)
					pos.(*IntBuf).Data()[b] = int32(p)
					copy(data(sq)[b*nq:][:nq], q[(b*T+p)*nq:][:nq])
					copy(data(sk)[b*nk:][:nk], k[(b*T+p)*nk:][:nk])
					copy(data(sv)[b*nk:][:nk], v[(b*T+p)*nk:][:nk])
				}
				be.GQAttentionDecode(out, cache, sq, sk, sv, pos, B, maxT, NH, KVH, HD, scale)
				for b := 0; b < B; b++ {
					p := int(pos.(*IntBuf).Data()[b])
					assertClose(t, fmt.Sprintf("%s %v step %d b %d pos %d", be.Name(), s, step, b, p), data(out)[b*nq:][:nq], data(full)[(b*T+p)*nq:][:nq], tolFast)
				}
			}
			if err := be.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Bad arguments set a sticky error naming the op; nothing panics.
func TestDecoderErrors(t *testing.T) {
	type call struct {
		name string
		want error
		fn   func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer)
	}
	calls := []call{
		{"embed short out", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.EmbedForward(buf(5), ints(0, 1), buf(12), 2, 3, 4)
		}},
		{"embed zero C", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.EmbedForward(buf(6), ints(0, 1), buf(12), 2, 0, 4)
		}},
		{"embed bad token", compute.ErrToken, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.EmbedBackward(buf(12), buf(6), ints(0, 4), 2, 3, 4)
		}},
		{"embed nil dwte", compute.ErrBuffer, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.EmbedBackward(nil, buf(6), ints(0, 1), 2, 3, 4)
		}},
		{"rmsnorm short weight", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RMSNormForward(buf(8), buf(2), buf(8), buf(3), 2, 4, 1e-6)
		}},
		{"rmsnorm negative eps", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RMSNormForward(buf(8), buf(2), buf(8), buf(4), 2, 4, -1)
		}},
		{"rmsnorm NaN eps", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RMSNormForward(buf(8), buf(2), buf(8), buf(4), 2, 4, float32(math.NaN()))
		}},
		{"rmsnorm nil dinp", compute.ErrBuffer, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RMSNormBackward(nil, buf(4), buf(8), buf(8), buf(4), buf(2), 2, 4)
		}},
		{"rmsnorm short rstd", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RMSNormBackward(buf(8), nil, buf(8), buf(8), buf(4), buf(1), 2, 4)
		}},
		{"rope odd HD", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RopeForward(buf(30), ints(0, 1), buf(10), buf(10), 2, 3, 5, 4)
		}},
		{"rope position past table", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RopeForward(buf(24), ints(0, 4), buf(8), buf(8), 2, 3, 4, 4)
		}},
		{"rope negative position", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RopeBackward(buf(24), ints(-1, 0), buf(8), buf(8), 2, 3, 4, 4)
		}},
		{"rope short table", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RopeForward(buf(24), ints(0, 1), buf(7), buf(8), 2, 3, 4, 4)
		}},
		{"rope short pos", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.RopeForward(buf(24), ints(0), buf(8), buf(8), 2, 3, 4, 4)
		}},
		{"attention NH not a multiple of KVH", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			x := buf(1000)
			be.GQAttentionForward(x, x, x, x, x, 1, 2, 3, 2, 4, 0.5)
		}},
		{"attention KVH zero", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			x := buf(1000)
			be.GQAttentionForward(x, x, x, x, x, 1, 2, 3, 0, 4, 0.5)
		}},
		{"attention short att", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.GQAttentionForward(buf(24), buf(17), buf(24), buf(8), buf(8), 1, 3, 2, 1, 4, 0.5)
		}},
		{"attention T*T overflow", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			x := buf(10)
			be.GQAttentionForward(x, x, x, x, x, 1, 1<<30, 1, 1, 2, 0.5)
		}},
		{"attention infinite scale", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			x := buf(1000)
			be.GQAttentionForward(x, x, x, x, x, 1, 2, 2, 1, 4, float32(math.Inf(1)))
		}},
		{"attention backward short dk", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			x := buf(1000)
			be.GQAttentionBackward(x, buf(7), x, x, x, x, x, x, 1, 2, 2, 1, 4, 0.5)
		}},
		{"attention backward nil dv", compute.ErrBuffer, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			x := buf(1000)
			be.GQAttentionBackward(x, x, nil, x, x, x, x, x, 1, 2, 2, 1, 4, 0.5)
		}},
		{"decode position past cache", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			x := buf(1000)
			be.GQAttentionDecode(x, x, x, x, x, ints(0, 5), 2, 5, 2, 1, 4, 0.5)
		}},
		{"decode short cache", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			x := buf(1000)
			be.GQAttentionDecode(x, buf(2*5*2*4-1), x, x, x, ints(0, 1), 2, 5, 2, 1, 4, 0.5)
		}},
		{"swiglu short up", compute.ErrShape, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.SwiGLUForward(buf(8), buf(8), buf(7), 8)
		}},
		{"swiglu nil dgate", compute.ErrBuffer, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			be.SwiGLUBackward(nil, buf(8), buf(8), buf(8), buf(8), 8)
		}},
		{"swiglu foreign buffer", compute.ErrBuffer, func(be *Backend, buf func(int) compute.Buffer, ints func(...int32) compute.IntBuffer) {
			other, _ := New().Alloc(8)
			be.SwiGLUForward(buf(8), other, buf(8), 8)
		}},
	}
	for _, mk := range []func() *Backend{New, NewReference} {
		for _, c := range calls {
			be := mk()
			buf := func(n int) compute.Buffer {
				x, err := be.Alloc(n)
				if err != nil {
					t.Fatal(err)
				}
				return x
			}
			ints := func(xs ...int32) compute.IntBuffer {
				x, err := be.AllocInt(len(xs))
				if err != nil {
					t.Fatal(err)
				}
				be.UploadInt(x, xs)
				return x
			}
			c.fn(be, buf, ints)
			if err := be.Sync(); !errors.Is(err, c.want) {
				t.Errorf("%s %s: got %v, want %v", be.Name(), c.name, err, c.want)
			}
		}
	}
}

// The vector dots and wsum (attn_amd64.s) against the Go loops, for head
// sizes around the 8- and 32-wide blocks and strided rows.
func TestDotsWsum(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, hd := range []int{1, 2, 7, 8, 9, 16, 24, 31, 32, 40, 64, 65, 128, 130} {
		for _, n := range []int{1, 2, 5, 33} {
			ld := hd + r.IntN(3)*8 + 3
			q, k := randf(r, hd, 1), randf(r, (n-1)*ld+hd, 1)
			got, want := make([]float32, n), make([]float32, n)
			dots(got, q, k, ld)
			for s := range want {
				var acc float64
				for i := range q {
					acc += float64(q[i]) * float64(k[s*ld+i])
				}
				want[s] = float32(acc)
			}
			assertClose(t, fmt.Sprintf("dots hd=%d n=%d", hd, n), got, want, 1e-5)
			w := randf(r, n, 1)
			out := randf(r, hd, 1) // overwritten
			wsum(out, k, ld, w)
			ref := make([]float32, hd)
			for i := range ref {
				var acc float64
				for s := range w {
					acc += float64(w[s]) * float64(k[s*ld+i])
				}
				ref[i] = float32(acc)
			}
			assertClose(t, fmt.Sprintf("wsum hd=%d n=%d", hd, n), out, ref, 1e-5)
		}
	}
}

// A training or decoding step runs these ops hundreds of times: in steady
// state the fast kernels allocate nothing.
func TestDecoderOpsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	be := New()
	e := env{t, be}
	r := rand.New(rand.NewPCG(6, 6))
	const B, T, NH, KVH, HD, C, I = 2, 40, 6, 2, 16, 24, 40
	N, nq, nk := B*T, B*T*NH*HD, B*T*KVH*HD
	x, out, rstd, w := e.buf(randf(r, N*C, 1)), e.buf(make([]float32, N*C)), e.buf(make([]float32, N)), e.buf(randf(r, C, 1))
	din, dw := e.buf(make([]float32, N*C)), e.buf(make([]float32, C))
	q, k, v, att, o := e.buf(randf(r, nq, 1)), e.buf(randf(r, nk, 1)), e.buf(randf(r, nk, 1)), e.buf(make([]float32, B*NH*T*T)), e.buf(make([]float32, nq))
	dq, dk, dv := e.buf(make([]float32, nq)), e.buf(make([]float32, nk)), e.buf(make([]float32, nk))
	cos, sin := ropeTables(T, HD)
	cb, sb := e.buf(cos), e.buf(sin)
	pos := make([]int32, N)
	for i := range pos {
		pos[i] = int32(i % T)
	}
	pb, dpb := e.ints(pos), e.ints([]int32{3, T - 1})
	g, u, h := e.buf(randf(r, N*I, 1)), e.buf(randf(r, N*I, 1)), e.buf(make([]float32, N*I))
	cache := e.buf(make([]float32, B*T*2*KVH*HD))
	tok, wte := e.ints(randTok(r, N, 7)), e.buf(randf(r, 7*C, 1))
	step := func() {
		be.EmbedForward(out, tok, wte, N, C, 7)
		be.EmbedBackward(wte, out, tok, N, C, 7)
		be.RMSNormForward(out, rstd, x, w, N, C, 1e-6)
		be.RMSNormBackward(din, dw, out, x, w, rstd, N, C)
		be.RopeForward(q, pb, cb, sb, N, NH, HD, T)
		be.RopeBackward(dq, pb, cb, sb, N, NH, HD, T)
		be.GQAttentionForward(o, att, q, k, v, B, T, NH, KVH, HD, 0.25)
		be.Zero(dk)
		be.GQAttentionBackward(dq, dk, dv, o, q, k, v, att, B, T, NH, KVH, HD, 0.25)
		be.GQAttentionDecode(o, cache, q, k, v, dpb, B, T, NH, KVH, HD, 0.25)
		be.SwiGLUForward(h, g, u, N*I)
		be.SwiGLUBackward(g, u, h, g, u, N*I)
	}
	step()
	if n := testing.AllocsPerRun(20, step); n != 0 {
		t.Errorf("%v allocations per step", n)
	}
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
}
