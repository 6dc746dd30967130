//go:build cudaemu || cudagpu

package cuda

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"troupe/gpu/compute"
)

// The decoder-family ops (compute.DecoderBackend) against gpu/compute/cpu's reference
// kernels, in ops_test.go's style: same inputs on both backends, gradients
// accumulated into random buffers to check +=.

// positions uploads the same int32 values to both backends.
func (p *pair) positions(x []int32) ibuf {
	p.t.Helper()
	eb, err := p.e.AllocInt(len(x))
	if err != nil {
		p.t.Fatal(err)
	}
	rb, err := p.r.AllocInt(len(x))
	if err != nil {
		p.t.Fatal(err)
	}
	p.e.UploadInt(eb, x)
	p.r.UploadInt(rb, x)
	return ibuf{eb, rb}
}

func TestOpEmbed(t *testing.T) {
	p := newPair(t, 21)
	N, C, V := 13, 37, 5 // N > V: repeated ids exercise the atomic scatter
	inp := p.tokens(N, V)
	wte := p.rand(V*C, 1)
	out := p.rand(N*C, 1)
	p.e.EmbedForward(out.e, inp.e, wte.e, N, C, V)
	p.r.EmbedForward(out.r, inp.r, wte.r, N, C, V)
	p.check("embed_forward", out, 0)
	dout, dwte := p.rand(N*C, 1), p.rand(V*C, 1)
	p.e.EmbedBackward(dwte.e, dout.e, inp.e, N, C, V)
	p.r.EmbedBackward(dwte.r, dout.r, inp.r, N, C, V)
	p.check("embed_backward", dwte, tol)
}

func TestOpRMSNorm(t *testing.T) {
	for _, sh := range []struct{ N, C int }{
		{9, 77}, // C not a multiple of the block
		{12, 6}, // Qwen3's per-head q/k norm: rows*heads rows of HD
		{1, 200},
	} {
		t.Run(fmt.Sprintf("N%d_C%d", sh.N, sh.C), func(t *testing.T) {
			p := newPair(t, uint64(22+sh.C))
			N, C := sh.N, sh.C
			inp, w := p.rand(N*C, 2), p.rand(C, 1)
			out, rstd := p.rand(N*C, 1), p.rand(N, 1)
			const eps = 1e-6
			p.e.RMSNormForward(out.e, rstd.e, inp.e, w.e, N, C, eps)
			p.r.RMSNormForward(out.r, rstd.r, inp.r, w.r, N, C, eps)
			p.check("rmsnorm_forward.out", out, tol)
			p.check("rmsnorm_forward.rstd", rstd, tol)
			dout := p.rand(N*C, 1)
			dinp, dw := p.rand(N*C, 1), p.rand(C, 1)
			p.e.RMSNormBackward(dinp.e, dw.e, dout.e, inp.e, w.e, rstd.e, N, C)
			p.r.RMSNormBackward(dinp.r, dw.r, dout.r, inp.r, w.r, rstd.r, N, C)
			p.check("rmsnorm_backward.dinp", dinp, tol)
			p.check("rmsnorm_backward.dweight", dw, tol)
			// A frozen norm: no dweight, dinp still accumulates.
			p.e.RMSNormBackward(dinp.e, nil, dout.e, inp.e, w.e, rstd.e, N, C)
			p.r.RMSNormBackward(dinp.r, nil, dout.r, inp.r, w.r, rstd.r, N, C)
			p.check("rmsnorm_backward.dinp(no dweight)", dinp, tol)
		})
	}
}

// ropeTables returns HF-style cos/sin tables (maxPos, HD/2) for theta.
func ropeTables(maxPos, HD int, theta float64) (cos, sin []float32) {
	half := HD / 2
	cos, sin = make([]float32, maxPos*half), make([]float32, maxPos*half)
	for p := range maxPos {
		for i := range half {
			f := float64(p) / math.Pow(theta, float64(2*i)/float64(HD))
			cos[p*half+i], sin[p*half+i] = float32(math.Cos(f)), float32(math.Sin(f))
		}
	}
	return cos, sin
}

