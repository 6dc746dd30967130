//go:build amd64 && !purego

#include "textflag.h"

// Constant rows (32 bytes each, broadcast): expConsts in exp_amd64.go.
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

// EXPNEG8: Y3 = exp(-Y0) (Cephes expf as in expShiftAVX2, argument clamped
// to [-87, 88]); Y1, Y2, Y4, Y5 clobbered, Y15 must be zero.
#define EXPNEG8 \
	VSUBPS Y0, Y15, Y1 \
	VMINPS HI, Y1, Y1 \
	VMAXPS LO, Y1, Y1 \
	VMOVUPS LOG2E, Y2 \
	VFMADD213PS HALF, Y1, Y2 \
	VROUNDPS $1, Y2, Y2 \
	VFNMADD231PS C1, Y2, Y1 \
	VFMADD231PS C2, Y2, Y1 \
	VMULPS Y1, Y1, Y4 \
	VMOVUPS P0, Y3 \
	VFMADD213PS P1, Y1, Y3 \
	VFMADD213PS P2, Y1, Y3 \
	VFMADD213PS P3, Y1, Y3 \
	VFMADD213PS P4, Y1, Y3 \
	VFMADD213PS P5, Y1, Y3 \
	VFMADD213PS Y1, Y4, Y3 \
	VADDPS ONE, Y3, Y3 \
	VCVTTPS2DQ Y2, Y5 \
	VPADDD BIAS, Y5, Y5 \
	VPSLLD $23, Y5, Y5 \
	VMULPS Y5, Y3, Y3

// func swigluFwdAVX2(out, gate, up *float32, n int, k *[14][8]uint32)
// out[i] = gate[i]·up[i]/(1+exp(-gate[i])), n a multiple of 8.
TEXT ·swigluFwdAVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), R8
	VXORPS Y15, Y15, Y15
	SHRQ $3, CX
	JZ   fdone
floop:
	VMOVUPS (SI), Y0
	EXPNEG8
	VADDPS ONE, Y3, Y3
	VMULPS (DX), Y0, Y6
	VDIVPS Y3, Y6, Y6
	VMOVUPS Y6, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  floop
fdone:
	VZEROUPPER
	RET

// func swigluBwdAVX2(dgate, dup, dout, gate, up *float32, n int, k *[14][8]uint32, setG, setU int)
// With s = σ(g): dgate (+)= dout·up·s·(1+g·(1-s)), dup (+)= dout·g·s;
// stored instead of added where setG / setU is 1. n a multiple of 8.
TEXT ·swigluBwdAVX2(SB), NOSPLIT, $0-72
	MOVQ dgate+0(FP), DI
	MOVQ dup+8(FP), R9
	MOVQ dout+16(FP), R10
	MOVQ gate+24(FP), SI
	MOVQ up+32(FP), DX
	MOVQ n+40(FP), CX
	MOVQ k+48(FP), R8
	MOVQ setG+56(FP), R11
	MOVQ setU+64(FP), R12
	VXORPS Y15, Y15, Y15
	VMOVUPS ONE, Y14
	SHRQ $3, CX
	JZ   bdone
bloop:
	VMOVUPS (SI), Y0
	EXPNEG8
	VADDPS Y14, Y3, Y3
	VDIVPS Y3, Y14, Y6         // s
	VSUBPS Y6, Y14, Y7         // 1-s
	VFMADD213PS Y14, Y0, Y7    // 1 + g(1-s)
	VMULPS Y6, Y7, Y7          // silu'(g)
	VMOVUPS (R10), Y9          // dout
	VMULPS (DX), Y9, Y11       // dout·up
	VMULPS Y7, Y11, Y11        // dgate term
	VMULPS Y6, Y9, Y8
	VMULPS Y0, Y8, Y8          // dup term: dout·g·s
	CMPQ R11, $0
	JNE  gset
	VADDPS (DI), Y11, Y11
gset:
	VMOVUPS Y11, (DI)
	CMPQ R12, $0
	JNE  uset
	VADDPS (R9), Y8, Y8
uset:
	VMOVUPS Y8, (R9)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	ADDQ $32, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  bloop
bdone:
	VZEROUPPER
	RET
