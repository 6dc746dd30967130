//go:build amd64 && !purego

#include "textflag.h"

// func gemvRow(k int, a *float32, aps int, b *float32, bps int, c *float32, n16 int, alpha, beta float32)
//
// One row of C for a product with few rows, B read in place:
//	c[j] = alpha * sum over p < k of a[p*aps] * b[p*bps+j]  (+ beta*c[j] if beta != 0)
// for j < 16*n16. Columns go 64 at a time (eight accumulators, enough to
// cover FMA latency), then 16 at a time.
//
// Registers: AX = &a[p], R9 = aps bytes, BX = &b[p][j0], R11 = bps bytes,
// CX = steps left, DI = &c[j0], DX = 16-column panels left, SI = &b[0][j0].
TEXT ·gemvRow(SB), NOSPLIT, $0-64
	MOVQ aps+16(FP), R9
	SHLQ $2, R9
	MOVQ b+24(FP), SI
	MOVQ bps+32(FP), R11
	SHLQ $2, R11
	MOVQ c+40(FP), DI
	MOVQ n16+48(FP), DX

wide:
	CMPQ DX, $4
	JLT  narrow
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ SI, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

wideloop:
	VBROADCASTSS (AX), Y15
	VFMADD231PS  (BX), Y15, Y0
	VFMADD231PS  32(BX), Y15, Y1
	VFMADD231PS  64(BX), Y15, Y2
	VFMADD231PS  96(BX), Y15, Y3
	VFMADD231PS  128(BX), Y15, Y4
	VFMADD231PS  160(BX), Y15, Y5
	VFMADD231PS  192(BX), Y15, Y6
	VFMADD231PS  224(BX), Y15, Y7
	ADDQ         R9, AX
	ADDQ         R11, BX
	DECQ         CX
	JNZ          wideloop

	VBROADCASTSS alpha+56(FP), Y15
	VMULPS       Y15, Y0, Y0
	VMULPS       Y15, Y1, Y1
	VMULPS       Y15, Y2, Y2
	VMULPS       Y15, Y3, Y3
	VMULPS       Y15, Y4, Y4
	VMULPS       Y15, Y5, Y5
	VMULPS       Y15, Y6, Y6
	VMULPS       Y15, Y7, Y7
	MOVL         beta+60(FP), CX
	ANDL         $0x7fffffff, CX
	JZ           widestore
	VBROADCASTSS beta+60(FP), Y15
	VFMADD231PS  (DI), Y15, Y0
	VFMADD231PS  32(DI), Y15, Y1
	VFMADD231PS  64(DI), Y15, Y2
	VFMADD231PS  96(DI), Y15, Y3
	VFMADD231PS  128(DI), Y15, Y4
	VFMADD231PS  160(DI), Y15, Y5
	VFMADD231PS  192(DI), Y15, Y6
	VFMADD231PS  224(DI), Y15, Y7

widestore:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ    $256, SI
	ADDQ    $256, DI
	SUBQ    $4, DX
	JMP     wide

narrow:
	TESTQ DX, DX
	JZ    done
	MOVQ  k+0(FP), CX
	MOVQ  a+8(FP), AX
	MOVQ  SI, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1

narrowloop:
	VBROADCASTSS (AX), Y15
	VFMADD231PS  (BX), Y15, Y0
	VFMADD231PS  32(BX), Y15, Y1
	ADDQ         R9, AX
	ADDQ         R11, BX
	DECQ         CX
	JNZ          narrowloop

	VBROADCASTSS alpha+56(FP), Y15
	VMULPS       Y15, Y0, Y0
	VMULPS       Y15, Y1, Y1
	MOVL         beta+60(FP), CX
	ANDL         $0x7fffffff, CX
	JZ           narrowstore
	VBROADCASTSS beta+60(FP), Y15
	VFMADD231PS  (DI), Y15, Y0
	VFMADD231PS  32(DI), Y15, Y1

narrowstore:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    DX
	JMP     narrow

done:
	VZEROUPPER
	RET
