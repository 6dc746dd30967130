//go:build amd64 && !purego

package gemm

// Declarations and bounds-checked wrappers for the BF16 assembly
// (kernelbf16_amd64.s, gemvbf16_amd64.s, pack_amd64.s).

//go:noescape
func kernelBF16(tiles, kq int, a *uint32, ars, aps, anext int, b *uint32, bps int, c *float32, ldc int, alpha, beta float32)

//go:noescape
func dpbf16Peak(n int)

//go:noescape
func cvtBF16(n32 int, src *float32, dst *uint16)

//go:noescape
func packBT16w(blocks int, src *uint16, ld int, dst *uint32, pitch int)

//go:noescape
func gemvBF16x4(k16 int, w *uint16, ldw int, x *float32, dots *[4]float32)

func kernelBF16Asm(tiles, kq int, a []uint32, ars, aps, anext int, b []uint32, bps int, c []float32, ldc int, alpha, beta float32) {
	_ = a[(tiles-1)*anext+(bfMR-1)*ars+(kq-1)*aps]
	_ = b[(kq-1)*bps+bfNR-1]
	_ = c[(tiles*bfMR-1)*ldc+bfNR-1]
	kernelBF16(tiles, kq, &a[0], ars, aps, anext, &b[0], bps, &c[0], ldc, alpha, beta)
}

// cvtBF16Asm rounds src to BF16 for len(src) rounded down to 32 and
// returns how many it did.
func cvtBF16Asm(dst []uint16, src []float32) int {
	n32 := len(src) / 32
	if !hasBF16 || n32 == 0 {
		return 0
	}
	_ = dst[n32*32-1]
	cvtBF16(n32, &src[0], &dst[0])
	return n32 * 32
}

// packBTbfAsm packs 16 columns of a BF16 B panel from 16 rows of a
// transposed B (row stride ldb elements, even) for word pairs q < kc/2
// rounded down to 8, into d with a 32-word pitch, and returns how many
// words it did.
func packBTbfAsm(d []uint32, src []uint16, ldb, kc int) int {
	blocks := kc / 2 / 8
	if !hasAVX2 || blocks == 0 {
		return 0
	}
	_ = src[15*ldb+blocks*16-1]
	_ = d[(blocks*8-1)*bfNR+15]
	packBT16w(blocks, &src[0], ldb/2, &d[0], bfNR)
	return blocks * 8
}

// gemvBF16x4Asm sets dots[i] to the dot product of x with row i of W (i < 4,
// row stride ldw) over p < k rounded down to 16 and returns how many p.
func gemvBF16x4Asm(k int, w []uint16, ldw int, x []float32, dots *[4]float32) int {
	k16 := k / 16
	if !hasAVX2 || k16 == 0 {
		*dots = [4]float32{}
		return 0
	}
	_ = w[3*ldw+k16*16-1]
	_ = x[k16*16-1]
	gemvBF16x4(k16, &w[0], ldw, &x[0], dots)
	return k16 * 16
}

//go:noescape
func packBNbf(kq int, src *uint16, ld int, dst *uint32)

// packBNbfAsm packs a full 32-column panel of a row-major BF16 B (row
// stride ldb) for the kq pairs of rows 2q, 2q+1 (see packBbf) and returns
// how many pairs it did.
func packBNbfAsm(d []uint32, src []uint16, ldb, kq int) int {
	if !hasAVX2 || kq == 0 {
		return 0
	}
	_ = src[(2*kq-1)*ldb+bfNR-1]
	_ = d[kq*bfNR-1]
	packBNbf(kq, &src[0], ldb, &d[0])
	return kq
}
