//go:build cudaemu || cudagpu

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// Every op of the CUDA Backend against gpu/compute/cpu's reference kernels (float64
// accumulation) on the same inputs. With -tags cudaemu the Backend runs on
// the CPU emulator; with -tags cudagpu on CUDA device 0 (newTestBackend).

// errRecord collects the max abs / rel error per checked output for the
// README table (TROUPE_EMU_REPORT=path writes it as markdown).
var (
	errMu     sync.Mutex
	errRecord = map[string][2]float64{}
)

func record(name string, abs, rel float64) {
	errMu.Lock()
	defer errMu.Unlock()
	e := errRecord[name]
	errRecord[name] = [2]float64{math.Max(e[0], abs), math.Max(e[1], rel)}
}

// pair runs the same op on the emulated CUDA backend and the CPU reference.
type pair struct {
	t   *testing.T
	e   *Backend
	r   *cpu.Backend
	rng *rand.Rand
}

func newPair(t *testing.T, seed uint64) *pair {
	return &pair{t: t, e: newTestBackend(t), r: cpu.NewReference(), rng: rand.New(rand.NewPCG(seed, 7))}
}

type buf struct{ e, r compute.Buffer }
type ibuf struct{ e, r compute.IntBuffer }

func (p *pair) randn(n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(p.rng.NormFloat64() * scale)
	}
	return x
}

func (p *pair) up(x []float32) buf {
	p.t.Helper()
	eb, err := p.e.Alloc(len(x))
	if err != nil {
		p.t.Fatal(err)
	}
	rb, err := p.r.Alloc(len(x))
	if err != nil {
		p.t.Fatal(err)
	}
	p.e.Upload(eb, x)
	p.r.Upload(rb, x)
	return buf{eb, rb}
}

func (p *pair) rand(n int, scale float64) buf { return p.up(p.randn(n, scale)) }
func (p *pair) zeros(n int) buf               { return p.up(make([]float32, n)) }

func (p *pair) tokens(n, V int) ibuf {
	p.t.Helper()
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(p.rng.IntN(V))
	}
	eb, err := p.e.AllocInt(n)
	if err != nil {
		p.t.Fatal(err)
	}
	rb, err := p.r.AllocInt(n)
	if err != nil {
		p.t.Fatal(err)
	}
	p.e.UploadInt(eb, x)
	p.r.UploadInt(rb, x)
	return ibuf{eb, rb}
}

// check compares one output; tol bounds max|e-r| / max(1, max|r|).
func (p *pair) check(name string, b buf, tol float64) {
	p.t.Helper()
	n := b.r.Len()
	ge, gr := make([]float32, n), make([]float32, n)
	p.e.Download(ge, b.e)
	p.r.Download(gr, b.r)
	if err := p.e.Sync(); err != nil {
		p.t.Fatalf("%s: emulated backend: %v", name, err)
	}
	if err := p.r.Sync(); err != nil {
		p.t.Fatalf("%s: reference backend: %v", name, err)
	}
	var maxAbs, maxRef float64
	worst := 0
	for i := range ge {
		if math.IsNaN(float64(ge[i])) != math.IsNaN(float64(gr[i])) {
			p.t.Fatalf("%s[%d]: emulated %v, reference %v", name, i, ge[i], gr[i])
		}
		d := math.Abs(float64(ge[i]) - float64(gr[i]))
		if d > maxAbs {
			maxAbs, worst = d, i
		}
		maxRef = math.Max(maxRef, math.Abs(float64(gr[i])))
	}
	rel := maxAbs / math.Max(maxRef, 1e-30)
	record(name, maxAbs, rel)
	if maxAbs > tol*math.Max(1, maxRef) {
		p.t.Errorf("%s: max abs error %.3g at [%d] (emulated %v, reference %v), max |ref| %.3g, tolerance %.3g",
			name, maxAbs, worst, ge[worst], gr[worst], maxRef, tol)
	}
}

