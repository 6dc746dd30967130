// Package cpu is the Go compute backend: it implements compute.Backend (the
// Llama/Qwen decoder's ops) on host memory, with every matmul
// going through the gemm micro-kernel (package gpu/compute/cpu/gemm) and the other
// kernels fused and parallel over cores.
//
// New returns the fast backend, NewWithConfig one with its thread count and
// matmul micro-kernel chosen (Config). NewReference returns the same Backend
// run on the plain reference kernels (ref.go: matmuls, loss heads,
// optimizer; ref_decoder.go: the decoder ops; float64 accumulation,
// single-threaded); the tests hold the fast kernels to it, and other
// backends (gpu/compute/cuda) can be checked against it op by op.
package cpu

import (
	"fmt"

	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu/gemm"
	"troupe/gpu/compute/cpu/internal/par"
)

// Buf is a float32 buffer in host memory.
type Buf struct {
	d     []float32
	owner *Backend
	root  *Buf // the allocation a view belongs to (itself for an allocation)

	off int // offset of d in root.d

	// pend lists, on a root, the ranges of root.d whose Zero is still
	// pending (lazyzero.go).
	pend []span
}

// Len is the number of elements.
func (b *Buf) Len() int { return len(b.d) }

// Data returns the buffer's memory. It is exposed so CPU-only code (tests,
// tools) can read results without a copy; writes bypass the Backend.
func (b *Buf) Data() []float32 {
	if r := b.root; r != nil && len(r.pend) > 0 {
		for _, sp := range r.pend {
			clear(r.d[sp.lo:sp.hi])
		}
		r.pend = r.pend[:0]
	}
	return b.d
}

// IntBuf is an int32 buffer in host memory.
type IntBuf struct {
	d     []int32
	owner *Backend
}

// Len is the number of elements.
func (b *IntBuf) Len() int { return len(b.d) }

// Data returns the buffer's memory (see Buf.Data).
func (b *IntBuf) Data() []int32 { return b.d }

// Backend is the CPU implementation of compute.Backend. Use New or NewReference.
type Backend struct {
	ref  bool
	gemm *gemm.Engine // every matmul's threads and micro-kernel (Config)
	err  error

	// per-chunk scratch for the fast kernels, grown on demand and reused so a
	// training step does not allocate
	scratch [][]float32
	partial []float64
	adamK   [10][8]float32 // broadcast AdamW constants for the vector kernel
	ones    []float32      // all ones, for bias gradients as a matmul
	bfA     []uint16       // MatmulBackwardWeightBF16's dout, transposed and rounded
	bfB     []uint16       // MatmulBackwardWeightBF16's inp, rounded
	bfT     []uint16       // its dout, rounded before the transpose
	bfQ     []uint16       // GQAttentionForwardBF16's q, rounded
	bfK     []uint16       // k
	bfV     []uint16       // and v
	job     job            // the kernel being dispatched (see pool.go)
	dec     decArgs        // a decoder kernel's arguments (fast_decoder.go)
	decD    []float32      // attention backward's score gradients, grown on demand
}

var _ compute.Backend = (*Backend)(nil)

// Config is how a fast Backend computes. The zero value is New's: every
// core, and the fastest matmul micro-kernel this CPU runs.
type Config struct {
	// Threads is how many goroutines one op may use; 0 means
	// runtime.GOMAXPROCS(0).
	Threads int
	// ISA names the matmul micro-kernel, one of gemm.ISAs(); "" means the
	// first (fastest). Kernels sum in different orders, so pinning one
	// gives the same results on every CPU that has it.
	ISA string
}

// New returns the fast CPU backend with the zero Config.
func New() *Backend { return &Backend{gemm: gemm.Default()} }

// NewWithConfig returns the fast CPU backend configured by c. It fails when
// c.Threads is negative or this CPU cannot run c.ISA.
func NewWithConfig(c Config) (*Backend, error) {
	g, err := gemm.New(gemm.Config{Threads: c.Threads, ISA: c.ISA})
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	return &Backend{gemm: g}, nil
}

