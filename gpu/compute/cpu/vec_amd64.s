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

// func sumSquaresAVX2(x *float32, n int) float64
// Σ x[i]² for i < n, n a multiple of 32: float32 FMA sums over runs of 256
// elements (as kSumSquares' Go loop), added into float64 lanes.
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Y8, Y8, Y8
	SHRQ $5, CX
outer:
	TESTQ CX, CX
	JZ    done
	MOVQ  $8, DX
	CMPQ  CX, DX
	CMOVQLT CX, DX
	SUBQ  DX, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
inner:
	VMOVUPS (SI), Y4
	VFMADD231PS Y4, Y4, Y0
	VMOVUPS 32(SI), Y5
	VFMADD231PS Y5, Y5, Y1
	VMOVUPS 64(SI), Y6
	VFMADD231PS Y6, Y6, Y2
	VMOVUPS 96(SI), Y7
	VFMADD231PS Y7, Y7, Y3
	ADDQ $128, SI
	DECQ DX
	JNZ  inner
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VCVTPS2PD X0, Y4
	VEXTRACTF128 $1, Y0, X5
	VCVTPS2PD X5, Y5
	VADDPD Y4, Y8, Y8
	VADDPD Y5, Y8, Y8
	JMP  outer
done:
	VEXTRACTF128 $1, Y8, X0
	VADDPD X0, X8, X0
	VPERMILPD $1, X0, X1
	VADDSD X1, X0, X0
	VZEROUPPER
	MOVSD X0, ret+16(FP)
	RET
