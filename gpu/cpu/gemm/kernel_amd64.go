//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

// kernel6x16 is the AVX2+FMA micro-kernel in kernel_amd64.s; see there for
// the exact contract. It needs tiles ≥ 1, k ≥ 1 and writable 6×16 tiles.
//
//go:noescape
func kernel6x16(tiles, k int, a *float32, ars, aps, anext int, b *float32, bps int, c *float32, ldc int, alpha, beta float32)

// hasAsm reports whether this CPU can run the assembly kernel (AVX2 and FMA,
// with OS support for YMM state, which x/sys/cpu folds into HasAVX2).
var hasAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

func asmKernel(tiles, k int, a *float32, ars, aps, anext int, b *float32, bps int, c *float32, ldc int, alpha, beta float32) {
	kernel6x16(tiles, k, a, ars, aps, anext, b, bps, c, ldc, alpha, beta)
}

// fmaPeak runs n×12 register-only 8-wide FMAs (see kernel_amd64.s); only
// benchmarks use it.
//
//go:noescape
func fmaPeak(n int)
