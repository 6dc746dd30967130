//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

// kernel6x16 is the AVX2+FMA micro-kernel in kernel_amd64.s; see there for
// the exact contract. It needs k ≥ 0 and a 6×16 writable tile at c.
//
//go:noescape
func kernel6x16(k int, a *float32, b *float32, ldb int, c *float32, ldc int, beta float32)

// hasAsm reports whether this CPU can run the assembly kernel (AVX2 and FMA,
// with OS support for YMM state, which x/sys/cpu folds into HasAVX2).
var hasAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

func asmKernel(k int, a *float32, b *float32, ldb int, c *float32, ldc int, beta float32) {
	kernel6x16(k, a, b, ldb, c, ldc, beta)
}
