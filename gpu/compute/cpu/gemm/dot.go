package gemm

import (
	"sync"

	"troupe/gpu/compute/cpu/internal/par"
)

// dotMaxM bounds the rows of the products Sgemm computes in dot-product
// form (dotNT): A·Wᵀ with W as stored, no packing. Over 30 layers of
// SmolLM2-135M's matrices (weights cold, as in a decode step, Zen 5, two
// threads) the tiles took 13.5 / 18 / 22 / 26-28 / 31 / 35 / 39-41 ms at
// 8 / 16 / 32 / 40 / 48 / 56 / 64 rows, the blocked kernel, which packs
// all of W first, 25-31 / 37 / 30 / 35 / 33-35 / 40 / 44-45 ms.
const dotMaxM = 65

// dotOK says whether Sgemm sends products of rowsMaxM..dotMaxM-1 rows, A
// not transposed and B transposed, to dotNT: on CPUs with AVX-512 under
// the avx512 kernel, unless the tests turned e.dotPath off.
func (e *Engine) dotOK() bool { return e.dotPath && hasAVX512 && e.kn.isa == "avx512" }

// dotNT computes C = alpha·A·Wᵀ + beta·C for A (m×k, row stride lda) and W
// (n×k, a Linear's [out, in] weight, row stride ldw): 4×4 tiles of dot
// products (dot4x4), W's rows in groups of four on the outside so that
// each weight streams from memory once and the A rows it meets come from
// cache. A batched decode step and a short prompt's prefill are such
// products. Large products split W's rows across e's goroutines.
func (e *Engine) dotNT(m, n, k int, alpha float32, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	if parts := min(e.threads, n/16); parts > 1 && m*n*k >= parMinWork {
		j := dotPool.Get().(*dotJob)
		*j = dotJob{parts: parts, m: m, n: n, k: k, alpha: alpha, a: a, lda: lda, w: w, ldw: ldw, beta: beta, c: c, ldc: ldc}
		par.Run(parts, j)
		*j = dotJob{}
		dotPool.Put(j)
		return
	}
	dotRange(0, n, m, k, alpha, a, lda, w, ldw, beta, c, ldc)
}

type dotJob struct {
	parts, m, n, k int
	alpha, beta    float32
	a, w, c        []float32
	lda, ldw, ldc  int
}

var dotPool = sync.Pool{New: func() any { return new(dotJob) }}

func (j *dotJob) Run(t int) {
	r0, r1 := groupRange(t, j.parts, j.n)
	dotRange(r0, r1, j.m, j.k, j.alpha, j.a, j.lda, j.w, j.ldw, j.beta, j.c, j.ldc)
}

// dotRange computes columns [j0, j1) of C (rows j0..j1-1 of W): 4×4 tiles
// in assembly, W's last n%4 rows and the k%16 tail in Go. A's last m%4
// rows go through the same tiles from a zero-padded copy, so that a row's
// sums do not depend on how many rows share the product (a sequence's
// log-probs are the same alone and in a batch: TestLoRAMixedBatch).
func dotRange(j0, j1, m, k int, alpha float32, a []float32, lda int, w []float32, ldw int, beta float32, c []float32, ldc int) {
	var tile [16]float32
	m4 := m / 4 * 4
	var pad []float32
	if m4 < m {
		buf := prePool.Get().(*[]float32)
		defer prePool.Put(buf)
		*buf = grow(*buf, 4*k)
		pad = (*buf)[:4*k]
		clear(pad)
		for i := m4; i < m; i++ {
			copy(pad[(i-m4)*k:(i-m4+1)*k], a[i*lda:i*lda+k])
		}
	}
	put := func(i, j int, s float32) {
		if beta == 0 {
			c[i*ldc+j] = alpha * s
		} else {
			c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
		}
	}
	dot := func(x, y []float32) float32 {
		var s float32
		for p, v := range x {
			s += v * y[p]
		}
		return s
	}
	j := j0
	for ; j+4 <= j1; j += 4 {
		for i := 0; i < m; i += 4 {
			rows, ai, lda := min(4, m-i), a[i*lda:], lda
			if rows < 4 {
				ai, lda = pad, k
			}
			done := dot4x4Asm(k, ai, lda, w[j*ldw:], ldw, &tile)
			if done == k && beta == 0 && rows == 4 { // the common case, without the calls
				for ii := 0; ii < 4; ii++ {
					row := c[(i+ii)*ldc+j : (i+ii)*ldc+j+4]
					t := tile[4*ii : 4*ii+4]
					row[0], row[1], row[2], row[3] = alpha*t[0], alpha*t[1], alpha*t[2], alpha*t[3]
				}
				continue
			}
			for ii := 0; ii < rows; ii++ {
				for jj := 0; jj < 4; jj++ {
					s := tile[4*ii+jj] + dot(ai[ii*lda+done:ii*lda+k], w[(j+jj)*ldw+done:])
					put(i+ii, j+jj, s)
				}
			}
		}
	}
	for ; j < j1; j++ {
		for i := 0; i < m; i++ {
			put(i, j, dot(a[i*lda:i*lda+k], w[j*ldw:]))
		}
	}
}
