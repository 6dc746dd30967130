//go:build amd64 && !purego

#include "textflag.h"
#include "bf16_amd64.h"

// AVX512_BF16 micro-kernel for a 12×32 tile of C from BF16 operands:
//
//	acc[i][j] = sum over q < kq of A(i, q).lo*B(q, j).lo + A(i, q).hi*B(q, j).hi
//	C[i][j]   = alpha*acc[i][j] (+ beta*C[i][j] when beta != 0)
//
// where A(i, q) and B(q, j) are 32-bit words holding the BF16 values of
// k = 2q (low half) and k = 2q+1 (high half): A(i, q) at a + i*ars + q*aps
// and B(q, j) at b + q*bps + j (strides in words). One VDPBF16PS does two
// multiply-adds per fp32 lane (products are exact in fp32; the sums are
// rounded to nearest even, denormals flushed). Registers and loop
// structure as kernel12x32 (kernel512_amd64.s), with VPBROADCASTD of an A
// word in place of VBROADCASTSS.

// One step of p.
#define STEP \
	VMOVUPS      (BX), Z24;           \
	VMOVUPS      64(BX), Z25;         \
	ADDQ         R11, BX;             \
	VPBROADCASTD (AX), Z26; \
	VDPBF16PS_Z24_Z26_Z0; \
	VDPBF16PS_Z25_Z26_Z1; \
	VPBROADCASTD (AX)(R12*1), Z27; \
	VDPBF16PS_Z24_Z27_Z2; \
	VDPBF16PS_Z25_Z27_Z3; \
	VPBROADCASTD (AX)(R12*2), Z28; \
	VDPBF16PS_Z24_Z28_Z4; \
	VDPBF16PS_Z25_Z28_Z5; \
	VPBROADCASTD (R13), Z29; \
	VDPBF16PS_Z24_Z29_Z6; \
	VDPBF16PS_Z25_Z29_Z7; \
	VPBROADCASTD (R13)(R12*1), Z30; \
	VDPBF16PS_Z24_Z30_Z8; \
	VDPBF16PS_Z25_Z30_Z9; \
	VPBROADCASTD (R13)(R12*2), Z31; \
	VDPBF16PS_Z24_Z31_Z10; \
	VDPBF16PS_Z25_Z31_Z11; \
	VPBROADCASTD (R14), Z26; \
	VDPBF16PS_Z24_Z26_Z12; \
	VDPBF16PS_Z25_Z26_Z13; \
	VPBROADCASTD (R14)(R12*1), Z27; \
	VDPBF16PS_Z24_Z27_Z14; \
	VDPBF16PS_Z25_Z27_Z15; \
	VPBROADCASTD (R14)(R12*2), Z28; \
	VDPBF16PS_Z24_Z28_Z16; \
	VDPBF16PS_Z25_Z28_Z17; \
	VPBROADCASTD (R10), Z29; \
	VDPBF16PS_Z24_Z29_Z18; \
	VDPBF16PS_Z25_Z29_Z19; \
	VPBROADCASTD (R10)(R12*1), Z30; \
	VDPBF16PS_Z24_Z30_Z20; \
	VDPBF16PS_Z25_Z30_Z21; \
	VPBROADCASTD (R10)(R12*2), Z31; \
	VDPBF16PS_Z24_Z31_Z22; \
	VDPBF16PS_Z25_Z31_Z23; \
	ADDQ         R9, AX;              \
	ADDQ         R9, R13;             \
	ADDQ         R9, R14;             \
	ADDQ         R9, R10

// Zero the accumulators.
#define ZERO \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15; \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23

// func kernelBF16(tiles, kq int, a *uint32, ars, aps, anext int, b *uint32, bps int, c *float32, ldc int, alpha, beta float32)
TEXT ·kernelBF16(SB), NOSPLIT, $0-88
	MOVQ tiles+0(FP), DX
	MOVQ a+16(FP), SI
	MOVQ ars+24(FP), R12
	SHLQ $2, R12
	MOVQ aps+32(FP), R9
	SHLQ $2, R9
	MOVQ bps+56(FP), R11
	SHLQ $2, R11
	MOVQ c+64(FP), DI
	MOVQ ldc+72(FP), R8
	SHLQ $2, R8

