package gemm

import (
	"errors"
	"math"
	"math/rand"
	"runtime"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	return x
}

// checkClose compares got against want with a tolerance that grows with k,
// since float32 rounding error of a length-k dot product grows with k.
func checkClose(t *testing.T, name string, got, want []float32, k int) {
	t.Helper()
	tol := 1e-4 * float64(max(k, 1))
	for i := range want {
		d := math.Abs(float64(got[i] - want[i]))
		if d > tol*math.Max(1, math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) != math.IsNaN(float64(want[i])) {
			t.Fatalf("%s: element %d: got %v want %v (tol %g)", name, i, got[i], want[i], tol)
		}
	}
}

type gemmCase struct {
	ta, tb      bool
	m, n, k     int
	alpha, beta float32
	pad         int // extra stride beyond the stored columns
}

func runCase(t *testing.T, e *Engine, r *rand.Rand, tc gemmCase) {
	t.Helper()
	ar, ac := tc.m, tc.k
	if tc.ta {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.tb {
		br, bc = tc.n, tc.k
	}
	lda, ldb, ldc := ac+tc.pad, bc+tc.pad, tc.n+tc.pad
	a := randSlice(r, max(ar*lda, 1))
	b := randSlice(r, max(br*ldb, 1))
	c := randSlice(r, max(tc.m*ldc, 1))
	if tc.beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN()) // beta == 0 must not read C
		}
	}
	want := append([]float32(nil), c...)
	if err := Check(tc.ta, tc.tb, tc.m, tc.n, tc.k, a, lda, b, ldb, c, ldc); err != nil {
		t.Fatalf("%+v: Check: %v", tc, err)
	}
	Reference(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
	e.Sgemm(tc.ta, tc.tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
	// Padding between rows must be untouched (still NaN or the random value).
	for i := range c {
		if tc.m > 0 && i%ldc >= tc.n || i >= tc.m*ldc {
			if math.Float32bits(c[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: padding element %d changed", tc, i)
			}
			c[i], want[i] = 0, 0
		}
	}
	checkClose(t, "Sgemm", c, want, tc.k)
}

var oddSizes = []int{1, 2, 3, 7, 8, 16, 17, 24, 33, 65, 129}

// allISAs are the micro-kernels the package has; a CPU runs a subset.
var allISAs = []string{"avx512", "avx2", "go"}

// engine returns New(c), failing tb when it fails.
func engine(tb testing.TB, c Config) *Engine {
	tb.Helper()
	e, err := New(c)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// withThreads returns a copy of e (its switches too) on threads goroutines.
func (e *Engine) withThreads(threads int) *Engine {
	c := *e
	c.threads = threads
	return &c
}

// withISA runs f with an Engine of the named micro-kernel, or skips with
// the reason when this CPU cannot run it.
func withISA(t *testing.T, isa string, f func(t *testing.T, e *Engine)) {
	t.Helper()
	e, err := New(Config{ISA: isa})
	if err != nil {
		t.Skipf("%s: %v", isa, err)
	}
	f(t, e)
}

// kernels runs f with every micro-kernel this CPU supports (reporting the
// ones it does not), so each ISA path is checked on this machine.
func kernels(t *testing.T, f func(t *testing.T, e *Engine)) {
	for _, isa := range allISAs {
		t.Run(isa, func(t *testing.T) { withISA(t, isa, f) })
	}
	// Few rows with B transposed through the blocked kernel, not Gemv or
	// the dot-product tiles.
	t.Run("no-gemv", func(t *testing.T) {
		e := *Default()
		e.gemvPath, e.dotPath = false, false
		f(t, &e)
	})
	// The in-place (unpacked) operand paths the tuning chose against.
	t.Run("unpacked", func(t *testing.T) {
		e := *Default()
		e.packTransA, e.packNN = false, false
		f(t, &e)
	})
}

func TestSgemmMatchesReference(t *testing.T) { kernels(t, testMatchesReference) }
func TestSgemmLargerShapes(t *testing.T)     { kernels(t, testLargerShapes) }

func testMatchesReference(t *testing.T, e *Engine) {
	r := rand.New(rand.NewSource(1))
	for _, threads := range []int{1, 2} {
		e := e.withThreads(threads)
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for i := 0; i < 40; i++ {
					tc := gemmCase{
						ta: ta, tb: tb,
						m:     oddSizes[r.Intn(len(oddSizes))],
						n:     oddSizes[r.Intn(len(oddSizes))],
						k:     oddSizes[r.Intn(len(oddSizes))],
						alpha: []float32{1, -0.5, 2, 0}[r.Intn(4)],
						beta:  []float32{0, 1, 0.25, -1}[r.Intn(4)],
						pad:   []int{0, 0, 3, 17}[r.Intn(4)],
					}
					runCase(t, e, r, tc)
				}
			}
		}
	}
}

func testLargerShapes(t *testing.T, e *Engine) {
	r := rand.New(rand.NewSource(2))
	for _, threads := range []int{1, 2} {
		e := e.withThreads(threads)
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				runCase(t, e, r, gemmCase{ta: ta, tb: tb, m: 197, n: 301, k: 283, alpha: 1, beta: 0.5, pad: 5})
				runCase(t, e, r, gemmCase{ta: ta, tb: tb, m: 64, n: 128, k: 128, alpha: 1, beta: 0})
				// On two threads, row-split with B packed once for both
				// parts (prepackB): ragged last panel, three k blocks.
				runCase(t, e, r, gemmCase{ta: ta, tb: tb, m: 200, n: 100, k: 1100, alpha: 1, beta: 0.5, pad: 3})
				// Several k blocks (kcFor splits 1100 into three).
				runCase(t, e, r, gemmCase{ta: ta, tb: tb, m: 37, n: 45, k: 1100, alpha: 1, beta: 0.5, pad: 3})
				// More than one nc block (n > 2048), small m (direct B path
				// for NN) and larger m (packed B).
				runCase(t, e, r, gemmCase{ta: ta, tb: tb, m: 7, n: 2100, k: 5, alpha: 1, beta: 1, pad: 1})
				runCase(t, e, r, gemmCase{ta: ta, tb: tb, m: 30, n: 2065, k: 3, alpha: 0.5, beta: 0})
				// Few-rows path: wide and narrow column steps, a scalar
				// tail, and a column split across goroutines.
				runCase(t, e, r, gemmCase{ta: ta, tb: tb, m: 1, n: 1000, k: 300, alpha: 1, beta: 0, pad: 2})
				runCase(t, e, r, gemmCase{ta: ta, tb: tb, m: 5, n: 211, k: 1, alpha: -1, beta: 0.5})
			}
		}
	}
}