func TestOpRope(t *testing.T) {
	p := newPair(t, 23)
	N, H, HD, maxPos := 7, 3, 10, 17
	ct, st := ropeTables(maxPos, HD, 100)
	cos, sin := p.up(ct), p.up(st)
	// Ragged rows: positions restart per sequence and reach maxPos-1.
	pos := p.positions([]int32{0, 1, 2, 16, 0, 5, 9})
	x := p.rand(N*H*HD, 1)
	p.e.RopeForward(x.e, pos.e, cos.e, sin.e, N, H, HD, maxPos)
	p.r.RopeForward(x.r, pos.r, cos.r, sin.r, N, H, HD, maxPos)
	p.check("rope_forward", x, tol)
	dx := p.rand(N*H*HD, 1)
	p.e.RopeBackward(dx.e, pos.e, cos.e, sin.e, N, H, HD, maxPos)
	p.r.RopeBackward(dx.r, pos.r, cos.r, sin.r, N, H, HD, maxPos)
	p.check("rope_backward", dx, tol)
	// More pairs than the emulator's grid-stride launch covers at once.
	N2, H2, HD2 := 9, 4, 64
	ct2, st2 := ropeTables(maxPos, HD2, 10000)
	cos2, sin2 := p.up(ct2), p.up(st2)
	pos2 := p.positions([]int32{3, 16, 0, 1, 7, 8, 2, 11, 15})
	x2 := p.rand(N2*H2*HD2, 1)
	p.e.RopeForward(x2.e, pos2.e, cos2.e, sin2.e, N2, H2, HD2, maxPos)
	p.r.RopeForward(x2.r, pos2.r, cos2.r, sin2.r, N2, H2, HD2, maxPos)
	p.check("rope_forward", x2, tol)
}

// gqaCase is one attention shape: NH query heads over KVH key/value heads of
// size HD (independent of any model width).
type gqaCase struct {
	name              string
	B, T, NH, KVH, HD int
}

var gqaCases = []gqaCase{
	{"gqa", 2, 7, 6, 2, 10},   // 3 query heads per kv head; T not a multiple of 4 rows
	{"mqa", 1, 5, 3, 1, 8},    // one kv head for all
	{"mha", 1, 6, 2, 2, 6},    // KVH == NH
	{"t1", 3, 1, 4, 2, 12},    // a single position
	{"long", 1, 37, 4, 2, 40}, // T > 32: lanes loop over keys; HD > 32: over channels
	{"hd128", 1, 5, 2, 1, 128},
}

func TestOpGQAttention(t *testing.T) {
	for i, c := range gqaCases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, uint64(30+i))
			B, T, NH, KVH, HD := c.B, c.T, c.NH, c.KVH, c.HD
			scale := float32(1 / math.Sqrt(float64(HD)))
			if c.name == "gqa" {
				scale = 0.37 // not tied to HD
			}
			q, k, v := p.rand(B*T*NH*HD, 1), p.rand(B*T*KVH*HD, 1), p.rand(B*T*KVH*HD, 1)
			out, att := p.rand(B*T*NH*HD, 1), p.rand(B*NH*T*T, 1)
			p.e.GQAttentionForward(out.e, att.e, q.e, k.e, v.e, B, T, NH, KVH, HD, scale)
			p.r.GQAttentionForward(out.r, att.r, q.r, k.r, v.r, B, T, NH, KVH, HD, scale)
			p.check("gqa_forward.out", out, tol)
			// att holds backend-private state (the CPU's probabilities, the
			// flash kernels' log-sum-exp: checked in flash_test.go).
			dout := p.rand(B*T*NH*HD, 1)
			dq, dk, dv := p.rand(B*T*NH*HD, 1), p.rand(B*T*KVH*HD, 1), p.rand(B*T*KVH*HD, 1)
			p.e.GQAttentionBackward(dq.e, dk.e, dv.e, dout.e, q.e, k.e, v.e, att.e, B, T, NH, KVH, HD, scale)
			p.r.GQAttentionBackward(dq.r, dk.r, dv.r, dout.r, q.r, k.r, v.r, att.r, B, T, NH, KVH, HD, scale)
			p.check("gqa_backward.dq", dq, tol)
			p.check("gqa_backward.dk", dk, tol)
			p.check("gqa_backward.dv", dv, tol)
		})
	}
}

func TestOpGQAttentionDecode(t *testing.T) {
	for i, c := range []struct {
		name                 string
		B, maxT, NH, KVH, HD int
		steps                [][]int32 // pos per batch row, one slice per step
	}{
		{"gqa", 3, 40, 4, 2, 6, [][]int32{{0, 5, 33}, {1, 6, 34}, {2, 39, 0}}},
		{"mqa", 2, 9, 3, 1, 40, [][]int32{{0, 8}, {1, 3}}},
		{"hd128", 1, 6, 2, 2, 128, [][]int32{{4}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, uint64(40+i))
			B, maxT, NH, KVH, HD := c.B, c.maxT, c.NH, c.KVH, c.HD
			scale := float32(1 / math.Sqrt(float64(HD)))
			cache := p.rand(B*maxT*2*KVH*HD, 1)
			out := p.rand(B*NH*HD, 1)
			for _, ps := range c.steps {
				pos := p.positions(ps)
				q, k, v := p.rand(B*NH*HD, 1), p.rand(B*KVH*HD, 1), p.rand(B*KVH*HD, 1)
				p.e.GQAttentionDecode(out.e, cache.e, q.e, k.e, v.e, pos.e, B, maxT, NH, KVH, HD, scale)
				p.r.GQAttentionDecode(out.r, cache.r, q.r, k.r, v.r, pos.r, B, maxT, NH, KVH, HD, scale)
				p.check("gqa_decode.out", out, tol)
				p.check("gqa_decode.cache", cache, 0)
			}
		})
	}
}

