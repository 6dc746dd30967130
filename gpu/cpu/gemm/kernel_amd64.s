//go:build amd64 && !purego

#include "textflag.h"

// AVX2+FMA micro-kernel for a 6×16 tile of C.
//
//	acc[6][16] = sum over p < k of a[p*6+i] * b[p*ldb+j]
//	C[i][j]    = acc[i][j]                 if beta == 0 (C is not read)
//	C[i][j]    = acc[i][j] + beta*C[i][j]  otherwise
//
// a is a packed A micro-panel (6 values per p, alpha already applied).
// b is either a packed B micro-panel (ldb = 16) or 16 columns of an
// unpacked row-major B (ldb = its row stride). Strides are in elements.
//
// Registers:
//	Y0..Y11  accumulators, row i in Y(2i) (cols 0-7) and Y(2i+1) (cols 8-15)
//	Y12,Y13  current row of B
//	Y14      broadcast element of A
//	Y15      beta
//	AX = a, BX = b, CX = k counter, R11 = ldb in bytes, DI/R10 = C rows

// One step of p: load a B row, broadcast six A values, 12 FMAs.
// VFMADD231PS x, y, z means z += y*x (Plan 9 puts the destination last).
#define STEP(aoff) \
	VMOVUPS      (BX), Y12;          \
	VMOVUPS      32(BX), Y13;        \
	ADDQ         R11, BX;            \
	VBROADCASTSS (aoff+0)(AX), Y14;  \
	VFMADD231PS  Y12, Y14, Y0;       \
	VFMADD231PS  Y13, Y14, Y1;       \
	VBROADCASTSS (aoff+4)(AX), Y14;  \
	VFMADD231PS  Y12, Y14, Y2;       \
	VFMADD231PS  Y13, Y14, Y3;       \
	VBROADCASTSS (aoff+8)(AX), Y14;  \
	VFMADD231PS  Y12, Y14, Y4;       \
	VFMADD231PS  Y13, Y14, Y5;       \
	VBROADCASTSS (aoff+12)(AX), Y14; \
	VFMADD231PS  Y12, Y14, Y6;       \
	VFMADD231PS  Y13, Y14, Y7;       \
	VBROADCASTSS (aoff+16)(AX), Y14; \
	VFMADD231PS  Y12, Y14, Y8;       \
	VFMADD231PS  Y13, Y14, Y9;       \
	VBROADCASTSS (aoff+20)(AX), Y14; \
	VFMADD231PS  Y12, Y14, Y10;      \
	VFMADD231PS  Y13, Y14, Y11

// Store one row pair of accumulators to C at address ptr.
#define STORE(lo, hi, ptr) \
	VMOVUPS lo, (ptr);     \
	VMOVUPS hi, 32(ptr)

// C row = acc + beta*C row.
#define UPDATE(lo, hi, ptr)          \
	VFMADD231PS (ptr), Y15, lo;      \
	VFMADD231PS 32(ptr), Y15, hi;    \
	VMOVUPS     lo, (ptr);           \
	VMOVUPS     hi, 32(ptr)

// func kernel6x16(k int, a *float32, b *float32, ldb int, c *float32, ldc int, beta float32)
TEXT ·kernel6x16(SB), NOSPLIT, $0-52
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ ldb+24(FP), R11
	SHLQ $2, R11
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8

	// Rows 3..5 of C are addressed from R10 = row 3.
	LEAQ (R8)(R8*2), R10
	ADDQ DI, R10

	// Touch the C tile early so its lines arrive during the loop.
	PREFETCHT0 (DI)
	PREFETCHT0 (DI)(R8*1)
	PREFETCHT0 (DI)(R8*2)
	PREFETCHT0 (R10)
	PREFETCHT0 (R10)(R8*1)
	PREFETCHT0 (R10)(R8*2)

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	// Main loop, unrolled by 4 steps of p.
	CMPQ CX, $4
	JLT  tail

loop4:
	STEP(0)
	STEP(24)
	STEP(48)
	STEP(72)
	ADDQ $96, AX
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  loop4

tail:
	TESTQ CX, CX
	JZ    done

loop1:
	STEP(0)
	ADDQ $24, AX
	DECQ CX
	JNZ  loop1

done:
	// beta == +0 or -0: overwrite C without reading it.
	MOVL beta+48(FP), DX
	ANDL $0x7fffffff, DX
	JZ   store

	VBROADCASTSS beta+48(FP), Y15
	LEAQ         (DI)(R8*1), SI
	UPDATE(Y0, Y1, DI)
	UPDATE(Y2, Y3, SI)
	LEAQ         (DI)(R8*2), SI
	UPDATE(Y4, Y5, SI)
	UPDATE(Y6, Y7, R10)
	LEAQ         (R10)(R8*1), SI
	UPDATE(Y8, Y9, SI)
	LEAQ         (R10)(R8*2), SI
	UPDATE(Y10, Y11, SI)
	VZEROUPPER
	RET

store:
	LEAQ (DI)(R8*1), SI
	STORE(Y0, Y1, DI)
	STORE(Y2, Y3, SI)
	LEAQ (DI)(R8*2), SI
	STORE(Y4, Y5, SI)
	STORE(Y6, Y7, R10)
	LEAQ (R10)(R8*1), SI
	STORE(Y8, Y9, SI)
	LEAQ (R10)(R8*2), SI
	STORE(Y10, Y11, SI)
	VZEROUPPER
	RET
