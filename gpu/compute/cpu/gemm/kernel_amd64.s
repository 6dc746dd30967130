//go:build amd64 && !purego

#include "textflag.h"

// AVX2+FMA micro-kernel for a 6×16 tile of C.
//
//	acc[i][j] = sum over p < k of A(i, p) * B(p, j)
//	C[i][j]   = alpha*acc[i][j]                 if beta == 0 (C is not read)
//	C[i][j]   = alpha*acc[i][j] + beta*C[i][j]  otherwise
//
// A(i, p) is at a + i*ars + p*aps and B(p, j) at b + p*bps + j (strides in
// elements), so the same kernel reads packed panels (ars=1, aps=6; bps=16)
// or A and B in place: row-major A (ars=lda, aps=1), transposed A (ars=1,
// aps=lda), row-major B (bps=ldb).
//
// Registers in the loop:
//	Y0..Y11  accumulators, row i in Y(2i) (cols 0-7) and Y(2i+1) (cols 8-15)
//	Y12,Y13  current row of B
//	Y14,Y15  broadcast elements of A (two, so consecutive rows overlap)
//	AX       &A(0, p), R13 = &A(3, p), R12 = ars bytes, R9 = aps bytes
//	BX       &B(p, 0), R11 = bps bytes
//	CX       steps left

// One step of p: load a B row, broadcast six A values, 12 FMAs.
// VFMADD231PS x, y, z means z += y*x (Plan 9 puts the destination last).
#define STEP \
	VMOVUPS      (BX), Y12;          \
	VMOVUPS      32(BX), Y13;        \
	ADDQ         R11, BX;            \
	VBROADCASTSS (AX), Y14;          \
	VBROADCASTSS (AX)(R12*1), Y15;   \
	VFMADD231PS  Y12, Y14, Y0;       \
	VFMADD231PS  Y13, Y14, Y1;       \
	VFMADD231PS  Y12, Y15, Y2;       \
	VFMADD231PS  Y13, Y15, Y3;       \
	VBROADCASTSS (AX)(R12*2), Y14;   \
	VBROADCASTSS (R13), Y15;         \
	VFMADD231PS  Y12, Y14, Y4;       \
	VFMADD231PS  Y13, Y14, Y5;       \
	VFMADD231PS  Y12, Y15, Y6;       \
	VFMADD231PS  Y13, Y15, Y7;       \
	VBROADCASTSS (R13)(R12*1), Y14;  \
	VBROADCASTSS (R13)(R12*2), Y15;  \
	VFMADD231PS  Y12, Y14, Y8;       \
	VFMADD231PS  Y13, Y14, Y9;       \
	VFMADD231PS  Y12, Y15, Y10;      \
	VFMADD231PS  Y13, Y15, Y11;      \
	ADDQ         R9, AX;             \
	ADDQ         R9, R13

// Store one row pair of accumulators to C (addresses of cols 0 and 8).
#define STORE(lo, hi, alo, ahi) \
	VMOVUPS lo, alo;            \
	VMOVUPS hi, ahi

// C row = acc + beta*C row (beta in Y15).
#define UPDATE(lo, hi, alo, ahi) \
	VFMADD231PS alo, Y15, lo;    \
	VFMADD231PS ahi, Y15, hi;    \
	VMOVUPS     lo, alo;         \
	VMOVUPS     hi, ahi

// func kernel6x16(tiles, k int, a *float32, ars, aps, anext int, b *float32, bps int, c *float32, ldc int, alpha, beta float32)
//
// Computes `tiles` vertically adjacent 6×16 tiles of C with the same B
// panel (which stays in L1): tile t uses A from a + t*anext and C from
// c + t*6*ldc. Looping here rather than in Go saves a call per tile.
TEXT ·kernel6x16(SB), NOSPLIT, $0-88
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
	MOVQ SI, AX
	LEAQ (R12)(R12*2), R13
	ADDQ AX, R13
	MOVQ b+48(FP), BX
	MOVQ k+8(FP), CX

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
	// acc *= alpha
	VBROADCASTSS alpha+80(FP), Y15
	VMULPS       Y15, Y0, Y0
	VMULPS       Y15, Y1, Y1
	VMULPS       Y15, Y2, Y2
	VMULPS       Y15, Y3, Y3
	VMULPS       Y15, Y4, Y4
	VMULPS       Y15, Y5, Y5
	VMULPS       Y15, Y6, Y6
	VMULPS       Y15, Y7, Y7
	VMULPS       Y15, Y8, Y8
	VMULPS       Y15, Y9, Y9
	VMULPS       Y15, Y10, Y10
	VMULPS       Y15, Y11, Y11

	// beta == +0 or -0: overwrite C without reading it.
	MOVL beta+84(FP), CX
	ANDL $0x7fffffff, CX
	JZ   store

	VBROADCASTSS beta+84(FP), Y15
	UPDATE(Y0, Y1, (DI), 32(DI))
	UPDATE(Y2, Y3, (DI)(R8*1), 32(DI)(R8*1))
	UPDATE(Y4, Y5, (DI)(R8*2), 32(DI)(R8*2))
	UPDATE(Y6, Y7, (R10), 32(R10))
	UPDATE(Y8, Y9, (R10)(R8*1), 32(R10)(R8*1))
	UPDATE(Y10, Y11, (R10)(R8*2), 32(R10)(R8*2))
	JMP next

store:
	STORE(Y0, Y1, (DI), 32(DI))
	STORE(Y2, Y3, (DI)(R8*1), 32(DI)(R8*1))
	STORE(Y4, Y5, (DI)(R8*2), 32(DI)(R8*2))
	STORE(Y6, Y7, (R10), 32(R10))
	STORE(Y8, Y9, (R10)(R8*1), 32(R10)(R8*1))
	STORE(Y10, Y11, (R10)(R8*2), 32(R10)(R8*2))

next:
	// Next tile: A by anext elements, C down six rows (R10 + 3*ldc).
	MOVQ anext+40(FP), CX
	LEAQ (SI)(CX*4), SI
	LEAQ (R10)(R8*2), DI
	ADDQ R8, DI
	DECQ DX
	JNZ  tile
	VZEROUPPER
	RET

// func fmaPeak(n int)
//
// Runs n iterations of 12 independent 8-wide FMAs on registers only: the
// FMA throughput ceiling of one core (32 flops per cycle on Zen3 with two
// FMA pipes), measured by BenchmarkPeak to put GFLOP/s figures in context.
TEXT ·fmaPeak(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
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
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13

peak:
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y13, Y1
	VFMADD231PS Y12, Y13, Y2
	VFMADD231PS Y12, Y13, Y3
	VFMADD231PS Y12, Y13, Y4
	VFMADD231PS Y12, Y13, Y5
	VFMADD231PS Y12, Y13, Y6
	VFMADD231PS Y12, Y13, Y7
	VFMADD231PS Y12, Y13, Y8
	VFMADD231PS Y12, Y13, Y9
	VFMADD231PS Y12, Y13, Y10
	VFMADD231PS Y12, Y13, Y11
	DECQ        CX
	JNZ         peak
	VZEROUPPER
	RET