// NewReference returns a CPU backend that runs the reference kernels.
func NewReference() *Backend { return &Backend{ref: true, gemm: gemm.Default()} }

// Config reports b's settings, defaults filled in.
func (b *Backend) Config() Config {
	c := b.gemm.Config()
	return Config{Threads: c.Threads, ISA: c.ISA}
}

// workers is the number of chunks an op may split its work into
// (parallelFor); per-chunk scratch arrays are sized by it.
func (b *Backend) workers() int { return min(b.gemm.Threads(), par.Parts()) }

// Name is "cpu" or "cpu-ref".
func (b *Backend) Name() string {
	if b.ref {
		return "cpu-ref"
	}
	return "cpu"
}

// maxElems bounds any shape product so size arithmetic cannot overflow.
const maxElems = 1 << 40

func (b *Backend) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// Err returns the first recorded error.
func (b *Backend) Err() error { return b.err }

// Sync returns the first recorded error; CPU ops are synchronous.
func (b *Backend) Sync() error { return b.err }

// Alloc returns a zeroed buffer of n floats.
func (b *Backend) Alloc(n int) (compute.Buffer, error) {
	if n < 0 || n > maxElems {
		return nil, compute.ShapeError("Alloc", "n=%d", n)
	}
	x := &Buf{d: make([]float32, n), owner: b}
	x.root = x
	return x, nil
}

// AllocInt returns a zeroed int32 buffer of n elements.
func (b *Backend) AllocInt(n int) (compute.IntBuffer, error) {
	if n < 0 || n > maxElems {
		return nil, compute.ShapeError("AllocInt", "n=%d", n)
	}
	return &IntBuf{d: make([]int32, n), owner: b}, nil
}

// View returns x[off:off+n] sharing memory.
func (b *Backend) View(x compute.Buffer, off, n int) (compute.Buffer, error) {
	p, ok := x.(*Buf)
	if !ok || p == nil || p.owner != b || p.root.d == nil {
		return nil, fmt.Errorf("View: %w", compute.ErrBuffer)
	}
	if off < 0 || n < 0 || off > len(p.d) || n > len(p.d)-off {
		return nil, compute.ShapeError("View", "[%d,%d) of a buffer of %d", off, off+n, len(p.d))
	}
	return &Buf{d: p.d[off : off+n : off+n], owner: b, root: p.root, off: p.off + off}, nil
}

// Free drops the buffer's memory; later use reports ErrBuffer.
func (b *Backend) Free(x any) {
	switch p := x.(type) {
	case *Buf:
		// views are not freed on their own: that would free the parent
		if p != nil && p.owner == b && p.root == p {
			p.d = nil
			p.pend = nil
		}
	case *IntBuf:
		if p != nil && p.owner == b {
			p.d = nil
		}
	}
}

// f resolves a required float buffer that must hold need elements, with
// any lazy Zero on those elements applied.
func (b *Backend) f(op, name string, x compute.Buffer, need int) []float32 {
	d := b.resolve(op, name, x, need)
	if d != nil {
		if p := x.(*Buf); len(p.root.pend) > 0 {
			b.materialize(p.root, p.off, p.off+need)
		}
	}
	return d
}

// fz resolves an output buffer (optional: nil stays nil) for an op that can
// either accumulate into it or overwrite it. fresh reports that a Zero is
// pending on all its need elements: the op must then overwrite d instead of
// accumulating, and the Zero is consumed (lazyzero.go).
func (b *Backend) fz(op, name string, x compute.Buffer, need int) (d []float32, fresh bool) {
	if x == nil {
		return nil, false
	}
	if p, ok := x.(*Buf); ok && p == nil {
		return nil, false
	}
	if d = b.resolve(op, name, x, need); d == nil {
		return nil, false
	}
	p := x.(*Buf)
	if len(p.root.pend) == 0 {
		return d, false
	}
	if p.root.consume(p.off, p.off+need) {
		return d, true
	}
	b.materialize(p.root, p.off, p.off+need)
	return d, false
}

