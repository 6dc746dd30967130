//go:build amd64 && !purego

package gemm

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
