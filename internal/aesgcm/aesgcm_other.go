//go:build !amd64 || purego

package aesgcm

const hasKernels = false

func expandKeyAsm(key *[16]byte, rk *[176]byte)                  { panic("unreachable") }
func ctrAsm(rk *[176]byte, ctr *[16]byte, dst, src *byte, n int) { panic("unreachable") }
func ghashAsm(h *[256]byte, acc *[16]byte, data *byte, n int)    { panic("unreachable") }
func sealAsm(rk *[176]byte, h *[256]byte, ctr, acc *[16]byte, dst, src *byte, n int) {
	panic("unreachable")
}
func openAsm(rk *[176]byte, h *[256]byte, ctr, acc *[16]byte, dst, src *byte, n int) {
	panic("unreachable")
}
