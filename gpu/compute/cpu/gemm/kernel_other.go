//go:build !amd64 || purego

package gemm

func asmKernels() []*kernel { return nil }

func packBTAsm(kn *kernel, d, src []float32, ld, kc, pitch int) int { return 0 }

func rowAsm(kn *kernel, k int, a []float32, aps int, b []float32, bps int, c []float32, n int, alpha, beta float32) int {
	return 0
}

func packBNAsm(kn *kernel, d, src []float32, ld, kc int) bool { return false }

const (
	hasBF16   = false
	hasAVX512 = false // dotOK: the dot-product tiles are AVX-512 only
)

func cvtBF16Asm(dst []uint16, src []float32) int { return 0 }

func packBTbfAsm(d []uint32, src []uint16, ldb, kc int) int { return 0 }

func gemvBF16x4Asm(k int, w []uint16, ldw int, x []float32, dots *[4]float32) int { return 0 }

func kernelBF16Asm(tiles, kq int, a []uint32, ars, aps, anext int, b []uint32, bps int, c []float32, ldc int, alpha, beta float32) {
	panic("gemm: BF16 kernel not built") // unreachable: hasBF16 is false
}

func packBNbfAsm(d []uint32, src []uint16, ldb, kq int) int { return 0 }

func gemvF32x4Asm(k int, w []float32, ldw int, x []float32, dots *[4]float32) int {
	*dots = [4]float32{}
	return 0
}

func dot4x4Asm(k int, a []float32, lda int, w []float32, ldw int, c *[16]float32) int {
	*c = [16]float32{}
	return 0
}