// resolve is f without applying lazy Zeros.
func (b *Backend) resolve(op, name string, x compute.Buffer, need int) []float32 {
	if b.err != nil {
		return nil
	}
	p, ok := x.(*Buf)
	if !ok || p == nil || p.owner != b || p.root.d == nil {
		b.fail(fmt.Errorf("%s: %s: %w", op, name, compute.ErrBuffer))
		return nil
	}
	if len(p.d) < need {
		b.fail(compute.ShapeError(op, "%s has %d elements, needs %d", name, len(p.d), need))
		return nil
	}
	return p.d[:need:need]
}

// opt is f for an optional argument: nil stays nil.
func (b *Backend) opt(op, name string, x compute.Buffer, need int) []float32 {
	if x == nil {
		return nil
	}
	if p, ok := x.(*Buf); ok && p == nil {
		return nil
	}
	return b.f(op, name, x, need)
}

// ints resolves a token buffer of need elements, each in [0,V).
func (b *Backend) ints(op, name string, x compute.IntBuffer, need, V int) []int32 {
	if b.err != nil {
		return nil
	}
	p, ok := x.(*IntBuf)
	if !ok || p == nil || p.owner != b || p.d == nil {
		b.fail(fmt.Errorf("%s: %s: %w", op, name, compute.ErrBuffer))
		return nil
	}
	if len(p.d) < need {
		b.fail(compute.ShapeError(op, "%s has %d elements, needs %d", name, len(p.d), need))
		return nil
	}
	d := p.d[:need:need]
	for i, t := range d {
		if t < 0 || int(t) >= V {
			b.fail(fmt.Errorf("%s: %s[%d]=%d not in [0,%d): %w", op, name, i, t, V, compute.ErrToken))
			return nil
		}
	}
	return d
}

// dims checks every size is positive and their product bounded.
func (b *Backend) dims(op string, ds ...int) bool {
	if b.err != nil {
		return false
	}
	p := 1
	for _, d := range ds {
		if d < 1 || d > maxElems || p > maxElems/d {
			// copy so ds itself does not escape: dims runs on every op
			b.fail(compute.ShapeError(op, "sizes %v", append([]int(nil), ds...)))
			return false
		}
		p *= d
	}
	return true
}

// Upload copies src into dst.
func (b *Backend) Upload(dst compute.Buffer, src []float32) {
	if d := b.f("Upload", "dst", dst, len(src)); d != nil || len(src) == 0 {
		copy(d, src)
	}
}

// UploadInt copies src into dst.
func (b *Backend) UploadInt(dst compute.IntBuffer, src []int32) {
	if b.err != nil {
		return
	}
	p, ok := dst.(*IntBuf)
	if !ok || p == nil || p.owner != b || p.d == nil {
		b.fail(fmt.Errorf("UploadInt: %w", compute.ErrBuffer))
		return
	}
	if len(p.d) < len(src) {
		b.fail(compute.ShapeError("UploadInt", "dst has %d elements, src %d", len(p.d), len(src)))
		return
	}
	copy(p.d, src)
}

// Download copies src[:len(dst)] into dst.
func (b *Backend) Download(dst []float32, src compute.Buffer) {
	if s := b.f("Download", "src", src, len(dst)); s != nil {
		copy(dst, s)
	}
}

// Zero clears x.
func (b *Backend) Zero(x compute.Buffer) {
	if x == nil {
		b.fail(fmt.Errorf("Zero: %w", compute.ErrBuffer))
		return
	}
	d := b.f("Zero", "x", x, x.Len())
	if d == nil {
		return
	}
	if b.ref {
		clear(d)
		return
	}
	p := x.(*Buf)
	p.root.addPending(p.off, p.off+len(p.d))
}

// Copy copies src[:n] to dst[:n].
func (b *Backend) Copy(dst, src compute.Buffer, n int) {
	if n < 0 {
		b.fail(compute.ShapeError("Copy", "n=%d", n))
		return
	}
	d, s := b.f("Copy", "dst", dst, n), b.f("Copy", "src", src, n)
	if b.err == nil {
		copy(d, s)
	}
}

