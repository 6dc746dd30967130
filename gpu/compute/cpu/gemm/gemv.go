package gemm

import (
	"math"
	"sync"

	"troupe/gpu/compute/cpu/internal/par"
)

// Gemv computes y = alpha*W·x + beta*y for a float32 matrix W of n rows and
// k columns (row stride ldw; a PyTorch Linear's [out, in] weight) and x
// (length k), y (length n): a decode step's matrix–vector product on the
// weight as stored. Packing W for the blocked kernel, as Sgemm does for
// any product, would read and write all of it to feed one row; here W
// streams once through four-row dot products (gemvF32x4, AVX2). Large
// products split the rows across e's goroutines. With beta == 0, y is
// only written. Sgemm takes this path for fewer than rowsMaxM rows with B
// transposed.
func (e *Engine) Gemv(n, k int, alpha float32, w []float32, ldw int, x []float32, beta float32, y []float32) {
	e.gemv(n, k, alpha, w, nil, ldw, x, beta, y)
}

// Gemv is Default().Gemv.
func Gemv(n, k int, alpha float32, w []float32, ldw int, x []float32, beta float32, y []float32) {
	defaultEngine.gemv(n, k, alpha, w, nil, ldw, x, beta, y)
}

// gemvParMin is the smallest matrix (elements) Gemv and GemvBF16 split
// across goroutines: 64K elements stream in about 10-20 µs on one core, ten
// times a fork/join, and a decode step's smaller projections (SmolLM2's
// q, k, v and o) are of that size; left to one core they read at half the
// machine's bandwidth.
const gemvParMin = 1 << 16

// gemv is Gemv (wF) and GemvBF16 (wH): exactly one of the two is set.
func (e *Engine) gemv(n, k int, alpha float32, wF []float32, wH []uint16, ldw int, x []float32, beta float32, y []float32) {
	if n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(1, n, beta, y, n)
		return
	}
	if wF != nil {
		_ = wF[(n-1)*ldw+k-1]
	} else {
		_ = wH[(n-1)*ldw+k-1]
	}
	_ = x[k-1]
	_ = y[n-1]
	if parts := min(e.threads, n/64); parts > 1 && n*k >= gemvParMin {
		j := gvPool.Get().(*gvJob)
		*j = gvJob{parts: parts, n: n, k: k, alpha: alpha, wF: wF, wH: wH, ldw: ldw, x: x, beta: beta, y: y}
		par.Run(parts, j)
		*j = gvJob{}
		gvPool.Put(j)
		return
	}
	gemvRange(0, n, k, alpha, wF, wH, ldw, x, beta, y)
}

type gvJob struct {
	parts, n, k int
	alpha, beta float32
	wF          []float32
	wH          []uint16
	ldw         int
	x, y        []float32
}

var gvPool = sync.Pool{New: func() any { return new(gvJob) }}

func (j *gvJob) Run(t int) {
	r0, r1 := groupRange(t, j.parts, j.n)
	gemvRange(r0, r1, j.k, j.alpha, j.wF, j.wH, j.ldw, j.x, j.beta, j.y)
}

// groupRange is part t's share [r0, r1) of n weight rows split into parts
// of whole 4-row groups, so that the assembly (gemvF32x4, dot4x4) sees
// full groups everywhere but at the end.
func groupRange(t, parts, n int) (int, int) {
	g := (n + 3) / 4
	return min(t*g/parts*4, n), min((t+1)*g/parts*4, n)
}

// gemvRange computes rows [r0, r1) of gemv: four rows at a time in
// assembly, the rest (and every row where it cannot run) in Go.
func gemvRange(r0, r1, k int, alpha float32, wF []float32, wH []uint16, ldw int, x []float32, beta float32, y []float32) {
	var dots [4]float32
	for r := r0; r < r1; r += 4 {
		rows := min(4, r1-r)
		done := 0
		switch {
		case rows < 4:
			dots = [4]float32{}
		case wF != nil:
			done = gemvF32x4Asm(k, wF[r*ldw:], ldw, x, &dots)
		default:
			done = gemvBF16x4Asm(k, wH[r*ldw:], ldw, x, &dots)
		}
		for i := 0; i < rows; i++ {
			s := dots[i]
			if wF != nil {
				for p, v := range wF[(r+i)*ldw+done : (r+i)*ldw+k] {
					s += v * x[done+p]
				}
			} else {
				for p, h := range wH[(r+i)*ldw+done : (r+i)*ldw+k] {
					s += math.Float32frombits(uint32(h)<<16) * x[done+p]
				}
			}
			if beta == 0 {
				y[r+i] = alpha * s
			} else {
				y[r+i] = alpha*s + beta*y[r+i]
			}
		}
	}
}

// gemvRows is Sgemm for m < rowsMaxM rows with B transposed: a Gemv per
// row of op(A) (gathered when A is transposed). The tests turn e.gemvPath
// off to check the blocked kernel on those shapes too.
func (e *Engine) gemvRows(transA bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	var x []float32
	if transA {
		buf := prePool.Get().(*[]float32)
		defer prePool.Put(buf)
		*buf = grow(*buf, k)
		x = (*buf)[:k]
	}
	for i := 0; i < m; i++ {
		if transA {
			for p := range x {
				x[p] = a[p*lda+i]
			}
		} else {
			x = a[i*lda : i*lda+k]
		}
		e.Gemv(n, k, alpha, b, ldb, x, beta, c[i*ldc:i*ldc+n])
	}
}
