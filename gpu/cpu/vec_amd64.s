//go:build amd64 && !purego

#include "textflag.h"

// func maxAVX2(x *float32, n int) float32
// max of x[0:n], n a positive multiple of 8. NaN handling is VMAXPS's
// (the second operand when either is NaN); the scores are finite.
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y0
	VMOVAPS Y0, Y1
	ADDQ $32, SI
	SUBQ $8, CX
loop16:
	CMPQ CX, $16
	JLT  tail8
	VMAXPS (SI), Y0, Y0
	VMAXPS 32(SI), Y1, Y1
	ADDQ $64, SI
	SUBQ $16, CX
	JMP  loop16
tail8:
	CMPQ CX, $8
	JLT  reduce
	VMAXPS (SI), Y0, Y0
reduce:
	VMAXPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func scaleAVX2(x *float32, n int, s float32)
// x[i] *= s for i < n, n a positive multiple of 8.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y2
loop16:
	CMPQ CX, $16
	JLT  tail8
	VMULPS (SI), Y2, Y0
	VMULPS 32(SI), Y2, Y1
	VMOVUPS Y0, (SI)
	VMOVUPS Y1, 32(SI)
	ADDQ $64, SI
	SUBQ $16, CX
	JMP  loop16
tail8:
	CMPQ CX, $8
	JLT  done
	VMULPS (SI), Y2, Y0
	VMOVUPS Y0, (SI)
done:
	VZEROUPPER
	RET