tile:
	// A row pointers: rows 0, 3, 6, 9.
	MOVQ SI, AX
	LEAQ (R12)(R12*2), BX
	LEAQ (AX)(BX*1), R13
	LEAQ (R13)(BX*1), R14
	LEAQ (R14)(BX*1), R10

	// Touch the C tile early so its lines arrive during the loop.
	LEAQ       (R8)(R8*2), CX
	PREFETCHT0 (DI)
	PREFETCHT0 64(DI)
	PREFETCHT0 (DI)(R8*1)
	PREFETCHT0 64(DI)(R8*1)
	PREFETCHT0 (DI)(R8*2)
	PREFETCHT0 64(DI)(R8*2)
	PREFETCHT0 (DI)(CX*1)
	PREFETCHT0 64(DI)(CX*1)
	PREFETCHT0 (DI)(R8*4)
	PREFETCHT0 64(DI)(R8*4)
	LEAQ       (DI)(CX*2), BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	PREFETCHT0 (BX)(R8*1)
	PREFETCHT0 64(BX)(R8*1)
	PREFETCHT0 (BX)(R8*2)
	PREFETCHT0 64(BX)(R8*2)
	PREFETCHT0 (BX)(CX*1)
	PREFETCHT0 64(BX)(CX*1)
	PREFETCHT0 (BX)(R8*4)
	PREFETCHT0 64(BX)(R8*4)

	MOVQ b+48(FP), BX
	MOVQ kq+8(FP), CX
	ZERO

	// Main loop, unrolled by 4 steps of q.
	CMPQ CX, $4
	JLT  tail

loop4:
	STEP
	STEP
	STEP
	STEP
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  loop4

tail:
	TESTQ CX, CX
	JZ    done

loop1:
	STEP
	DECQ CX
	JNZ  loop1

done:
	// C row pointers: rows 0 (DI), 3 (R10), 6 (R13), 9 (R14).
	LEAQ (R8)(R8*2), AX
	LEAQ (DI)(AX*1), R10
	LEAQ (R10)(AX*1), R13
	LEAQ (R13)(AX*1), R14

	// acc *= alpha
	VBROADCASTSS alpha+80(FP), Z31
	VMULPS       Z31, Z0, Z0
	VMULPS       Z31, Z1, Z1
	VMULPS       Z31, Z2, Z2
	VMULPS       Z31, Z3, Z3
	VMULPS       Z31, Z4, Z4
	VMULPS       Z31, Z5, Z5
	VMULPS       Z31, Z6, Z6
	VMULPS       Z31, Z7, Z7
	VMULPS       Z31, Z8, Z8
	VMULPS       Z31, Z9, Z9
	VMULPS       Z31, Z10, Z10
	VMULPS       Z31, Z11, Z11
	VMULPS       Z31, Z12, Z12
	VMULPS       Z31, Z13, Z13
	VMULPS       Z31, Z14, Z14
	VMULPS       Z31, Z15, Z15
	VMULPS       Z31, Z16, Z16
	VMULPS       Z31, Z17, Z17
	VMULPS       Z31, Z18, Z18
	VMULPS       Z31, Z19, Z19
	VMULPS       Z31, Z20, Z20
	VMULPS       Z31, Z21, Z21
	VMULPS       Z31, Z22, Z22
	VMULPS       Z31, Z23, Z23

	// beta == +0 or -0: overwrite C without reading it.
	MOVL beta+84(FP), CX
	ANDL $0x7fffffff, CX
	JZ   store

	VBROADCASTSS beta+84(FP), Z31
	VFMADD231PS  (DI), Z31, Z0
	VFMADD231PS  64(DI), Z31, Z1
	VFMADD231PS  (DI)(R8*1), Z31, Z2
	VFMADD231PS  64(DI)(R8*1), Z31, Z3
	VFMADD231PS  (DI)(R8*2), Z31, Z4
	VFMADD231PS  64(DI)(R8*2), Z31, Z5
	VFMADD231PS  (R10), Z31, Z6
	VFMADD231PS  64(R10), Z31, Z7
	VFMADD231PS  (R10)(R8*1), Z31, Z8
	VFMADD231PS  64(R10)(R8*1), Z31, Z9
	VFMADD231PS  (R10)(R8*2), Z31, Z10
	VFMADD231PS  64(R10)(R8*2), Z31, Z11
	VFMADD231PS  (R13), Z31, Z12
	VFMADD231PS  64(R13), Z31, Z13
	VFMADD231PS  (R13)(R8*1), Z31, Z14
	VFMADD231PS  64(R13)(R8*1), Z31, Z15
	VFMADD231PS  (R13)(R8*2), Z31, Z16
	VFMADD231PS  64(R13)(R8*2), Z31, Z17
	VFMADD231PS  (R14), Z31, Z18
	VFMADD231PS  64(R14), Z31, Z19
	VFMADD231PS  (R14)(R8*1), Z31, Z20
	VFMADD231PS  64(R14)(R8*1), Z31, Z21
	VFMADD231PS  (R14)(R8*2), Z31, Z22
	VFMADD231PS  64(R14)(R8*2), Z31, Z23

