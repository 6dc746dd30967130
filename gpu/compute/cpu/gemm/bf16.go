package gemm

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"troupe/gpu/compute/cpu/internal/par"
)

// BF16 operands are uint16 slices holding bfloat16 bits: the high half of
// a float32 (8-bit exponent, 7-bit mantissa), the format the model
// family's frozen weights are stored in.

// ToBF16 rounds src to BF16 into dst (round to nearest, ties to even; NaN
// stays NaN, ±Inf stays ±Inf), for len(src) elements; dst must be at least
// as long.
func ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	done := cvtBF16Asm(dst, src)
	for i := done; i < len(src); i++ {
		dst[i] = RoundBF16(src[i])
	}
}

// RoundBF16 is one float32 rounded to BF16 (nearest, ties to even).
func RoundBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40 // NaN: keep the sign, make it quiet
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// FromBF16 widens src into dst (exact), for len(src) elements.
func FromBF16(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// BF16Operand is the element type of GemmBF16's A operand: float32, or BF16
// bits in uint16.
type BF16Operand interface{ float32 | uint16 }

// CheckBF16 validates GemmBF16 arguments as Check does for Sgemm.
func CheckBF16[T BF16Operand](transA, transB bool, m, n, k int, a []T, lda int, b []uint16, ldb int, c []float32, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("%w: negative size m=%d n=%d k=%d", ErrBadArgs, m, n, k)
	}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if err := checkLen("A", len(a), ar, ac, lda); err != nil {
		return err
	}
	if err := checkLen("B", len(b), br, bc, ldb); err != nil {
		return err
	}
	return checkLen("C", len(c), m, n, ldc)
}

// ReferenceBF16 is GemmBF16's plain triple loop: A and B widened to
// float32 exactly (A rounded to BF16 first when roundA), products summed
// in float32. Only for tests.
func ReferenceBF16[T BF16Operand](roundA, transA, transB bool, m, n, k int, alpha float32, a []T, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	af := widenAny(a)
	if roundA {
		for i, v := range af {
			af[i] = math.Float32frombits(uint32(RoundBF16(v)) << 16)
		}
	}
	bf := make([]float32, len(b))
	FromBF16(bf, b)
	Reference(transA, transB, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc)
}

func widenAny[T BF16Operand](a []T) []float32 {
	switch x := any(a).(type) {
	case []float32:
		return append([]float32(nil), x...)
	case []uint16:
		f := make([]float32, len(x))
		FromBF16(f, x)
		return f
	}
	panic("unreachable")
}

// GemmBF16 computes C = alpha*op(A)*op(B) + beta*C as Sgemm does, with B in
// BF16 (weights; a PyTorch Linear's [out, in] weight is B with transB for
// the forward and without it for the input gradient) and A in float32 or
// BF16. Accumulation is in float32.
//
// On CPUs with AVX512_BF16 (BF16Native) the product runs on VDPBF16PS:
// a float32 A is rounded to BF16 (nearest even) as it is packed, the
// products are exact and their sums are float32 (what PyTorch's BF16
// matmul computes). Elsewhere B is widened to float32 block by block and
// the float32 kernel multiplies it with A unrounded. Products with fewer
// than six rows and transB (decode) read B once per row through GemvBF16,
// with A in float32 (not rounded) on every CPU.
// Arguments must pass CheckBF16. Safe for concurrent use.
//
// It runs on e (Default() for the default); it is a function rather than
// a method of Engine because Go methods take no type parameters.
func GemmBF16[T BF16Operand](e *Engine, transA, transB bool, m, n, k int, alpha float32, a []T, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	var aF []float32
	var aH []uint16
	switch x := any(a).(type) {
	case []float32:
		aF = x
	case []uint16:
		aH = x
	}
	if m < rowsMaxM && transB {
		for i := 0; i < m; i++ {
			e.gemvRowBF16(transA, i, n, k, alpha, aF, aH, lda, b, ldb, beta, c[i*ldc:])
		}
		return
	}
	if e.bf16Native() {
		e.dpGemm(transA, transB, m, n, k, alpha, aF, aH, lda, b, ldb, beta, c, ldc)
		return
	}
	e.widenGemm(transA, transB, m, n, k, alpha, aF, aH, lda, b, ldb, beta, c, ldc)
}