const tol = 2e-5 // float32 vs float64 accumulation over <= a few hundred terms

func TestOpMatmul(t *testing.T) {
	p := newPair(t, 3)
	N, C, OC := 70, 37, 67 // odd sizes crossing the 64-wide tiles
	inp, w, bi := p.rand(N*C, 1), p.rand(OC*C, 1), p.rand(OC, 1)
	out := p.rand(N*OC, 1)
	p.e.MatmulForward(out.e, inp.e, w.e, bi.e, N, C, OC)
	p.r.MatmulForward(out.r, inp.r, w.r, bi.r, N, C, OC)
	p.check("matmul_forward", out, tol)
	p.e.MatmulForward(out.e, inp.e, w.e, nil, N, C, OC)
	p.r.MatmulForward(out.r, inp.r, w.r, nil, N, C, OC)
	p.check("matmul_forward(no bias)", out, tol)
	dout := p.rand(N*OC, 1)
	dinp, dw, db := p.rand(N*C, 1), p.rand(OC*C, 1), p.rand(OC, 1)
	p.e.MatmulBackward(dinp.e, dw.e, db.e, dout.e, inp.e, w.e, N, C, OC)
	p.r.MatmulBackward(dinp.r, dw.r, db.r, dout.r, inp.r, w.r, N, C, OC)
	p.check("matmul_backward_input", dinp, tol)
	p.check("matmul_backward_weight", dw, tol)
	p.check("matmul_backward_bias", db, tol)
}

func TestOpPointwise(t *testing.T) {
	p := newPair(t, 7)
	N := 1000 // > grid*block on the emulator: exercises the grid-stride loop
	out := p.zeros(N)
	a, b := p.rand(N, 1), p.rand(N, 1)
	p.e.ResidualForward(out.e, a.e, b.e, N)
	p.r.ResidualForward(out.r, a.r, b.r, N)
	p.check("residual_forward", out, tol)
	p.e.ResidualForward(a.e, a.e, b.e, N) // out aliases a
	p.r.ResidualForward(a.r, a.r, b.r, N)
	p.check("residual_forward(aliased)", a, tol)
	p.e.Scale(out.e, -0.37, N-3)
	p.r.Scale(out.r, -0.37, N-3)
	p.check("scale", out, tol)
}

func TestOpLossHeads(t *testing.T) {
	p := newPair(t, 8)
	N, V := 6, 75
	logits := p.rand(N*V, 3)
	tg := p.tokens(N, V)
	losses, probs := p.zeros(N), p.zeros(N*V)
	p.e.CrossEntropyForward(losses.e, probs.e, logits.e, tg.e, N, V)
	p.r.CrossEntropyForward(losses.r, probs.r, logits.r, tg.r, N, V)
	p.check("crossentropy_forward.losses", losses, tol)
	p.check("crossentropy_forward.probs", probs, tol)
	dl, dlogits := p.rand(N, 1), p.rand(N*V, 1)
	p.e.CrossEntropyBackward(dlogits.e, probs.e, dl.e, tg.e, N, V)
	p.r.CrossEntropyBackward(dlogits.r, probs.r, dl.r, tg.r, N, V)
	p.check("crossentropy_backward", dlogits, tol)

	logp := p.zeros(N)
	p.e.LogProbForward(logp.e, logits.e, logits.e, tg.e, N, V) // probs aliases logits
	p.r.LogProbForward(logp.r, logits.r, logits.r, tg.r, N, V)
	p.check("logprob_forward.logp", logp, tol)
	p.check("logprob_forward.probs(aliased)", logits, tol)
	dlogp := p.rand(N, 1)
	p.e.LogProbBackward(dlogits.e, logits.e, dlogp.e, tg.e, N, V)
	p.r.LogProbBackward(dlogits.r, logits.r, dlogp.r, tg.r, N, V)
	p.check("logprob_backward", dlogits, tol)
}

