//go:build amd64 && !purego

#include "textflag.h"

// func dot4x4(k16 int, a *float32, lda int, w *float32, ldw int, c *[16]float32)
//
// c[4i+j] = sum over p < 16*k16 of A[i][p] * W[j][p], i, j < 4: a 4×4 tile
// of C = A·Wᵀ with both operands read in place, row by row (A's rows at a +
// i*lda, W's at w + j*ldw, elements). This is gemvF32x4 for four rows of A
// at once: a product with a few rows (a batched decode step, a short
// prompt) reads every weight from memory once and from L1 for the other
// row groups, where the blocked kernel would pack all of W first. The
// sixteen sums are ZMM accumulators, reduced at the end; the loop
// prefetches the next four W rows (PREFETCHNTA, 256 bytes a step) as
// gemvF32x4 does.
//
// Registers: SI = &A[0][p], R10 = &A[3][p], R8 = lda bytes; DI = &W[0][p],
// R11 = &W[3][p], R9 = ldw bytes; CX = steps left; DX = prefetch pointer;
// Z16-Z19 W rows, Z20-Z23 A rows, Z(4i+j) the accumulators.
TEXT ·dot4x4(SB), NOSPLIT, $0-48
	MOVQ k16+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R10
	ADDQ SI, R10
	MOVQ w+24(FP), DI
	MOVQ ldw+32(FP), R9
	SHLQ $2, R9
	LEAQ (R9)(R9*2), R11
	ADDQ DI, R11
	LEAQ (DI)(R9*4), DX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13
	VXORPS Z14, Z14, Z14
	VXORPS Z15, Z15, Z15

loop:
	PREFETCHNTA (DX)
	PREFETCHNTA 64(DX)
	PREFETCHNTA 128(DX)
	PREFETCHNTA 192(DX)
	ADDQ        $256, DX
	VMOVUPS     (DI), Z16
	VMOVUPS     (DI)(R9*1), Z17
	VMOVUPS     (DI)(R9*2), Z18
	VMOVUPS     (R11), Z19
	VMOVUPS     (SI), Z20
	VMOVUPS     (SI)(R8*1), Z21
	VMOVUPS     (SI)(R8*2), Z22
	VMOVUPS     (R10), Z23
	VFMADD231PS Z16, Z20, Z0
	VFMADD231PS Z17, Z20, Z1
	VFMADD231PS Z18, Z20, Z2
	VFMADD231PS Z19, Z20, Z3
	VFMADD231PS Z16, Z21, Z4
	VFMADD231PS Z17, Z21, Z5
	VFMADD231PS Z18, Z21, Z6
	VFMADD231PS Z19, Z21, Z7
	VFMADD231PS Z16, Z22, Z8
	VFMADD231PS Z17, Z22, Z9
	VFMADD231PS Z18, Z22, Z10
	VFMADD231PS Z19, Z22, Z11
	VFMADD231PS Z16, Z23, Z12
	VFMADD231PS Z17, Z23, Z13
	VFMADD231PS Z18, Z23, Z14
	VFMADD231PS Z19, Z23, Z15
	ADDQ        $64, SI
	ADDQ        $64, R10
	ADDQ        $64, DI
	ADDQ        $64, R11
	DECQ        CX
	JNZ         loop

	// 16 lanes to 4 in each accumulator, then four accumulators to one
	// register of four sums (VHADDPS has no EVEX form: X0-X15 only).
	VEXTRACTF32X8 $1, Z0, Y16
	VADDPS        Y16, Y0, Y0
	VEXTRACTF32X8 $1, Z1, Y16
	VADDPS        Y16, Y1, Y1
	VEXTRACTF32X8 $1, Z2, Y16
	VADDPS        Y16, Y2, Y2
	VEXTRACTF32X8 $1, Z3, Y16
	VADDPS        Y16, Y3, Y3
	VEXTRACTF32X8 $1, Z4, Y16
	VADDPS        Y16, Y4, Y4
	VEXTRACTF32X8 $1, Z5, Y16
	VADDPS        Y16, Y5, Y5
	VEXTRACTF32X8 $1, Z6, Y16
	VADDPS        Y16, Y6, Y6
	VEXTRACTF32X8 $1, Z7, Y16
	VADDPS        Y16, Y7, Y7
	VEXTRACTF32X8 $1, Z8, Y16
	VADDPS        Y16, Y8, Y8
	VEXTRACTF32X8 $1, Z9, Y16
	VADDPS        Y16, Y9, Y9
	VEXTRACTF32X8 $1, Z10, Y16
	VADDPS        Y16, Y10, Y10
	VEXTRACTF32X8 $1, Z11, Y16
	VADDPS        Y16, Y11, Y11
	VEXTRACTF32X8 $1, Z12, Y16
	VADDPS        Y16, Y12, Y12
	VEXTRACTF32X8 $1, Z13, Y16
	VADDPS        Y16, Y13, Y13
	VEXTRACTF32X8 $1, Z14, Y16
	VADDPS        Y16, Y14, Y14
	VEXTRACTF32X8 $1, Z15, Y16
	VADDPS        Y16, Y15, Y15
	VEXTRACTF32X4 $1, Y0, X16
	VADDPS        X16, X0, X0
	VEXTRACTF32X4 $1, Y1, X16
	VADDPS        X16, X1, X1
	VEXTRACTF32X4 $1, Y2, X16
	VADDPS        X16, X2, X2
	VEXTRACTF32X4 $1, Y3, X16
	VADDPS        X16, X3, X3
	VEXTRACTF32X4 $1, Y4, X16
	VADDPS        X16, X4, X4
	VEXTRACTF32X4 $1, Y5, X16
	VADDPS        X16, X5, X5
	VEXTRACTF32X4 $1, Y6, X16
	VADDPS        X16, X6, X6
	VEXTRACTF32X4 $1, Y7, X16
	VADDPS        X16, X7, X7
	VEXTRACTF32X4 $1, Y8, X16
	VADDPS        X16, X8, X8
	VEXTRACTF32X4 $1, Y9, X16
	VADDPS        X16, X9, X9
	VEXTRACTF32X4 $1, Y10, X16
	VADDPS        X16, X10, X10
	VEXTRACTF32X4 $1, Y11, X16
	VADDPS        X16, X11, X11
	VEXTRACTF32X4 $1, Y12, X16
	VADDPS        X16, X12, X12
	VEXTRACTF32X4 $1, Y13, X16
	VADDPS        X16, X13, X13
	VEXTRACTF32X4 $1, Y14, X16
	VADDPS        X16, X14, X14
	VEXTRACTF32X4 $1, Y15, X16
	VADDPS        X16, X15, X15
	MOVQ c+40(FP), DI
	VHADDPS X1, X0, X0
	VHADDPS X3, X2, X2
	VHADDPS X2, X0, X0
	VMOVUPS X0, 0(DI)
	VHADDPS X5, X4, X4
	VHADDPS X7, X6, X6
	VHADDPS X6, X4, X4
	VMOVUPS X4, 16(DI)
	VHADDPS X9, X8, X8
	VHADDPS X11, X10, X10
	VHADDPS X10, X8, X8
	VMOVUPS X8, 32(DI)
	VHADDPS X13, X12, X12
	VHADDPS X15, X14, X14
	VHADDPS X14, X12, X12
	VMOVUPS X12, 48(DI)
	VZEROUPPER
	RET
