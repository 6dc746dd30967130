package cpu

import (
	"math/rand/v2"
	"testing"
	"troupe/gpu/compute"
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
	view := func(x compute.Buffer, off, n int) compute.Buffer {
		v, err := be.View(x, off, n)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var outs [][]float32
	dl := func(x compute.Buffer) {
		out := make([]float32, x.Len())
		be.Download(out, x)
		outs = append(outs, out)
	}
	// A big buffer of garbage with two overlapping views, as the model's
	// backward scratch.
	big := e.buf(randf(r, max(N*OC, BT3)+5, 3))
	whole := view(big, 0, max(N*OC, BT3))
	front := view(big, 0, N*C)
	inp, w, dout := e.buf(randf(r, N*C, 1)), e.buf(randf(r, OC*C, 1)), e.buf(randf(r, N*OC, 1))
	// gradients as the model keeps them: views of one zeroed allocation
	grads := e.buf(randf(r, OC*C+OC+3, 2))
	dw, db := view(grads, 1, OC*C), view(grads, 1+OC*C, OC)
	be.Zero(grads)

	// matmul input gradient overwriting a zeroed view, with another
	// (overlapping, larger) view zeroed too
	be.Zero(whole)
	be.Zero(front)
	be.MatmulBackward(front, dw, db, dout, inp, w, N, C, OC)
	dl(big)
	// accumulate onto the results without a Zero: must add
	be.MatmulBackward(front, dw, db, dout, inp, w, N, C, OC)
	dl(front)
	dl(grads)

	// SwiGLU backward into zeroed buffers; an input is read after its own
	// Zero (applied, not consumed)
	x, up := e.buf(randf(r, N*OC, 1)), e.buf(randf(r, N*OC, 1))
	g, gu := e.buf(randf(r, N*OC, 5)), e.buf(randf(r, N*OC, 5))
	be.Zero(g)
	be.Zero(gu)
	be.SwiGLUBackward(g, gu, dout, x, up, N*OC)
	dl(g)
	dl(gu)
	be.Zero(x)
	be.SwiGLUBackward(g, gu, dout, x, up, N*OC)
	dl(g)
	dl(gu)

	// attention backward into zeroed dq, dk, dv views of garbage (one head
	// of C channels)
	NC := N * C
	q, k, v := e.buf(randf(r, NC, 1)), e.buf(randf(r, NC, 1)), e.buf(randf(r, NC, 1))
	att := e.buf(make([]float32, s.B*s.T*s.T))
	atty := e.buf(make([]float32, NC))
	be.GQAttentionForward(atty, att, q, k, v, s.B, s.T, 1, 1, C, 0.5)
	dq, dk, dv := view(big, 0, NC), view(big, NC, NC), view(big, 2*NC, NC)
	be.Zero(view(big, 0, BT3))
	be.GQAttentionBackward(dq, dk, dv, e.buf(randf(r, NC, 1)), q, k, v, att, s.B, s.T, 1, 1, C, 0.5)
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

// Random Zeros, overwrite-or-accumulate writes and reads through random
// views of one allocation behave like eager Zeros (a shadow array).
func TestLazyZeroSpans(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	be := New()
	const n = 97
	for round := 0; round < 200; round++ {
		rootB, _ := be.Alloc(n)
		root := rootB.(*Buf)
		shadow := randf(r, n, 1)
		copy(root.d, shadow)
		randView := func() (*Buf, int, int) {
			lo := r.IntN(n)
			hi := lo + 1 + r.IntN(n-lo)
			v, err := be.View(rootB, lo, hi-lo)
			if err != nil {
				t.Fatal(err)
			}
			return v.(*Buf), lo, hi
		}
		for op := 0; op < 20; op++ {
			v, lo, hi := randView()
			switch r.IntN(3) {
			case 0:
				be.Zero(v)
				clear(shadow[lo:hi])
			case 1: // an op writing its output: overwrite if fresh, else add
				need := 1 + r.IntN(hi-lo)
				d, fresh := be.fz("test", "out", v, need)
				for i := range d {
					x := float32(r.IntN(5))
					if fresh {
						d[i] = x
					} else {
						d[i] += x
					}
					shadow[lo+i] += x
				}
			case 2:
				d := be.f("test", "in", v, hi-lo)
				for i := range d {
					if d[i] != shadow[lo+i] {
						t.Fatalf("round %d op %d: element %d is %v, want %v", round, op, lo+i, d[i], shadow[lo+i])
					}
				}
			}
			for _, s := range root.pend { // pending ranges are zero in the shadow
				for i := s.lo; i < s.hi; i++ {
					if shadow[i] != 0 {
						t.Fatalf("round %d op %d: element %d pending but %v", round, op, i, shadow[i])
					}
				}
			}
		}
		got := data(rootB)
		for i := range got {
			if got[i] != shadow[i] {
				t.Fatalf("round %d: Data()[%d] = %v, want %v", round, i, got[i], shadow[i])
			}
		}
	}
}
