//go:build amd64 && !purego

#include "textflag.h"

// Constant table rows (32 bytes each, the value broadcast 8 times); see
// geluConsts in gelu_amd64.go.
#define K1 0(R8)
#define ONE 32(R8)
#define SCALE 64(R8)
#define CLAMP 96(R8)
#define NCLAMP 128(R8)
#define P13 160(R8)
#define P11 192(R8)
#define P9 224(R8)
#define P7 256(R8)
#define P5 288(R8)
#define P3 320(R8)
#define P1 352(R8)
#define Q6 384(R8)
#define Q4 416(R8)
#define Q2 448(R8)
#define Q0 480(R8)
#define HALF 512(R8)
#define K3 544(R8)
#define HALFSCALE 576(R8)
#define SIGNMASK 608(R8)
#define ABSMASK 640(R8)

// TANH8: from x in Y0, leaves x² in Y1, u in Y2, tanh(u) in Y4 (Y3, Y5,
// Y11, Y12 clobbered). Beyond the clamp tanh is exactly ±1, so the
// backward's 1-t² vanishes there instead of being rounding noise times x³.
#define TANH8 \
	VMULPS Y0, Y0, Y1 \
	VMOVUPS K1, Y2 \
	VFMADD213PS ONE, Y1, Y2 \
	VMULPS Y0, Y2, Y2 \
	VMULPS SCALE, Y2, Y2 \
	VANDPS SIGNMASK, Y2, Y11 \
	VORPS ONE, Y11, Y11 \
	VANDPS ABSMASK, Y2, Y12 \
	VCMPPS $0x1e, CLAMP, Y12, Y12 \
	VMINPS CLAMP, Y2, Y2 \
	VMAXPS NCLAMP, Y2, Y2 \
	VMULPS Y2, Y2, Y3 \
	VMOVUPS P13, Y4 \
	VFMADD213PS P11, Y3, Y4 \
	VFMADD213PS P9, Y3, Y4 \
	VFMADD213PS P7, Y3, Y4 \
	VFMADD213PS P5, Y3, Y4 \
	VFMADD213PS P3, Y3, Y4 \
	VFMADD213PS P1, Y3, Y4 \
	VMOVUPS Q6, Y5 \
	VFMADD213PS Q4, Y3, Y5 \
	VFMADD213PS Q2, Y3, Y5 \
	VFMADD213PS Q0, Y3, Y5 \
	VMULPS Y2, Y4, Y4 \
	VDIVPS Y5, Y4, Y4 \
	VBLENDVPS Y12, Y11, Y4, Y4

// func geluFwdAVX2(out, in *float32, n int, k *[21][8]uint32)
// out[i] = 0.5·x·(1+tanh(u)), n a multiple of 8.
TEXT ·geluFwdAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ in+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), R8
	SHRQ $3, CX
	JZ   fdone
floop:
	VMOVUPS (SI), Y0
	TANH8
	VADDPS ONE, Y4, Y4
	VMULPS Y0, Y4, Y4
	VMULPS HALF, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  floop
fdone:
	VZEROUPPER
	RET

// func geluBwdAVX2(dinp, inp, dout *float32, n int, k *[21][8]uint32, set int)
// dinp[i] += gelu'(x)·dout[i] (dinp[i] = ... when set is 1), n a multiple of 8.
TEXT ·geluBwdAVX2(SB), NOSPLIT, $0-48
	MOVQ dinp+0(FP), DI
	MOVQ inp+8(FP), SI
	MOVQ dout+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), R8
	MOVQ set+40(FP), R9
	VMOVUPS ONE, Y15
	VMOVUPS HALF, Y14
	SHRQ $3, CX
	JZ   bdone
bloop:
	VMOVUPS (SI), Y0
	TANH8
	// Y6 = 0.5·s·x·(1 + 3·0.044715·x²)
	VMOVUPS K3, Y6
	VFMADD213PS Y15, Y1, Y6
	VMULPS Y0, Y6, Y6
	VMULPS HALFSCALE, Y6, Y6
	// Y7 = 1 - t²
	VMULPS Y4, Y4, Y7
	VSUBPS Y7, Y15, Y7
	// Y8 = 0.5 + 0.5·t + Y6·Y7
	VMOVUPS Y4, Y8
	VFMADD213PS Y14, Y14, Y8
	VFMADD231PS Y7, Y6, Y8
	// dinp += Y8·dout, or dinp = Y8·dout
	VMOVUPS (DX), Y9
	TESTQ R9, R9
	JNZ  bset
	VMOVUPS (DI), Y10
	VFMADD231PS Y9, Y8, Y10
	VMOVUPS Y10, (DI)
	JMP  bnext
bset:
	VMULPS Y9, Y8, Y10
	VMOVUPS Y10, (DI)
bnext:
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  bloop
bdone:
	VZEROUPPER
	RET
