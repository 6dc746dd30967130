package cpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu/gemm"
)

// Tolerances. Fast vs reference: the fast kernels accumulate in float32
// (gemm, layernorm, softmax) while the reference uses float64, so results
// agree to ~1e-5 relative; we allow tolFast relative to the output's scale.
// Finite differences: central differences with step fdEps in float32, checked
// to tolFD relative to the gradient's scale.
const (
	tolFast = 2e-4
	fdEps   = 1e-2
	tolFD   = 2e-2
)

type shape struct{ B, T, C, V int }

// Random shapes including odd sizes, 1s and sizes not multiples of the gemm
// tile (6×16).
var shapes = []shape{
	{1, 1, 4, 5},
	{1, 3, 6, 7},
	{2, 5, 12, 13},
	{3, 7, 10, 11},
	{2, 17, 24, 67},
	{1, 33, 18, 3},
	{2, 64, 32, 64},
	{1, 3, 20, 130}, // few rows, many columns: MatmulForwardT's column split
}

func randf(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * scale
	}
	return x
}

func randTok(r *rand.Rand, n, V int) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(r.IntN(V))
	}
	return x
}

// env holds one backend and helpers to move slices in and out.
type env struct {
	t  *testing.T
	be *Backend
}

func (e env) buf(x []float32) compute.Buffer {
	b, err := e.be.Alloc(len(x))
	if err != nil {
		e.t.Fatal(err)
	}
	e.be.Upload(b, x)
	return b
}

func (e env) ints(x []int32) compute.IntBuffer {
	b, err := e.be.AllocInt(len(x))
	if err != nil {
		e.t.Fatal(err)
	}
	e.be.UploadInt(b, x)
	return b
}

func data(b compute.Buffer) []float32 { return b.(*Buf).Data() }

func scaleOf(x []float32) float64 {
	var s float64
	for _, v := range x {
		s = math.Max(s, math.Abs(float64(v)))
	}
	return math.Max(s, 1e-6)
}

func assertClose(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: len %d vs %d", name, len(got), len(want))
	}
	sc := scaleOf(want)
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > tol*sc || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d]: got %g want %g (scale %g, tol %g)", name, i, got[i], want[i], sc, tol)
		}
	}
}

// opCase runs one op on a backend given fresh copies of the inputs, and
// returns the outputs that must match.
type opCase struct {
	name string
	run  func(e env, r *rand.Rand, s shape) [][]float32
}

func clone(x []float32) []float32 { return append([]float32(nil), x...) }

