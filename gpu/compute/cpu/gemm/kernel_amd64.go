//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

// kernel6x16 is the AVX2+FMA micro-kernel in kernel_amd64.s and kernel12x32
// the AVX-512F one in kernel512_amd64.s; see there for the exact contract.
// They need tiles ≥ 1, k ≥ 1 and writable tiles.
//
//go:noescape
func kernel6x16(tiles, k int, a *float32, ars, aps, anext int, b *float32, bps int, c *float32, ldc int, alpha, beta float32)

//go:noescape
func kernel12x32(tiles, k int, a *float32, ars, aps, anext int, b *float32, bps int, c *float32, ldc int, alpha, beta float32)

// hasAVX2 reports whether this CPU can run the AVX2 assembly (AVX2 and
// FMA, with OS support for YMM state, which x/sys/cpu folds into HasAVX2);
// hasAVX512 likewise for AVX-512F (ZMM and mask state enabled by the OS),
// and hasBF16 for AVX512_BF16 (VDPBF16PS, VCVTNE2PS2BF16).
var (
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL
	hasBF16   = hasAVX512 && cpu.X86.HasAVX512BF16
)

func asmKernels() []*kernel {
	var ks []*kernel
	if hasAVX512 {
		ks = append(ks, &kernel{isa: "avx512", mr: 12, nr: 32, fn: kernel512Slices, asm: true, packAT: packAT12Asm})
	}
	if hasAVX2 {
		ks = append(ks, &kernel{isa: "avx2", mr: 6, nr: 16, fn: kernel256Slices, asm: true, packAT: packAT6Asm})
	}
	return ks
}

// The wrappers index the last element each kernel touches: the driver
// guarantees the slices cover it, and a driver bug then panics on bounds
// instead of reading wild memory.

func kernel256Slices(tiles, k int, a []float32, ars, aps, anext int, b []float32, bps int, c []float32, ldc int, alpha, beta float32) {
	_ = a[(tiles-1)*anext+(6-1)*ars+(k-1)*aps]
	_ = b[(k-1)*bps+16-1]
	_ = c[(tiles*6-1)*ldc+16-1]
	kernel6x16(tiles, k, &a[0], ars, aps, anext, &b[0], bps, &c[0], ldc, alpha, beta)
}

func kernel512Slices(tiles, k int, a []float32, ars, aps, anext int, b []float32, bps int, c []float32, ldc int, alpha, beta float32) {
	_ = a[(tiles-1)*anext+(12-1)*ars+(k-1)*aps]
	_ = b[(k-1)*bps+32-1]
	_ = c[(tiles*12-1)*ldc+32-1]
	kernel12x32(tiles, k, &a[0], ars, aps, anext, &b[0], bps, &c[0], ldc, alpha, beta)
}

// fmaPeak runs n×12 register-only 8-wide FMAs and fmaPeak512 n×24
// 16-wide ones (kernel_amd64.s, kernel512_amd64.s); only benchmarks use
// them.
//
//go:noescape
func fmaPeak(n int)

//go:noescape
func fmaPeak512(n int)
