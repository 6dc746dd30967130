//go:build !amd64 || purego

package gemm

// hasAsm is false: this build has no assembly kernel.
const hasAsm = false

func asmKernel(k int, a *float32, b *float32, ldb int, c *float32, ldc int, beta float32) {
	panic("gemm: assembly kernel not built") // unreachable: hasAsm is false
}