// gemvRowBF16 computes row i of C for the few-rows transB case.
func (e *Engine) gemvRowBF16(transA bool, i, n, k int, alpha float32, aF []float32, aH []uint16, lda int, b []uint16, ldb int, beta float32, crow []float32) {
	if aH == nil && !transA {
		e.GemvBF16(n, k, alpha, b, ldb, aF[i*lda:i*lda+k], beta, crow)
		return
	}
	// Gather row i of op(A) as float32.
	ws := bfPool.Get().(*bfWorkspace)
	x := grow(ws.af, k)
	for p := range x {
		switch {
		case aH == nil:
			x[p] = aF[p*lda+i]
		case transA:
			x[p] = math.Float32frombits(uint32(aH[p*lda+i]) << 16)
		default:
			x[p] = math.Float32frombits(uint32(aH[i*lda+p]) << 16)
		}
	}
	e.GemvBF16(n, k, alpha, b, ldb, x, beta, crow)
	ws.af = x
	bfPool.Put(ws)
}

// BF16Native reports whether GemmBF16 runs on VDPBF16PS on this CPU with
// e's kernel (AVX512_BF16 present and the avx512 kernel selected).
func (e *Engine) BF16Native() bool { return e.bf16Native() }

// BF16Native is Default().BF16Native.
func BF16Native() bool { return defaultEngine.bf16Native() }

func (e *Engine) bf16Native() bool {
	switch e.bf16Path {
	case "dp":
		return true
	case "widen":
		return false
	}
	return hasBF16 && e.kn.isa == "avx512"
}

// widenChunk is the number of op(B) columns widened to float32 at a time
// by the fallback path.
const widenChunk = 512

// widenGemm is GemmBF16 without BF16 instructions: A (if BF16) and
// column chunks of B widened to float32, then Sgemm.
func (e *Engine) widenGemm(transA, transB bool, m, n, k int, alpha float32, aF []float32, aH []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	ws := bfPool.Get().(*bfWorkspace)
	defer bfPool.Put(ws)
	if aH != nil {
		ar, ac := m, k
		if transA {
			ar, ac = k, m
		}
		ws.af = grow(ws.af, (ar-1)*lda+ac)
		FromBF16(ws.af, aH[:len(ws.af)])
		aF = ws.af
	}
	for j0 := 0; j0 < n; j0 += widenChunk {
		nc := min(widenChunk, n-j0)
		ws.bw = grow(ws.bw, k*nc)
		if transB {
			for j := 0; j < nc; j++ {
				FromBF16(ws.bw[j*k:(j+1)*k], b[(j0+j)*ldb:(j0+j)*ldb+k])
			}
			e.Sgemm(transA, true, m, nc, k, alpha, aF, lda, ws.bw, k, beta, c[j0:], ldc)
		} else {
			for p := 0; p < k; p++ {
				FromBF16(ws.bw[p*nc:(p+1)*nc], b[p*ldb+j0:p*ldb+j0+nc])
			}
			e.Sgemm(transA, false, m, nc, k, alpha, aF, lda, ws.bw, nc, beta, c[j0:], ldc)
		}
	}
}

// bfWorkspace holds one goroutine's BF16 buffers (pooled).
type bfWorkspace struct {
	af, bw []float32
	ab, bb []uint32 // packed A rows and B panels of the VDPBF16PS path
	tmp    [bfMR * bfNR]float32
}

var bfPool = sync.Pool{New: func() any { return new(bfWorkspace) }}

func growU32(buf []uint32, n int) []uint32 {
	if cap(buf) < n {
		return make([]uint32, n)
	}
	return buf[:n]
}

// The VDPBF16PS kernel's tile and blocking: kcq pairs of k per block, half
// the float32 kernel's kc (the same bytes of B per block); mc and nc as
// that kernel's.
const (
	bfMR = 12
	bfNR = 32
)

var bfBlocking = func() (b struct{ kcq, mc, nc int }) {
	kn := &kernel{mr: bfMR, nr: bfNR}
	kn.sizeBlocking(caches)
	b.kcq, b.mc, b.nc = kn.kc/2, kn.mc, kn.nc
	return b
}()

// bfJob is one dpGemm call split into parts (rows or columns of tiles).
type bfJob struct {
	splitM         bool
	units, parts   int
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	aF             []float32
	aH             []uint16
	b              []uint16
	c              []float32
	lda, ldb, ldc  int
}

var bfJobPool = sync.Pool{New: func() any { return new(bfJob) }}

