//go:build amd64 && !purego

package gemm

// Declarations and bounds-checked wrappers for the packing and
// few-rows assembly in pack_amd64.s and gemv_amd64.s.

//go:noescape
func packBT16(blocks int, src *float32, ld int, dst *float32)

//go:noescape
func packAT6(blocks, panels int, src *float32, ld int, dst *float32, pitch int)

// packBTAsm packs a full transposed 16-column B panel (see packB) for
// p < kc rounded down to 8 and returns how many p it did.
func packBTAsm(d, src []float32, ld, kc int) int {
	blocks := kc / 8
	if !useAsm || blocks == 0 {
		return 0
	}
	_ = src[(nr-1)*ld+blocks*8-1]
	_ = d[blocks*8*nr-1]
	packBT16(blocks, &src[0], ld, &d[0])
	return blocks * 8
}

// packATAsm packs `panels` full 6-row panels of a transposed A (see packA)
// for p < kc rounded down to 8 and returns how many p it did.
func packATAsm(d, src []float32, ld, kc, panels int) int {
	blocks := kc / 8
	if !useAsm || blocks == 0 || panels == 0 {
		return 0
	}
	_ = src[(blocks*8-1)*ld+panels*mr-1]
	_ = d[(panels-1)*mr*kc+blocks*8*mr-1]
	packAT6(blocks, panels, &src[0], ld, &d[0], mr*kc)
	return blocks * 8
}

//go:noescape
func gemvRow(k int, a *float32, aps int, b *float32, bps int, c *float32, n16 int, alpha, beta float32)

// rowAsm computes c[j] = alpha*Σp a[p*aps]*b[p*bps+j] + beta*c[j] for
// j < n rounded down to 16 and returns how many columns it did.
func rowAsm(k int, a []float32, aps int, b []float32, bps int, c []float32, n int, alpha, beta float32) int {
	n16 := n / nr
	if !useAsm || n16 == 0 || k == 0 {
		return 0
	}
	_ = a[(k-1)*aps]
	_ = b[(k-1)*bps+n16*nr-1]
	_ = c[n16*nr-1]
	gemvRow(k, &a[0], aps, &b[0], bps, &c[0], n16, alpha, beta)
	return n16 * nr
}

//go:noescape
func packBN16(rows int, src *float32, ld int, dst *float32)

// packBNAsm packs a full 16-column panel of a row-major B (see packB) and
// reports whether it did.
func packBNAsm(d, src []float32, ld, kc int) bool {
	if !useAsm || kc == 0 {
		return false
	}
	_ = src[(kc-1)*ld+nr-1]
	_ = d[kc*nr-1]
	packBN16(kc, &src[0], ld, &d[0])
	return true
}