// MatmulForward implements compute.Backend.
func (b *Backend) MatmulForward(out, inp, weight, bias compute.Buffer, N, C, OC int) {
	const op = "MatmulForward"
	if !b.dims(op, N, C, OC) {
		return
	}
	o, in, w := b.f(op, "out", out, N*OC), b.f(op, "inp", inp, N*C), b.f(op, "weight", weight, OC*C)
	bi := b.opt(op, "bias", bias, OC)
	if b.err != nil {
		return
	}
	if b.ref {
		refMatmulForward(o, in, w, bi, N, C, OC)
		return
	}
	b.matmulForward(o, in, w, bi, N, C, OC)
}

// MatmulBackward implements compute.Backend.
func (b *Backend) MatmulBackward(dinp, dweight, dbias, dout, inp, weight compute.Buffer, N, C, OC int) {
	const op = "MatmulBackward"
	if !b.dims(op, N, C, OC) {
		return
	}
	di, fresh := b.fz(op, "dinp", dinp, N*C)
	dw, freshW := b.fz(op, "dweight", dweight, OC*C)
	db, freshB := b.fz(op, "dbias", dbias, OC)
	do := b.f(op, "dout", dout, N*OC)
	var in, w []float32
	if di != nil {
		w = b.f(op, "weight", weight, OC*C)
	}
	if dw != nil {
		in = b.f(op, "inp", inp, N*C)
	}
	if b.err != nil {
		return
	}
	if b.ref {
		refMatmulBackward(di, dw, db, do, in, w, N, C, OC)
		return
	}
	b.matmulBackward(di, dw, db, do, in, w, N, C, OC, [3]bool{fresh, freshW, freshB})
}

// ResidualForward implements compute.Backend.
func (b *Backend) ResidualForward(out, x, y compute.Buffer, N int) {
	b.elementwise3("ResidualForward", [3]string{"out", "a", "b"}, [3]compute.Buffer{out, x, y}, N, refResidualForward, b.residualForward)
}

// elementwise3 runs an op over three length-N buffers: it checks them, then
// runs the reference or the fast kernel.
func (b *Backend) elementwise3(op string, names [3]string, bufs [3]compute.Buffer, N int, ref, fast func(x, y, z []float32, N int)) {
	if !b.dims(op, N) {
		return
	}
	x, y, z := b.f(op, names[0], bufs[0], N), b.f(op, names[1], bufs[1], N), b.f(op, names[2], bufs[2], N)
	if b.err != nil {
		return
	}
	if b.ref {
		ref(x, y, z, N)
		return
	}
	fast(x, y, z, N)
}

// Scale implements compute.Backend.
func (b *Backend) Scale(x compute.Buffer, s float32, N int) {
	const op = "Scale"
	if !b.dims(op, N) {
		return
	}
	if d := b.f(op, "x", x, N); d != nil {
		refScale(d, s, N)
	}
}

func (b *Backend) lossArgs(op string, out, probs, logits compute.Buffer, targets compute.IntBuffer, N, V int) (o, p, l []float32, t []int32) {
	if !b.dims(op, N, V) {
		return
	}
	o, p, l = b.f(op, "out", out, N), b.f(op, "probs", probs, N*V), b.f(op, "logits", logits, N*V)
	t = b.ints(op, "targets", targets, N, V)
	return
}

// CrossEntropyForward implements compute.Backend.
func (b *Backend) CrossEntropyForward(losses, probs, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	o, p, l, t := b.lossArgs("CrossEntropyForward", losses, probs, logits, targets, N, V)
	if b.err != nil {
		return
	}
	if b.ref {
		refCrossEntropyForward(o, p, l, t, N, V)
		return
	}
	b.softmaxGather(o, p, l, t, N, V, true)
}

