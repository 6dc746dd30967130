//go:build amd64 && !purego

#include "textflag.h"

// Constant rows (32 bytes each, broadcast); see expConsts in exp_amd64.go.
#define LOG2E 0(R8)
#define HALF 32(R8)
#define C1 64(R8)
#define C2 96(R8)
#define P0 128(R8)
#define P1 160(R8)
#define P2 192(R8)
#define P3 224(R8)
#define P4 256(R8)
#define P5 288(R8)
#define ONE 320(R8)
#define HI 352(R8)
#define LO 384(R8)
#define BIAS 416(R8)

// func expShiftAVX2(x *float32, n int, shift float32, k *[14][8]uint32, acc *[8]float32)
// x[i] = exp(x[i] - shift) in place (Cephes expf, the same as expf), n a
// multiple of 8; acc receives eight partial sums of the results.
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS shift+16(FP), Y15
	MOVQ k+24(FP), R8
	MOVQ acc+32(FP), DI
	VXORPS Y14, Y14, Y14
	SHRQ $3, CX
	JZ   done
loop:
	VMOVUPS (SI), Y0
	VSUBPS Y15, Y0, Y0
	VMINPS HI, Y0, Y0
	VMAXPS LO, Y0, Y0
	// fx = floor(x·log2e + 0.5)
	VMOVUPS LOG2E, Y1
	VFMADD213PS HALF, Y0, Y1
	VROUNDPS $1, Y1, Y1
	// r = x - fx·C1 + fx·C2
	VFNMADD231PS C1, Y1, Y0
	VFMADD231PS C2, Y1, Y0
	VMULPS Y0, Y0, Y2
	VMOVUPS P0, Y3
	VFMADD213PS P1, Y0, Y3
	VFMADD213PS P2, Y0, Y3
	VFMADD213PS P3, Y0, Y3
	VFMADD213PS P4, Y0, Y3
	VFMADD213PS P5, Y0, Y3
	VFMADD213PS Y0, Y2, Y3
	VADDPS ONE, Y3, Y3
	// 2^fx through the exponent bits
	VCVTTPS2DQ Y1, Y4
	VPADDD BIAS, Y4, Y4
	VPSLLD $23, Y4, Y4
	VMULPS Y4, Y3, Y3
	VMOVUPS Y3, (SI)
	VADDPS Y3, Y14, Y14
	ADDQ $32, SI
	DECQ CX
	JNZ  loop
done:
	VMOVUPS Y14, (DI)
	VZEROUPPER
	RET