// Each case draws its inputs from the seeded r, so the two backends see the
// same data when run with equal seeds.
var opCases = []opCase{
	{"Matmul", func(e env, r *rand.Rand, s shape) [][]float32 {
		N, C, OC := s.B*s.T, s.C, s.V
		inp, w, bi, dout := randf(r, N*C, 1), randf(r, OC*C, 1), randf(r, OC, 1), randf(r, N*OC, 1)
		out, out2 := e.buf(make([]float32, N*OC)), e.buf(make([]float32, N*OC))
		din, dw, db := e.buf(randf(r, N*C, 1)), e.buf(randf(r, OC*C, 1)), e.buf(randf(r, OC, 1))
		ib, wb := e.buf(inp), e.buf(w)
		e.be.MatmulForward(out, ib, wb, e.buf(bi), N, C, OC)
		e.be.MatmulForward(out2, ib, wb, nil, N, C, OC)
		e.be.MatmulBackward(din, dw, db, e.buf(dout), ib, wb, N, C, OC)
		return [][]float32{data(out), data(out2), data(din), data(dw), data(db)}
	}},
	{"MatmulT", func(e env, r *rand.Rand, s shape) [][]float32 {
		N, C, OC := s.B*s.T, s.C, s.V
		inp, w, bi := e.buf(randf(r, N*C, 1)), e.buf(randf(r, OC*C, 1)), e.buf(randf(r, OC, 1))
		wt := e.buf(make([]float32, C*OC))
		tb := e.be
		tb.Transpose(wt, w, OC, C)
		out, outT, outT2 := e.buf(make([]float32, N*OC)), e.buf(make([]float32, N*OC)), e.buf(make([]float32, N*OC))
		tb.MatmulForward(out, inp, w, bi, N, C, OC)
		tb.MatmulForwardT(outT, inp, wt, bi, N, C, OC)
		tb.MatmulForwardT(outT2, inp, wt, nil, N, C, OC)
		assertClose(e.t, "MatmulForwardT vs MatmulForward", data(outT), data(out), tolFast)
		return [][]float32{data(wt), data(outT), data(outT2)}
	}},
	{"Residual", func(e env, r *rand.Rand, s shape) [][]float32 {
		N := s.B * s.T * s.C
		out := e.buf(make([]float32, N))
		e.be.ResidualForward(out, e.buf(randf(r, N, 1)), e.buf(randf(r, N, 1)), N)
		x := e.buf(randf(r, N, 1))
		e.be.Scale(x, 0.37, N)
		return [][]float32{data(out), data(x)}
	}},
	{"CrossEntropy", func(e env, r *rand.Rand, s shape) [][]float32 {
		N, V := s.B*s.T, s.V
		logits, tg, dl := randf(r, N*V, 3), randTok(r, N, V), randf(r, N, 1)
		losses, probs, dlog := e.buf(make([]float32, N)), e.buf(make([]float32, N*V)), e.buf(randf(r, N*V, 1))
		tb := e.ints(tg)
		e.be.CrossEntropyForward(losses, probs, e.buf(logits), tb, N, V)
		e.be.CrossEntropyBackward(dlog, probs, e.buf(dl), tb, N, V)
		// in place: probs aliasing logits
		lb := e.buf(clone(logits))
		losses2 := e.buf(make([]float32, N))
		e.be.CrossEntropyForward(losses2, lb, lb, tb, N, V)
		return [][]float32{data(losses), data(probs), data(dlog), data(losses2), data(lb)}
	}},
	{"LogProb", func(e env, r *rand.Rand, s shape) [][]float32 {
		N, V := s.B*s.T, s.V
		logits, tg, dl := randf(r, N*V, 3), randTok(r, N, V), randf(r, N, 1)
		logp, probs, dlog := e.buf(make([]float32, N)), e.buf(make([]float32, N*V)), e.buf(randf(r, N*V, 1))
		tb := e.ints(tg)
		e.be.LogProbForward(logp, probs, e.buf(logits), tb, N, V)
		e.be.LogProbBackward(dlog, probs, e.buf(dl), tb, N, V)
		return [][]float32{data(logp), data(probs), data(dlog)}
	}},
	{"AdamW", func(e env, r *rand.Rand, s shape) [][]float32 {
		N := s.B*s.T*s.C + 3
		p, g, m, v := e.buf(randf(r, N, 1)), e.buf(randf(r, N, 1)), e.buf(randf(r, N, 0.1)), e.buf(randf(r, N, 0.1))
		for i, x := range data(v) {
			data(v)[i] = x * x
		}
		for step := 1; step <= 3; step++ {
			e.be.AdamWUpdate(p, g, m, v, N, compute.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: step, GradScale: 0.5})
		}
		ss := e.be.SumSquares(g, N)
		return [][]float32{data(p), data(m), data(v), {float32(ss)}}
	}},
}