// CrossEntropyBackward implements compute.Backend.
func (b *Backend) CrossEntropyBackward(dlogits, probs, dlosses compute.Buffer, targets compute.IntBuffer, N, V int) {
	d, p, dl, t := b.lossArgs("CrossEntropyBackward", dlosses, probs, dlogits, targets, N, V)
	if b.err != nil {
		return
	}
	if b.ref {
		refCrossEntropyBackward(dl, p, d, t, N, V)
		return
	}
	b.softmaxGatherBackward(dl, p, d, t, N, V, -1)
}

// LogProbForward implements compute.Backend.
func (b *Backend) LogProbForward(logp, probs, logits compute.Buffer, targets compute.IntBuffer, N, V int) {
	o, p, l, t := b.lossArgs("LogProbForward", logp, probs, logits, targets, N, V)
	if b.err != nil {
		return
	}
	if b.ref {
		refLogProbForward(o, p, l, t, N, V)
		return
	}
	b.softmaxGather(o, p, l, t, N, V, false)
}

// LogProbBackward implements compute.Backend.
func (b *Backend) LogProbBackward(dlogits, probs, dlogp compute.Buffer, targets compute.IntBuffer, N, V int) {
	d, p, dl, t := b.lossArgs("LogProbBackward", dlogp, probs, dlogits, targets, N, V)
	if b.err != nil {
		return
	}
	if b.ref {
		refLogProbBackward(dl, p, d, t, N, V)
		return
	}
	b.softmaxGatherBackward(dl, p, d, t, N, V, 1)
}

// AdamWUpdate implements compute.Backend.
func (b *Backend) AdamWUpdate(params, grads, m, v compute.Buffer, N int, h compute.AdamW) {
	const op = "AdamWUpdate"
	if !b.dims(op, N) {
		return
	}
	if h.Step < 1 {
		b.fail(compute.ShapeError(op, "Step=%d, must be >= 1", h.Step))
		return
	}
	p, g := b.f(op, "params", params, N), b.f(op, "grads", grads, N)
	ms, vs := b.f(op, "m", m, N), b.f(op, "v", v, N)
	if b.err != nil {
		return
	}
	scale := h.GradScale
	if scale == 0 {
		scale = 1
	}
	if b.ref {
		refAdamW(p, g, ms, vs, N, h.LR, h.Beta1, h.Beta2, h.Eps, h.WeightDecay, scale, h.Step)
		return
	}
	b.adamW(p, g, ms, vs, N, h, scale)
}

// SumSquares implements compute.Backend.
func (b *Backend) SumSquares(x compute.Buffer, N int) float64 {
	const op = "SumSquares"
	if !b.dims(op, N) {
		return 0
	}
	d := b.f(op, "x", x, N)
	if b.err != nil {
		return 0
	}
	if b.ref {
		return refSumSquares(d, N)
	}
	return b.sumSquares(d, N)
}

var _ compute.MatmulTransposer = (*Backend)(nil)

// Transpose implements compute.MatmulTransposer.
func (b *Backend) Transpose(dst, src compute.Buffer, rows, cols int) {
	const op = "Transpose"
	if !b.dims(op, rows, cols) {
		return
	}
	d, s := b.f(op, "dst", dst, rows*cols), b.f(op, "src", src, rows*cols)
	if b.err != nil {
		return
	}
	if b.ref {
		refTranspose(d, s, rows, cols)
		return
	}
	b.transpose(d, s, rows, cols)
}

// MatmulForwardT implements compute.MatmulTransposer.
func (b *Backend) MatmulForwardT(out, inp, weightT, bias compute.Buffer, N, C, OC int) {
	const op = "MatmulForwardT"
	if !b.dims(op, N, C, OC) {
		return
	}
	o, in, w := b.f(op, "out", out, N*OC), b.f(op, "inp", inp, N*C), b.f(op, "weightT", weightT, C*OC)
	bi := b.opt(op, "bias", bias, OC)
	if b.err != nil {
		return
	}
	if b.ref {
		refMatmulForwardT(o, in, w, bi, N, C, OC)
		return
	}
	b.matmulForwardT(o, in, w, bi, N, C, OC)
}