func TestOpSwiGLU(t *testing.T) {
	p := newPair(t, 24)
	N := 1000 // > grid*block on the emulator: exercises the grid-stride loop
	gv := p.randn(N, 3)
	gv[0], gv[1], gv[2] = 40, -40, -100 // saturated sigmoid
	gate, up := p.up(gv), p.rand(N, 1)
	out := p.rand(N, 1)
	p.e.SwiGLUForward(out.e, gate.e, up.e, N)
	p.r.SwiGLUForward(out.r, gate.r, up.r, N)
	p.check("swiglu_forward", out, tol)
	dout, dgate, dup := p.rand(N, 1), p.rand(N, 1), p.rand(N, 1)
	p.e.SwiGLUBackward(dgate.e, dup.e, dout.e, gate.e, up.e, N)
	p.r.SwiGLUBackward(dgate.r, dup.r, dout.r, gate.r, up.r, N)
	p.check("swiglu_backward.dgate", dgate, tol)
	p.check("swiglu_backward.dup", dup, tol)
}

// TestOpDecoderErrors checks bad arguments give the errors gpu/compute/cpu gives:
// ErrToken for ids, ErrShape for sizes and positions, ErrBuffer for a
// missing buffer; sticky, never a panic or an out-of-range access.
func TestOpDecoderErrors(t *testing.T) {
	type env struct {
		e                 *Backend
		x, y, z, w, big   compute.Buffer
		pos               compute.IntBuffer
		cos, sin          compute.Buffer
		B, T, NH, KVH, HD int
	}
	setup := func(t *testing.T, pos []int32) *env {
		e := newTestBackend(t)
		v := &env{e: e, B: 2, T: 3, NH: 4, KVH: 2, HD: 4}
		alloc := func(n int) compute.Buffer {
			b, err := e.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		v.x, v.y, v.z, v.w, v.big = alloc(64), alloc(64), alloc(64), alloc(64), alloc(4096)
		v.cos, v.sin = alloc(8*2), alloc(8*2) // maxPos 8, HD 4
		var err error
		if v.pos, err = e.AllocInt(len(pos)); err != nil {
			t.Fatal(err)
		}
		e.UploadInt(v.pos, pos)
		return v
	}
	cases := []struct {
		name string
		pos  []int32
		run  func(v *env)
		want error
	}{
		{"embed token", []int32{0, 5, 1}, func(v *env) { v.e.EmbedForward(v.x, v.pos, v.y, 3, 4, 5) }, compute.ErrToken},
		{"embed negative token", []int32{0, -1, 1}, func(v *env) { v.e.EmbedBackward(v.y, v.x, v.pos, 3, 4, 5) }, compute.ErrToken},
		{"rope position", []int32{0, 8}, func(v *env) { v.e.RopeForward(v.x, v.pos, v.cos, v.sin, 2, 2, 4, 8) }, compute.ErrShape},
		{"rope negative position", []int32{-3, 1}, func(v *env) { v.e.RopeBackward(v.x, v.pos, v.cos, v.sin, 2, 2, 4, 8) }, compute.ErrShape},
		{"rope odd HD", []int32{0, 1}, func(v *env) { v.e.RopeForward(v.x, v.pos, v.cos, v.sin, 2, 2, 3, 8) }, compute.ErrShape},
		{"rope short table", []int32{0, 1}, func(v *env) { v.e.RopeForward(v.x, v.pos, v.cos, v.sin, 2, 2, 4, 9) }, compute.ErrShape},
		{"decode position", []int32{2, 6}, func(v *env) {
			v.e.GQAttentionDecode(v.x, v.big, v.y, v.z, v.w, v.pos, 2, 6, 4, 2, 4, 0.5)
		}, compute.ErrShape},
		{"decode negative position", []int32{-1, 0}, func(v *env) {
			v.e.GQAttentionDecode(v.x, v.big, v.y, v.z, v.w, v.pos, 2, 6, 4, 2, 4, 0.5)
		}, compute.ErrShape},
		{"decode short pos", []int32{0}, func(v *env) {
			v.e.GQAttentionDecode(v.x, v.big, v.y, v.z, v.w, v.pos, 2, 6, 4, 2, 4, 0.5)
		}, compute.ErrShape},
		{"heads not divisible", []int32{0}, func(v *env) {
			v.e.GQAttentionForward(v.x, v.big, v.y, v.z, v.w, 1, 2, 3, 2, 4, 0.5)
		}, compute.ErrShape},
		{"head size too large", []int32{0}, func(v *env) {
			big, _ := v.e.Alloc(2 * 130)
			v.e.GQAttentionForward(big, v.big, big, big, big, 1, 1, 2, 1, 130, 0.1)
		}, compute.ErrShape},
		{"NaN scale", []int32{0}, func(v *env) {
			v.e.GQAttentionBackward(v.x, v.y, v.z, v.w, v.x, v.y, v.z, v.big, 1, 2, 2, 1, 4, float32(math.NaN()))
		}, compute.ErrShape},
		{"short att", []int32{0}, func(v *env) {
			v.e.GQAttentionForward(v.x, v.y, v.z, v.w, v.x, 1, 9, 2, 1, 2, 0.5)
		}, compute.ErrShape},
		{"negative eps", []int32{0}, func(v *env) { v.e.RMSNormForward(v.x, v.y, v.z, v.w, 4, 4, -1) }, compute.ErrShape},
		{"NaN eps", []int32{0}, func(v *env) { v.e.RMSNormForward(v.x, v.y, v.z, v.w, 4, 4, float32(math.NaN())) }, compute.ErrShape},
		{"nil dinp", []int32{0}, func(v *env) { v.e.RMSNormBackward(nil, v.x, v.y, v.z, v.w, v.x, 4, 4) }, compute.ErrBuffer},
		{"nil dup", []int32{0}, func(v *env) { v.e.SwiGLUBackward(v.x, nil, v.y, v.z, v.w, 8) }, compute.ErrBuffer},
		{"short swiglu", []int32{0}, func(v *env) { v.e.SwiGLUForward(v.x, v.y, v.z, 65) }, compute.ErrShape},
		{"zero size", []int32{0}, func(v *env) { v.e.SwiGLUForward(v.x, v.y, v.z, 0) }, compute.ErrShape},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := setup(t, c.pos)
			c.run(v)
			err := v.e.Sync()
			if !errors.Is(err, c.want) {
				t.Fatalf("Sync = %v, want %v", err, c.want)
			}
			// Sticky: later ops are skipped and report the same error.
			v.e.SwiGLUForward(v.x, v.y, v.z, 8)
			if err2 := v.e.Sync(); !errors.Is(err2, c.want) {
				t.Fatalf("error not sticky: %v", err2)
			}
		})
	}
	// A frozen RMSNorm (nil dweight) is not an error.
	v := setup(t, []int32{0})
	v.e.RMSNormBackward(v.x, nil, v.y, v.z, v.w, v.x, 4, 4)
	if err := v.e.Sync(); err != nil {
		t.Fatalf("RMSNormBackward with nil dweight: %v", err)
	}
}