func TestFastMatchesReference(t *testing.T) {
	for _, oc := range opCases {
		for si, s := range shapes {
			t.Run(fmt.Sprintf("%s/%d", oc.name, si), func(t *testing.T) {
				seed := uint64(si*1000 + len(oc.name))
				fast, ref := env{t, New()}, env{t, NewReference()}
				got := oc.run(fast, rand.New(rand.NewPCG(seed, 1)), s)
				want := oc.run(ref, rand.New(rand.NewPCG(seed, 1)), s)
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

// TestConfig: a Backend made with NewWithConfig reports its Config, runs
// every op on one thread and under every micro-kernel this CPU has within
// the reference's tolerance, and an invalid Config is refused.
func TestConfig(t *testing.T) {
	if c, want := New().Config(), (Config{Threads: runtime.GOMAXPROCS(0), ISA: gemm.ISAs()[0]}); c != want {
		t.Errorf("New().Config() = %+v, want %+v", c, want)
	}
	for _, c := range []Config{{Threads: -1}, {ISA: "nope"}} {
		if _, err := NewWithConfig(c); !errors.Is(err, gemm.ErrBadArgs) {
			t.Errorf("NewWithConfig(%+v) = %v, want gemm.ErrBadArgs", c, err)
		}
	}
	for _, isa := range gemm.ISAs() {
		c := Config{Threads: 1, ISA: isa}
		be, err := NewWithConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := be.Config(); got != c {
			t.Errorf("NewWithConfig(%+v).Config() = %+v", c, got)
		}
		for _, oc := range opCases {
			for si, s := range shapes[4:] {
				t.Run(fmt.Sprintf("%s/%s/%d", isa, oc.name, si), func(t *testing.T) {
					fast, ref := env{t, be}, env{t, NewReference()}
					got := oc.run(fast, rand.New(rand.NewPCG(uint64(si), 2)), s)
					want := oc.run(ref, rand.New(rand.NewPCG(uint64(si), 2)), s)
					if err := fast.be.Sync(); err != nil {
						t.Fatal(err)
					}
					for i := range got {
						assertClose(t, fmt.Sprintf("out%d", i), got[i], want[i], tolFast)
					}
				})
			}
		}
	}
}

// fdCheck compares an analytic gradient with central finite differences of
// L = sum_i w_i out_i. forward recomputes out from the current contents of x;
// grad is the analytic dL/dx. Up to 24 coordinates of x are checked.
func fdCheck(t *testing.T, name string, r *rand.Rand, x []float32, grad []float32, forward func() []float32, w []float32) {
	t.Helper()
	loss := func() float64 {
		out := forward()
		var s float64
		for i, v := range out {
			s += float64(w[i]) * float64(v)
		}
		return s
	}
	sc := scaleOf(grad)
	idx := r.Perm(len(x))
	if len(idx) > 24 {
		idx = idx[:24]
	}
	for _, i := range idx {
		old := x[i]
		x[i] = old + fdEps
		lp := loss()
		x[i] = old - fdEps
		lm := loss()
		x[i] = old
		// divide by the step actually taken after float32 rounding
		fd := (lp - lm) / float64((old+fdEps)-(old-fdEps))
		if d := math.Abs(fd - float64(grad[i])); d > tolFD*(sc+math.Abs(fd)) {
			t.Fatalf("%s[%d]: finite difference %g, analytic %g (grad scale %g)", name, i, fd, grad[i], sc)
		}
	}
}

func TestBackwardFiniteDifferences(t *testing.T) {
	fdShapes := []shape{{1, 3, 6, 5}, {2, 5, 12, 7}, {2, 9, 8, 11}}
	for _, mk := range []func() *Backend{New, NewReference} {
		for si, s := range fdShapes {
			be := mk()
			e := env{t, be}
			r := rand.New(rand.NewPCG(uint64(si), 7))
			B, T, C, V := s.B, s.T, s.C, s.V
			N := B * T
			t.Run(fmt.Sprintf("%s/%d", be.Name(), si), func(t *testing.T) {
				// Matmul
				{
					OC := V
					inp, wt, bi := e.buf(randf(r, N*C, 1)), e.buf(randf(r, OC*C, 1)), e.buf(randf(r, OC, 1))
					out := e.buf(make([]float32, N*OC))
					w := randf(r, N*OC, 1)
					fwd := func() []float32 { be.MatmulForward(out, inp, wt, bi, N, C, OC); return data(out) }
					din, dw, db := e.buf(make([]float32, N*C)), e.buf(make([]float32, OC*C)), e.buf(make([]float32, OC))
					be.MatmulBackward(din, dw, db, e.buf(w), inp, wt, N, C, OC)
					fdCheck(t, "matmul.inp", r, data(inp), data(din), fwd, w)
					fdCheck(t, "matmul.weight", r, data(wt), data(dw), fwd, w)
					fdCheck(t, "matmul.bias", r, data(bi), data(db), fwd, w)
				}
				// Cross-entropy and log-prob heads (weights play dlosses/dlogp).
				{
					logits, tg := e.buf(randf(r, N*V, 2)), e.ints(randTok(r, N, V))
					losses, probs := e.buf(make([]float32, N)), e.buf(make([]float32, N*V))
					w := randf(r, N, 1)
					ce := func() []float32 { be.CrossEntropyForward(losses, probs, logits, tg, N, V); return data(losses) }
					ce()
					dl := e.buf(make([]float32, N*V))
					be.CrossEntropyBackward(dl, probs, e.buf(w), tg, N, V)
					fdCheck(t, "crossentropy.logits", r, data(logits), data(dl), ce, w)
					lp := func() []float32 { be.LogProbForward(losses, probs, logits, tg, N, V); return data(losses) }
					lp()
					dl2 := e.buf(make([]float32, N*V))
					be.LogProbBackward(dl2, probs, e.buf(w), tg, N, V)
					fdCheck(t, "logprob.logits", r, data(logits), data(dl2), lp, w)
				}
				if err := be.Sync(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestErrors(t *testing.T) {
	be := New()
	small, _ := be.Alloc(3)
	big, _ := be.Alloc(100)
	be.MatmulForward(small, big, big, nil, 2, 2, 2)
	if err := be.Sync(); !errors.Is(err, compute.ErrShape) {
		t.Fatalf("short output: got %v, want ErrShape", err)
	}
	// sticky: a later valid op is skipped and the error stays
	be.Zero(big)
	if err := be.Err(); !errors.Is(err, compute.ErrShape) {
		t.Fatalf("error not sticky: %v", err)
	}

	be = New()
	tok, _ := be.AllocInt(2)
	be.UploadInt(tok, []int32{0, 9})
	out, _ := be.Alloc(100)
	be.EmbedForward(out, tok, big, 2, 4, 5)
	if err := be.Sync(); !errors.Is(err, compute.ErrToken) {
		t.Fatalf("bad token: got %v, want ErrToken", err)
	}

	be = New()
	other := New()
	foreign, _ := other.Alloc(10)
	be.Zero(foreign)
	if err := be.Sync(); !errors.Is(err, compute.ErrBuffer) {
		t.Fatalf("foreign buffer: got %v, want ErrBuffer", err)
	}

	be = New()
	x, _ := be.Alloc(10)
	be.Free(x)
	be.Zero(x)
	if err := be.Sync(); !errors.Is(err, compute.ErrBuffer) {
		t.Fatalf("freed buffer: got %v, want ErrBuffer", err)
	}

	be = New()
	a, _ := be.Alloc(1000)
	be.GQAttentionForward(a, a, a, a, a, 1, 2, 3, 2, 4, 0.5)
	if err := be.Sync(); !errors.Is(err, compute.ErrShape) {
		t.Fatalf("NH not divisible by KVH: got %v", err)
	}
	if _, err := be.View(a, 990, 20); !errors.Is(err, compute.ErrShape) {
		t.Fatalf("view out of range: got %v", err)
	}
	v, err := New().Alloc(-1)
	if err == nil || v != nil {
		t.Fatalf("negative alloc accepted")
	}
}

func TestViewSharesMemory(t *testing.T) {
	be := New()
	x, _ := be.Alloc(10)
	v, err := be.View(x, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	be.Upload(v, []float32{1, 2, 3})
	got := make([]float32, 10)
	be.Download(got, x)
	if got[4] != 1 || got[6] != 3 || got[7] != 0 {
		t.Fatalf("view write not visible in parent: %v", got)
	}
}

func TestExpf(t *testing.T) {
	for x := float32(-87); x < 88; x += 0.0137 {
		want := math.Exp(float64(x))
		if d := math.Abs(float64(expf(x))-want) / want; d > 1e-6 {
			t.Fatalf("expf(%g) = %g, want %g (rel %g)", x, expf(x), want, d)
		}
	}
	if expf(-100) != 0 || !math.IsInf(float64(expf(100)), 1) {
		t.Fatal("expf range ends")
	}
}

func TestExpShift(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 63, 64, 65, 200} {
		x := randf(r, n, 20)
		want := make([]float64, n)
		var wsum float64
		for i, v := range x {
			want[i] = math.Exp(float64(v - 3)) // the kernel subtracts in float32
			wsum += want[i]
		}
		sum := expShift(x, 3)
		for i := range x {
			if d := math.Abs(float64(x[i])-want[i]) / want[i]; d > 1e-6 && want[i] > 1e-37 {
				t.Fatalf("n=%d: exp[%d] = %g, want %g", n, i, x[i], want[i])
			}
		}
		if math.Abs(float64(sum)-wsum) > 1e-5*wsum {
			t.Fatalf("n=%d: sum %g, want %g", n, sum, wsum)
		}
	}
}

// TestMaxScaleVec: the vector max and scale of the softmaxes against their
// references, on lengths around the 8- and 16-lane steps, the maximum at
// every position.
func TestMaxScaleVec(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 10))
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 24, 33, 64, 65, 200, 512} {
		for at := 0; at < n; at += max(1, n/7) {
			x := randf(r, n, 5)
			x[at] = 9
			if got, want := maxVec(x), maxRef(x); got != want {
				t.Fatalf("n=%d max at %d: maxVec %g, maxRef %g", n, at, got, want)
			}
		}
		x := randf(r, n, 5)
		y := append([]float32(nil), x...)
		scaleVec(x, 0.37)
		scaleRef(y, 0.37)
		for i := range x {
			if x[i] != y[i] {
				t.Fatalf("n=%d: scaleVec[%d] = %g, scaleRef %g", n, i, x[i], y[i])
			}
		}
	}
}

// TestSumSquaresVec: the vector sum of squares (the gradient norm) against
// refSumSquares' float64 sum, on lengths around its 32- and 256-element
// steps.
func TestSumSquaresVec(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for _, n := range []int{0, 1, 31, 32, 33, 255, 256, 257, 288, 1000, 4099} {
		x := randf(r, n, 3)
		got, want := sumSquaresVec(x), refSumSquares(x, n)
		if math.Abs(got-want) > 1e-6*want {
			t.Fatalf("n=%d: sumSquaresVec %g, refSumSquares %g", n, got, want)
		}
		if g := sumSquaresGo(x); math.Abs(g-want) > 1e-6*want {
			t.Fatalf("n=%d: sumSquaresGo %g, refSumSquares %g", n, g, want)
		}
	}
}
