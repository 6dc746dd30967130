//go:build !amd64 || purego

package gemm

// hasAsm is false: this build has no assembly kernel.
const hasAsm = false

func asmKernel(tiles, k int, a *float32, ars, aps, anext int, b *float32, bps int, c *float32, ldc int, alpha, beta float32) {
	panic("gemm: assembly kernel not built") // unreachable: hasAsm is false
}

func packBTAsm(d, src []float32, ld, kc int) int { return 0 }

func packATAsm(d, src []float32, ld, kc, panels int) int { return 0 }

func rowAsm(k int, a []float32, aps int, b []float32, bps int, c []float32, n int, alpha, beta float32) int {
	return 0
}

func packBNAsm(d, src []float32, ld, kc int) bool { return false }