func TestOpAdamWAndNorm(t *testing.T) {
	p := newPair(t, 9)
	N := 777
	params, grads := p.rand(N, 1), p.rand(N, 0.1)
	m, v := p.zeros(N), p.zeros(N)
	for step := 1; step <= 3; step++ {
		h := compute.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: step, GradScale: 0.5}
		p.e.AdamWUpdate(params.e, grads.e, m.e, v.e, N, h)
		p.r.AdamWUpdate(params.r, grads.r, m.r, v.r, N, h)
	}
	p.check("adamw_update.params", params, tol)
	p.check("adamw_update.m", m, tol)
	p.check("adamw_update.v", v, tol)

	x := p.rand(N, 3)
	se, sr := p.e.SumSquares(x.e, N), p.r.SumSquares(x.r, N)
	if err := p.e.Sync(); err != nil {
		t.Fatal(err)
	}
	d := math.Abs(se - sr)
	record("sum_squares", d, d/sr)
	if d > 1e-12*sr {
		t.Errorf("sum_squares: emulated %v, reference %v", se, sr)
	}
}

func TestOpBF16Path(t *testing.T) {
	// The bf16 kernels against the float32 reference on bf16-rounded inputs:
	// the products of two bf16 values are exact in float32, so only the
	// summation order differs.
	p := newPair(t, 10)
	N, C, OC := 33, 40, 70
	inF, wF := p.randn(N*C, 1), p.randn(OC*C, 1)
	round := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = BF16ToFloat32(Float32ToBF16(v))
		}
		return y
	}
	in, w := p.up(inF), p.up(wF)
	inH, err := p.e.AllocBF16(N * C)
	if err != nil {
		t.Fatal(err)
	}
	wH, err := p.e.AllocBF16(OC * C)
	if err != nil {
		t.Fatal(err)
	}
	p.e.ToBF16(inH, in.e, N*C)
	p.e.ToBF16(wH, w.e, OC*C)
	// Conversion matches the Go rounding bit for bit.
	got := make([]uint16, N*C)
	p.e.DownloadBF16(got, inH)
	for i, v := range inF {
		if got[i] != Float32ToBF16(v) {
			t.Fatalf("float_to_bf16[%d]: %#x, want %#x (of %v)", i, got[i], Float32ToBF16(v), v)
		}
	}
	inR, wR := p.up(round(inF)), p.up(round(wF))
	bi, out := p.rand(OC, 1), p.zeros(N*OC)
	p.e.MatmulForwardBF16Buf(out.e, inH, wH, bi.e, N, C, OC)
	p.r.MatmulForward(out.r, inR.r, wR.r, bi.r, N, C, OC)
	p.check("matmul_forward_bf16", out, tol)
	back := p.zeros(N * C)
	p.e.FromBF16(back.e, inH, N*C)
	p.r.Copy(back.r, inR.r, N*C)
	p.check("bf16_to_float", back, 0)

	// AdamW on fp32 masters refreshes the bf16 copy.
	M := 300
	master, grads, m, v := p.rand(M, 1), p.rand(M, 0.1), p.zeros(M), p.zeros(M)
	ph, err := p.e.AllocBF16(M)
	if err != nil {
		t.Fatal(err)
	}
	h := compute.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: 1}
	p.e.AdamWUpdateBF16(master.e, ph, grads.e, m.e, v.e, M, h)
	p.r.AdamWUpdate(master.r, grads.r, m.r, v.r, M, h)
	p.check("adamw_update_bf16.master", master, tol)
	gotP := make([]uint16, M)
	p.e.DownloadBF16(gotP, ph)
	want := make([]float32, M)
	p.e.Download(want, master.e)
	for i := range want {
		if gotP[i] != Float32ToBF16(want[i]) {
			t.Fatalf("adamw_update_bf16 copy[%d] = %#x, want bf16(%v) = %#x", i, gotP[i], want[i], Float32ToBF16(want[i]))
		}
	}
}