store:
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, (DI)(R8*1)
	VMOVUPS Z3, 64(DI)(R8*1)
	VMOVUPS Z4, (DI)(R8*2)
	VMOVUPS Z5, 64(DI)(R8*2)
	VMOVUPS Z6, (R10)
	VMOVUPS Z7, 64(R10)
	VMOVUPS Z8, (R10)(R8*1)
	VMOVUPS Z9, 64(R10)(R8*1)
	VMOVUPS Z10, (R10)(R8*2)
	VMOVUPS Z11, 64(R10)(R8*2)
	VMOVUPS Z12, (R13)
	VMOVUPS Z13, 64(R13)
	VMOVUPS Z14, (R13)(R8*1)
	VMOVUPS Z15, 64(R13)(R8*1)
	VMOVUPS Z16, (R13)(R8*2)
	VMOVUPS Z17, 64(R13)(R8*2)
	VMOVUPS Z18, (R14)
	VMOVUPS Z19, 64(R14)
	VMOVUPS Z20, (R14)(R8*1)
	VMOVUPS Z21, 64(R14)(R8*1)
	VMOVUPS Z22, (R14)(R8*2)
	VMOVUPS Z23, 64(R14)(R8*2)

	// Next tile: A by anext elements, C down twelve rows (R14 + 3*ldc).
	MOVQ anext+40(FP), CX
	LEAQ (SI)(CX*4), SI
	LEAQ (R14)(AX*1), DI
	DECQ DX
	JNZ  tile
	VZEROUPPER
	RET


// func dpbf16Peak(n int)
//
// Runs n iterations of 24 independent VDPBF16PS on registers only: the
// BF16 dot-product ceiling of one core (4 flops per lane per instruction).
TEXT ·dpbf16Peak(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
	ZERO
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31

peak:
	VDPBF16PS_Z30_Z31_Z0
	VDPBF16PS_Z30_Z31_Z1
	VDPBF16PS_Z30_Z31_Z2
	VDPBF16PS_Z30_Z31_Z3
	VDPBF16PS_Z30_Z31_Z4
	VDPBF16PS_Z30_Z31_Z5
	VDPBF16PS_Z30_Z31_Z6
	VDPBF16PS_Z30_Z31_Z7
	VDPBF16PS_Z30_Z31_Z8
	VDPBF16PS_Z30_Z31_Z9
	VDPBF16PS_Z30_Z31_Z10
	VDPBF16PS_Z30_Z31_Z11
	VDPBF16PS_Z30_Z31_Z12
	VDPBF16PS_Z30_Z31_Z13
	VDPBF16PS_Z30_Z31_Z14
	VDPBF16PS_Z30_Z31_Z15
	VDPBF16PS_Z30_Z31_Z16
	VDPBF16PS_Z30_Z31_Z17
	VDPBF16PS_Z30_Z31_Z18
	VDPBF16PS_Z30_Z31_Z19
	VDPBF16PS_Z30_Z31_Z20
	VDPBF16PS_Z30_Z31_Z21
	VDPBF16PS_Z30_Z31_Z22
	VDPBF16PS_Z30_Z31_Z23
	DECQ CX
	JNZ  peak
	VZEROUPPER
	RET

// func cvtBF16(n32 int, src *float32, dst *uint16)
//
// dst[i] = the BF16 value nearest src[i] (ties to even; NaN stays NaN) for
// i < 32*n32.
TEXT ·cvtBF16(SB), NOSPLIT, $0-24
	MOVQ n32+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ dst+16(FP), DI

cvt:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VCVTNE2PS2BF16_Z0_Z1_Z2
	VMOVDQU32 Z2, (DI)
	ADDQ    $128, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     cvt
	VZEROUPPER
	RET
