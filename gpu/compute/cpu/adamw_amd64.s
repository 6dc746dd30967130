//go:build amd64 && !purego

#include "textflag.h"

// func adamwAVX2(p, gr, m, v *float32, n int, k *[10][8]float32)
// One AdamW step on n (a multiple of 8) parameters. k rows: scale, b1,
// 1-b1, b2, 1-b2, 1/c1, 1/c2, eps, lr, wd (broadcast).
TEXT ·adamwAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ m+16(FP), BX
	MOVQ v+24(FP), DX
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), R8
	VMOVUPS 0(R8), Y6
	VMOVUPS 32(R8), Y7
	VMOVUPS 64(R8), Y8
	VMOVUPS 96(R8), Y9
	VMOVUPS 128(R8), Y10
	VMOVUPS 160(R8), Y11
	VMOVUPS 192(R8), Y12
	VMOVUPS 224(R8), Y13
	VMOVUPS 256(R8), Y14
	VMOVUPS 288(R8), Y15
	SHRQ $3, CX
	JZ   done
loop:
	VMULPS (SI), Y6, Y0
	VMULPS (BX), Y7, Y1
	VFMADD231PS Y0, Y8, Y1
	VMOVUPS Y1, (BX)
	VMULPS (DX), Y9, Y2
	VMULPS Y0, Y0, Y3
	VFMADD231PS Y3, Y10, Y2
	VMOVUPS Y2, (DX)
	VMULPS Y12, Y2, Y4
	VSQRTPS Y4, Y4
	VADDPS Y13, Y4, Y4
	VMULPS Y11, Y1, Y5
	VDIVPS Y4, Y5, Y5
	VMOVUPS (DI), Y3
	VFMADD231PS Y3, Y15, Y5
	VFNMADD231PS Y5, Y14, Y3
	VMOVUPS Y3, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, DX
	DECQ CX
	JNZ  loop
done:
	VZEROUPPER
	RET