func (j *bfJob) Run(t int) {
	lo, hi := t*j.units/j.parts, (t+1)*j.units/j.parts
	ws := bfPool.Get().(*bfWorkspace)
	if j.splitM {
		i0, i1 := lo*bfMR, min(hi*bfMR, j.m)
		aF, aH := j.aF, j.aH
		off := i0 * j.lda
		if j.transA {
			off = i0
		}
		if aF != nil {
			aF = aF[off:]
		} else {
			aH = aH[off:]
		}
		dpBlock(ws, j.transA, j.transB, i1-i0, j.n, j.k, j.alpha, aF, aH, j.lda, j.b, j.ldb, j.beta, j.c[i0*j.ldc:], j.ldc)
	} else {
		j0, j1 := lo*bfNR, min(hi*bfNR, j.n)
		bb := j.b[j0:]
		if j.transB {
			bb = j.b[j0*j.ldb:]
		}
		dpBlock(ws, j.transA, j.transB, j.m, j1-j0, j.k, j.alpha, j.aF, j.aH, j.lda, bb, j.ldb, j.beta, j.c[j0:], j.ldc)
	}
	bfPool.Put(ws)
}

// dpGemm splits a VDPBF16PS product across goroutines as sgemm does.
func (e *Engine) dpGemm(transA, transB bool, m, n, k int, alpha float32, aF []float32, aH []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	threads := e.threads
	if threads > 1 && m*n*k >= 2*parMinWork {
		// A is always packed here, so split as for a transposed A.
		if splitM, tiles, ok := split(&kernel{mr: bfMR, nr: bfNR}, threads, true, m, n); ok {
			j := bfJobPool.Get().(*bfJob)
			*j = bfJob{splitM: splitM, units: tiles, parts: min(threads, tiles),
				transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta,
				aF: aF, aH: aH, b: b, c: c, lda: lda, ldb: ldb, ldc: ldc}
			par.Run(j.parts, j)
			*j = bfJob{}
			bfJobPool.Put(j)
			return
		}
	}
	ws := bfPool.Get().(*bfWorkspace)
	dpBlock(ws, transA, transB, m, n, k, alpha, aF, aH, lda, b, ldb, beta, c, ldc)
	bfPool.Put(ws)
}

// dpBlock is the single-goroutine blocked VDPBF16PS product (loops jc, pc,
// ic, jr, ir as block). Packed B holds word (q, j) of each 32-column panel
// at q*32+j; packed A is row-major, kq words a row, rows rounded up to 12
// with zeros.
func dpBlock(ws *bfWorkspace, transA, transB bool, m, n, k int, alpha float32, aF []float32, aH []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	bl := bfBlocking
	// Equal k blocks of at most 2*kcq elements, a multiple of 16 (the
	// assembly packs B 8 words at a time), as kcFor.
	blocks := (k + 2*bl.kcq - 1) / (2 * bl.kcq)
	kcb := min((k+blocks-1)/blocks+15, 2*bl.kcq) / 16 * 16
	for jc := 0; jc < n; jc += bl.nc {
		nc := min(bl.nc, n-jc)
		ncPad := (nc + bfNR - 1) / bfNR * bfNR
		for pc := 0; pc < k; pc += kcb {
			kc := min(kcb, k-pc)
			kq := (kc + 1) / 2
			betaEff := beta
			if pc > 0 {
				betaEff = 1
			}
			ws.bb = growU32(ws.bb, kq*ncPad)
			packBbf(ws.bb, transB, b, ldb, pc, jc, kc, nc)
			for ic := 0; ic < m; ic += bl.mc {
				mc := min(bl.mc, m-ic)
				mcPad := (mc + bfMR - 1) / bfMR * bfMR
				ws.ab = growU32(ws.ab, mcPad*kq)
				packAbf(ws.ab, transA, aF, aH, lda, ic, pc, mc, kc)
				mcFull := mc / bfMR * bfMR
				for jr := 0; jr < nc; jr += bfNR {
					cols := min(bfNR, nc-jr)
					bpan := ws.bb[jr*kq : (jr+bfNR)*kq]
					irStart := 0
					if cols == bfNR && mcFull > 0 {
						kernelBF16Asm(mcFull/bfMR, kq, ws.ab, kq, 1, bfMR*kq, bpan, bfNR, c[ic*ldc+jc+jr:], ldc, alpha, betaEff)
						irStart = mcFull
					}
					for ir := irStart; ir < mc; ir += bfMR {
						kernelBF16Asm(1, kq, ws.ab[ir*kq:], kq, 1, 0, bpan, bfNR, ws.tmp[:], bfNR, alpha, 0)
						mergeTile(ws.tmp[:], bfNR, c[(ic+ir)*ldc+jc+jr:], ldc, min(bfMR, mc-ir), cols, betaEff)
					}
				}
			}
		}
	}
}

// u16 views a word buffer as BF16 halves (word q of a row holds elements
// 2q, low half, and 2q+1).
func u16(w []uint32) []uint16 {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&w[0])), 2*len(w))
}

