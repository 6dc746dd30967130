//go:build amd64 && !purego

package gemm

// Declarations and bounds-checked wrappers for the packing and
// few-rows assembly in pack_amd64.s and gemv_amd64.s.

//go:noescape
func packBT16(blocks int, src *float32, ld int, dst *float32, pitch int)

//go:noescape
func packAT6(blocks, panels int, src *float32, ld int, dst *float32, pitch int)

//go:noescape
func packAT12(blocks, panels int, src *float32, ld int, dst *float32, pitch int)

// packBTAsm packs 16 columns of a transposed B panel (see packB) into d
// (row pitch `pitch` elements) for p < kc rounded down to 8 and returns
// how many p it did.
func packBTAsm(kn *kernel, d, src []float32, ld, kc, pitch int) int {
	blocks := kc / 8
	if !kn.asm || blocks == 0 {
		return 0
	}
	_ = src[15*ld+blocks*8-1]
	_ = d[(blocks*8-1)*pitch+15]
	packBT16(blocks, &src[0], ld, &d[0], pitch)
	return blocks * 8
}

// packAT6Asm and packAT12Asm pack `panels` full 6- or 12-row panels of a
// transposed A (see packA) for p < kc rounded down to 8 and return how
// many p they did.
func packAT6Asm(d, src []float32, ld, kc, panels int) int {
	blocks := kc / 8
	if blocks == 0 || panels == 0 {
		return 0
	}
	_ = src[(blocks*8-1)*ld+panels*6-1]
	_ = d[(panels-1)*6*kc+blocks*8*6-1]
	packAT6(blocks, panels, &src[0], ld, &d[0], 6*kc)
	return blocks * 8
}

func packAT12Asm(d, src []float32, ld, kc, panels int) int {
	blocks := kc / 8
	if blocks == 0 || panels == 0 {
		return 0
	}
	_ = src[(blocks*8-1)*ld+panels*12-1]
	_ = d[(panels-1)*12*kc+blocks*8*12-1]
	packAT12(blocks, panels, &src[0], ld, &d[0], 12*kc)
	return blocks * 8
}

//go:noescape
func gemvRow(k int, a *float32, aps int, b *float32, bps int, c *float32, n16 int, alpha, beta float32)

// rowAsm computes c[j] = alpha*Σp a[p*aps]*b[p*bps+j] + beta*c[j] for
// j < n rounded down to 16 and returns how many columns it did.
func rowAsm(kn *kernel, k int, a []float32, aps int, b []float32, bps int, c []float32, n int, alpha, beta float32) int {
	n16 := n / 16
	if !kn.asm || n16 == 0 || k == 0 {
		return 0
	}
	_ = a[(k-1)*aps]
	_ = b[(k-1)*bps+n16*16-1]
	_ = c[n16*16-1]
	gemvRow(k, &a[0], aps, &b[0], bps, &c[0], n16, alpha, beta)
	return n16 * 16
}

//go:noescape
func packBN(rows int, src *float32, ld int, dst *float32, width int)

// packBNAsm packs a full nr-column panel of a row-major B (see packB) and
// reports whether it did.
func packBNAsm(kn *kernel, d, src []float32, ld, kc int) bool {
	if !kn.asm || kc == 0 {
		return false
	}
	_ = src[(kc-1)*ld+kn.nr-1]
	_ = d[kc*kn.nr-1]
	packBN(kc, &src[0], ld, &d[0], kn.nr)
	return true
}

//go:noescape
func gemvF32x4(k16 int, w *float32, ldw int, x *float32, dots *[4]float32)

// gemvF32x4Asm sets dots[i] to the dot product of x with row i of W (i < 4,
// row stride ldw) over p < k rounded down to 16 and returns how many p.
func gemvF32x4Asm(k int, w []float32, ldw int, x []float32, dots *[4]float32) int {
	k16 := k / 16
	if !hasAVX2 || k16 == 0 {
		*dots = [4]float32{}
		return 0
	}
	_ = w[3*ldw+k16*16-1]
	_ = x[k16*16-1]
	gemvF32x4(k16, &w[0], ldw, &x[0], dots)
	return k16 * 16
}

//go:noescape
func dot4x4(k16 int, a *float32, lda int, w *float32, ldw int, c *[16]float32)

// dot4x4Asm sets c[4i+j] to the dot product of rows i of A and j of W (i, j
// < 4) over p < k rounded down to 16 and returns how many p (0 without
// AVX-512).
func dot4x4Asm(k int, a []float32, lda int, w []float32, ldw int, c *[16]float32) int {
	k16 := k / 16
	if !hasAVX512 || k16 == 0 {
		*c = [16]float32{}
		return 0
	}
	_ = a[3*lda+k16*16-1]
	_ = w[3*ldw+k16*16-1]
	dot4x4(k16, &a[0], lda, &w[0], ldw, c)
	return k16 * 16
}