func TestISAs(t *testing.T) {
	t.Logf("micro-kernels on this CPU: %v (default %s); caches %+v", ISAs(), Default().ISA(), DetectCaches())
	for _, k := range kernelsAvail {
		t.Logf("%s: %d×%d tile, kc=%d mc=%d nc=%d", k.isa, k.mr, k.nr, k.kc, k.mc, k.nc)
	}
	if ISAs()[len(ISAs())-1] != "go" {
		t.Fatalf("the pure-Go kernel must always be available: %v", ISAs())
	}
}

func TestNew(t *testing.T) {
	if c := Default().Config(); c.Threads != runtime.GOMAXPROCS(0) || c.ISA != ISAs()[0] {
		t.Errorf("Default().Config() = %+v, want GOMAXPROCS (%d) threads and ISA %s", c, runtime.GOMAXPROCS(0), ISAs()[0])
	}
	for _, isa := range ISAs() {
		c := Config{Threads: 3, ISA: isa}
		if got := engine(t, c).Config(); got != c {
			t.Errorf("New(%+v).Config() = %+v", c, got)
		}
	}
	for _, c := range []Config{{ISA: "nope"}, {Threads: -1}} {
		if _, err := New(c); !errors.Is(err, ErrBadArgs) {
			t.Errorf("New(%+v) = %v, want ErrBadArgs", c, err)
		}
	}
}

func TestSgemmEmpty(t *testing.T) {
	c := []float32{5}
	Sgemm(false, false, 1, 1, 0, 1, nil, 1, nil, 1, 2, c, 1)
	if c[0] != 10 {
		t.Fatalf("k=0 beta=2: got %v want 10", c[0])
	}
	Sgemm(false, false, 0, 0, 5, 1, nil, 5, nil, 1, 2, nil, 1)
}

func TestCheck(t *testing.T) {
	a, b, c := make([]float32, 6), make([]float32, 12), make([]float32, 8)
	if err := Check(false, false, 2, 4, 3, a, 3, b, 4, c, 4); err != nil {
		t.Fatalf("valid args rejected: %v", err)
	}
	bad := []struct {
		name string
		err  error
	}{
		{"negative", Check(false, false, -1, 4, 3, a, 3, b, 4, c, 4)},
		{"short A", Check(false, false, 2, 4, 3, a[:5], 3, b, 4, c, 4)},
		{"short B transposed", Check(false, true, 2, 4, 3, a, 3, b, 4, c, 4)},
		{"small lda", Check(false, false, 2, 4, 3, a, 2, b, 4, c, 4)},
		{"short C", Check(false, false, 2, 4, 3, a, 3, b, 4, c[:7], 4)},
	}
	for _, x := range bad {
		if !errors.Is(x.err, ErrBadArgs) {
			t.Errorf("%s: got %v, want ErrBadArgs", x.name, x.err)
		}
	}
}