// packAbf writes op(A)[i0:i0+mc, p0:p0+kc] as BF16 into dst, row-major
// with kq = ceil(kc/2) words a row; the odd last element and rows up to a
// multiple of 12 are zero.
func packAbf(dst []uint32, transA bool, aF []float32, aH []uint16, lda, i0, p0, mc, kc int) {
	kq := (kc + 1) / 2
	h := u16(dst)
	for i := 0; i < mc; i++ {
		row := h[i*2*kq : i*2*kq+2*kq]
		row[2*kq-1] = 0
		switch {
		case !transA && aF != nil:
			ToBF16(row, aF[(i0+i)*lda+p0:(i0+i)*lda+p0+kc])
		case !transA:
			copy(row, aH[(i0+i)*lda+p0:(i0+i)*lda+p0+kc])
		}
	}
	if transA {
		for p := 0; p < kc; p++ {
			off := (p0+p)*lda + i0
			if aF != nil {
				for i, v := range aF[off : off+mc] {
					h[i*2*kq+p] = RoundBF16(v)
				}
			} else {
				for i, v := range aH[off : off+mc] {
					h[i*2*kq+p] = v
				}
			}
		}
	}
	clear(dst[mc*kq:])
}

// packBbf packs op(B)[p0:p0+kc, j0:j0+nc] (BF16) into 32-column panels of
// words: panel r holds word (q, j) = elements 2q (low) and 2q+1 (high) of
// column j at r*32*kq + q*32 + j. Columns past nc and the odd last
// element are zero.
func packBbf(dst []uint32, transB bool, b []uint16, ldb, p0, j0, kc, nc int) {
	kq := (kc + 1) / 2
	for r := 0; r < nc; r += bfNR {
		cols := min(bfNR, nc-r)
		d := dst[r*kq : (r+bfNR)*kq]
		if transB {
			// Word q of column j is word q of stored row j: a 32-bit
			// transpose, in assembly 16 rows by 8 words at a time.
			done := 0
			if cols == bfNR && ldb%2 == 0 {
				done = kq
				for j := 0; j < bfNR; j += 16 {
					done = min(done, packBTbfAsm(d[j:], b[(j0+r+j)*ldb+p0:], ldb, kc))
				}
			}
			for j := 0; j < cols; j++ {
				row := b[(j0+r+j)*ldb+p0 : (j0+r+j)*ldb+p0+kc]
				for q := done; q < kq; q++ {
					w := uint32(row[2*q])
					if 2*q+1 < kc {
						w |= uint32(row[2*q+1]) << 16
					}
					d[q*bfNR+j] = w
				}
			}
			if cols < bfNR {
				for q := 0; q < kq; q++ {
					clear(d[q*bfNR+cols : (q+1)*bfNR])
				}
			}
			continue
		}
		done := 0
		if cols == bfNR {
			done = packBNbfAsm(d, b[p0*ldb+j0+r:], ldb, kc/2)
		}
		for q := done; q < kq; q++ {
			lo := b[(p0+2*q)*ldb+j0+r : (p0+2*q)*ldb+j0+r+cols]
			dd := d[q*bfNR : (q+1)*bfNR]
			if 2*q+1 < kc {
				hi := b[(p0+2*q+1)*ldb+j0+r : (p0+2*q+1)*ldb+j0+r+cols]
				for j := range lo {
					dd[j] = uint32(lo[j]) | uint32(hi[j])<<16
				}
			} else {
				for j := range lo {
					dd[j] = uint32(lo[j])
				}
			}
			clear(dd[cols:])
		}
	}
}

// GemvBF16 computes y = alpha*W·x + beta*y for a BF16 matrix W of n rows
// and k columns (row stride ldw; a PyTorch Linear's [out, in] weight) and
// float32 x (length k) and y (length n): the decode step's matrix–vector
// product, which reads W once, as BF16, straight from where it is stored
// (half the bytes of float32 weights). W is widened exactly; sums are
// float32. Large products split the rows across e's goroutines. With
// beta == 0, y is only written.
func (e *Engine) GemvBF16(n, k int, alpha float32, w []uint16, ldw int, x []float32, beta float32, y []float32) {
	e.gemv(n, k, alpha, nil, w, ldw, x, beta, y)
}

// GemvBF16 is Default().GemvBF16.
func GemvBF16(n, k int, alpha float32, w []uint16, ldw int, x []float32, beta float32, y []float32) {
	defaultEngine.gemv(n, k, alpha, nil, w, ldw, x, beta, y)
}
