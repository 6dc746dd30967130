// Package gemm is the float32 matrix multiply (SGEMM) used by the CPU compute
// backend: C = alpha*op(A)*op(B) + beta*C on row-major matrices, with op(X)
// either X or Xᵀ, so forward (NN), input-gradient (NT) and weight-gradient
// (TN) products of a linear layer all take the fast path.
//
// Sgemm is the fast entry point; Reference is the plain triple loop it is
// tested against. Sgemm trusts its arguments (callers are internal to the
// project); use Check first when the arguments come from outside.
//
// How it is fast (BLIS/GotoBLAS scheme, tuned for Zen3: 32 KiB L1d, 512 KiB
// L2): C is computed in 6×16 tiles by an AVX2+FMA micro-kernel in Go
// assembly (kernel_amd64.s) holding the tile in twelve YMM accumulators.
// Transposed operands are packed into contiguous panels (AVX packing code in
// pack_amd64.s; B is packed too except in NN products of at most 48 rows,
// which read it in place; A is read in place
// when not transposed), with cache blocking kc=256, mc=96, nc=2048. Edge
// tiles go through a zero-padded scratch tile. Products with fewer than six
// rows and B not transposed (generation with batch 1) use a row kernel that
// streams B in place (gemv_amd64.s). Large products are split across
// Threads() goroutines (persistent workers, pooled buffers: steady-state
// calls do not allocate).
//
// The assembly needs AVX2 and FMA, detected at run time with
// golang.org/x/sys/cpu; other CPUs, other architectures and builds with the
// purego tag use a pure-Go micro-kernel with the same blocking. There is no
// AVX-512 kernel (the development machine has no AVX-512 to test one on).
package gemm

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
)

// ErrBadArgs is wrapped by every error Check returns.
var ErrBadArgs = errors.New("gemm: bad arguments")

var threads atomic.Int64

func init() { threads.Store(int64(runtime.GOMAXPROCS(0))) }

// SetThreads sets how many goroutines one Sgemm call may use. Values below 1
// mean 1. The default is runtime.GOMAXPROCS(0) at package initialisation.
func SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	threads.Store(int64(n))
}

// Threads reports how many goroutines one Sgemm call may use.
func Threads() int { return int(threads.Load()) }

// Check validates Sgemm arguments: non-negative sizes, row strides at least
// the stored row length, and slices long enough for the strided matrices.
// Sgemm requires arguments that pass Check; it does not re-validate them.
func Check(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("%w: negative size m=%d n=%d k=%d", ErrBadArgs, m, n, k)
	}
	// Stored shapes (rows × cols) before op.
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	if err := checkMat("A", a, ar, ac, lda); err != nil {
		return err
	}
	if err := checkMat("B", b, br, bc, ldb); err != nil {
		return err
	}
	return checkMat("C", c, m, n, ldc)
}

func checkMat(name string, x []float32, rows, cols, ld int) error {
	return checkLen(name, len(x), rows, cols, ld)
}

// checkLen checks a strided rows×cols matrix stored in n elements.
func checkLen(name string, n, rows, cols, ld int) error {
	if ld < max(cols, 1) {
		return fmt.Errorf("%w: ld%s=%d smaller than %d columns", ErrBadArgs, name, ld, cols)
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	if need := (rows-1)*ld + cols; n < need {
		return fmt.Errorf("%w: %s has %d elements, needs %d (%d×%d, ld=%d)", ErrBadArgs, name, n, need, rows, cols, ld)
	}
	return nil
}

// Reference computes the same as Sgemm with the obvious triple loop,
// accumulating in float32. It is slow and meant only to test against.
func Reference(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			ci := i*ldc + j
			if beta == 0 {
				c[ci] = alpha * s // beta == 0 means C is not read (may hold NaN)
			} else {
				c[ci] = alpha*s + beta*c[ci]
			}
		}
	}
}

// Sgemm computes C = alpha*op(A)*op(B) + beta*C, row-major, op(X) = X or Xᵀ
// when transX is true. A is m×k after op, B is k×n after op, C is m×n;
// lda/ldb/ldc are row strides of the stored matrices. With beta == 0, C is
// only written, never read (NaNs in C do not propagate); with alpha == 0 or
// k == 0, A and B are not read. C must not overlap A or B. Arguments must
// pass Check; Sgemm does not validate them. Safe for concurrent use.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil)
}

// SgemmBias computes C = alpha*op(A)*op(B) + bias, where bias (length n) is
// added to every row: the linear layer's forward in one call. It rounds as
// Sgemm with beta 1 on C filled with bias does; each parallel part fills its
// own block of C just before computing it, so C is written by one core
// only. Arguments must pass Check, and len(bias) >= n.
func SgemmBias(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, bias []float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, 1, c, ldc, bias[:n])
}