// TestOpDecoderBadPositionLeavesDataAlone checks a decode step with one bad
// row does not touch memory outside the cache (the kernel skips the row).
func TestOpDecoderBadPositionLeavesDataAlone(t *testing.T) {
	p := newPair(t, 50)
	B, maxT, NH, KVH, HD := 2, 4, 2, 1, 4
	cacheVals := p.randn(B*maxT*2*KVH*HD, 1)
	cache := p.up(cacheVals)
	q, k, v, out := p.rand(B*NH*HD, 1), p.rand(B*KVH*HD, 1), p.rand(B*KVH*HD, 1), p.zeros(B*NH*HD)
	pos, err := p.e.AllocInt(B)
	if err != nil {
		t.Fatal(err)
	}
	p.e.UploadInt(pos, []int32{int32(maxT), int32(maxT) * 1000})
	p.e.GQAttentionDecode(out.e, cache.e, q.e, k.e, v.e, pos, B, maxT, NH, KVH, HD, 0.5)
	if err := p.e.Sync(); !errors.Is(err, compute.ErrShape) {
		t.Fatalf("Sync = %v, want ErrShape", err)
	}
	// Download refuses after the sticky error: read through the device.
	got := make([]float32, len(cacheVals))
	if err := p.e.dev.DtoH(unsafePointer(&got[0]), cache.e.(*Buffer).ptr, 4*len(got)); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != cacheVals[i] {
			t.Fatalf("cache[%d] changed: %v, was %v", i, got[i], cacheVals[i])
		}
	}
}
