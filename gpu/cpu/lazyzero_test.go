package cpu

import (
	"math/rand/v2"
	"testing"

	"troupe/gpu"
)

// The fast backend's Zero is lazy (see Buf): ops that can overwrite their
// output consume it, everything else applies it first. This runs Zero
// followed by each kind of use, on buffers holding garbage and through
// overlapping views, on both backends; the reference clears at once.
func TestLazyZeroMatchesReference(t *testing.T) {
	for _, s := range shapes {
		got := lazyZeroRun(t, New(), s)
		want := lazyZeroRun(t, NewReference(), s)
		for i := range want {
			assertClose(t, "lazy zero output", got[i], want[i], tolFast)
		}
	}
}

func lazyZeroRun(t *testing.T, be *Backend, s shape) [][]float32 {
	e := env{t, be}
	r := rand.New(rand.NewPCG(7, uint64(s.B*1000+s.T)))
	N, C, OC, BT3 := s.B*s.T, s.C, s.V, s.B*s.T*3*s.C
	view := func(x gpu.Buffer, off, n int) gpu.Buffer {
		v, err := be.View(x, off, n)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var outs [][]float32
	dl := func(x gpu.Buffer) {
		out := make([]float32, x.Len())
		be.Download(out, x)
		outs = append(outs, out)
	}
	// A big buffer of garbage with two overlapping views, as the model's
	// backward scratch (dA and its dqkv view).
	big := e.buf(randf(r, max(N*OC, BT3)+5, 3))
	whole := view(big, 0, max(N*OC, BT3))
	front := view(big, 0, N*C)
	inp, w, dout := e.buf(randf(r, N*C, 1)), e.buf(randf(r, OC*C, 1)), e.buf(randf(r, N*OC, 1))
	dw := e.buf(make([]float32, OC*C))

	// matmul input gradient overwriting a zeroed view, with another
	// (overlapping, larger) view zeroed too
	be.Zero(whole)
	be.Zero(front)
	be.MatmulBackward(front, dw, nil, dout, inp, w, N, C, OC)
	dl(big)
	// accumulate onto the result without a Zero: must add
	be.MatmulBackward(front, nil, nil, dout, inp, w, N, C, OC)
	dl(front)

	// GELU backward into a zeroed buffer; the input is read after its own
	// Zero (applied, not consumed)
	x := e.buf(randf(r, N*OC, 1))
	g := e.buf(randf(r, N*OC, 5))
	be.Zero(g)
	be.GeluBackward(g, x, dout, N*OC)
	dl(g)
	be.Zero(x)
	be.GeluBackward(g, x, dout, N*OC)
	dl(g)

	// attention backward into a zeroed dqkv view of garbage
	qkv := e.buf(randf(r, BT3, 1))
	att := e.buf(make([]float32, s.B*s.NH*s.T*s.T))
	atty := e.buf(make([]float32, N*C))
	be.AttentionForward(atty, att, qkv, s.B, s.T, s.C, s.NH)
	dq := view(big, 0, BT3)
	be.Zero(dq)
	be.AttentionBackward(dq, e.buf(randf(r, N*C, 1)), qkv, att, s.B, s.T, s.C, s.NH)
	dl(big)

	// a pending Zero seen through Data and through another view
	be.Zero(front)
	outs = append(outs, append([]float32(nil), data(big)...))
	be.Zero(whole)
	dl(view(big, 1, 4))
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	return outs
}