// TestOpHalfUpload widens every bf16 and every fp16 value on the device and
// compares the bits with the host conversions (exact), through a view at an
// offset and in several staging chunks.
func TestOpHalfUpload(t *testing.T) {
	e := newTestBackend(t)
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i*40503 + 7) // every value once, shuffled
	}
	const off = 3
	buf, err := e.Alloc(len(src) + off + 1)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := e.View(buf, off, len(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		upload func(compute.Buffer, []uint16)
		host   func(uint16) float32
	}{
		{"bf16", e.UploadFromBF16, BF16ToFloat32},
		{"f16", e.UploadFromF16, F16ToFloat32},
	} {
		e.Zero(buf)
		c.upload(dst, src)
		got := make([]float32, len(src)+off+1)
		e.Download(got, buf)
		if err := e.Sync(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got[off-1] != 0 || got[len(got)-1] != 0 {
			t.Fatalf("%s: wrote outside the view: %v %v", c.name, got[off-1], got[len(got)-1])
		}
		for i, h := range src {
			if g, w := math.Float32bits(got[off+i]), math.Float32bits(c.host(h)); g != w {
				t.Fatalf("%s[%d] of %#04x = %#08x, want %#08x", c.name, i, h, g, w)
			}
		}
	}
	e.UploadFromF16(dst, make([]uint16, len(src)+1))
	if err := e.Err(); !errors.Is(err, compute.ErrShape) {
		t.Fatalf("upload longer than dst: %v, want ErrShape", err)
	}
}

func TestOpTokenOutOfRange(t *testing.T) {
	e := newTestBackend(t)
	N, C, V := 3, 8, 5
	out, _ := e.Alloc(N * C)
	wte, _ := e.Alloc(V * C)
	inp, _ := e.AllocInt(N)
	e.UploadInt(inp, []int32{0, 7, 1})
	e.EmbedForward(out, inp, wte, N, C, V)
	if err := e.Sync(); !errors.Is(err, compute.ErrToken) {
		t.Fatalf("Sync after a bad token = %v, want ErrToken", err)
	}
	// Sticky: later ops are skipped and report the same error.
	e.Scale(out, 2, N*C)
	if err := e.Sync(); !errors.Is(err, compute.ErrToken) {
		t.Fatalf("error not sticky: %v", err)
	}
}

func TestOpBufferErrors(t *testing.T) {
	e := newTestBackend(t)
	a, _ := e.Alloc(10)
	e.Scale(a, 2, 11)
	if err := e.Err(); !errors.Is(err, compute.ErrShape) {
		t.Fatalf("short buffer: %v, want ErrShape", err)
	}
	e2 := newTestBackend(t)
	b, _ := e2.Alloc(4)
	e2.Free(b)
	e2.Zero(b)
	if err := e2.Err(); !errors.Is(err, compute.ErrBuffer) {
		t.Fatalf("use after free: %v, want ErrBuffer", err)
	}
	e3 := newTestBackend(t)
	foreign, _ := cpu.New().Alloc(4)
	e3.Zero(foreign)
	if err := e3.Err(); !errors.Is(err, compute.ErrBuffer) {
		t.Fatalf("foreign buffer: %v, want ErrBuffer", err)
	}
}

// TestEmuZReport runs last (name order) and writes the error table.
func TestOpZReport(t *testing.T) {
	errMu.Lock()
	defer errMu.Unlock()
	names := make([]string, 0, len(errRecord))
	for n := range errRecord {
		names = append(names, n)
	}
	sort.Strings(names)
	var sb strings.Builder
	sb.WriteString("| output | max abs error | max abs error / max abs reference |\n|---|---:|---:|\n")
	for _, n := range names {
		e := errRecord[n]
		fmt.Fprintf(&sb, "| %s | %.2e | %.2e |\n", n, e[0], e[1])
	}
	t.Log("\n" + sb.String())
	if path := os.Getenv("TROUPE_EMU_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
