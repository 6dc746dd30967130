//go:build amd64 && !purego

#include "textflag.h"

// Packing helpers (AVX), see driver.go for the packed layouts.

// Transpose one 8×8 block: Y0..Y3 hold columns p..p+3 and Y4..Y7 columns
// p+4..p+7 of rows 0-3 (low 128 bits) and rows 4-7 (high 128 bits), as
// Yr = [row r | row r+4] for r = 0..3 (and likewise for Y4..Y7). Stores
// the four 8-row columns to four dst rows starting at base (pitch R13
// bytes, R14 = 3*R13) at byte offset off.
#define TRANSPOSE4(y0, y1, y2, y3, base, off) \
	VUNPCKLPS y1, y0, Y8;              \
	VUNPCKHPS y1, y0, Y9;              \
	VUNPCKLPS y3, y2, Y10;             \
	VUNPCKHPS y3, y2, Y11;             \
	VSHUFPS   $0x44, Y10, Y8, Y12;     \
	VSHUFPS   $0xEE, Y10, Y8, Y13;     \
	VSHUFPS   $0x44, Y11, Y9, Y14;     \
	VSHUFPS   $0xEE, Y11, Y9, Y15;     \
	VMOVUPS   Y12, off(base);          \
	VMOVUPS   Y13, off(base)(R13*1);   \
	VMOVUPS   Y14, off(base)(R13*2);   \
	VMOVUPS   Y15, off(base)(R14*1)

// Load columns p..p+7 of rows base+0..7 (row stride R8, R9 = 3*R8) into
// Y0..Y7 in the [row r | row r+4] arrangement TRANSPOSE4 expects.
#define LOAD8(lo, hi) \
	VMOVUPS     (lo), X0;                   \
	VINSERTF128 $1, (hi), Y0, Y0;           \
	VMOVUPS     (lo)(R8*1), X1;             \
	VINSERTF128 $1, (hi)(R8*1), Y1, Y1;     \
	VMOVUPS     (lo)(R8*2), X2;             \
	VINSERTF128 $1, (hi)(R8*2), Y2, Y2;     \
	VMOVUPS     (lo)(R9*1), X3;             \
	VINSERTF128 $1, (hi)(R9*1), Y3, Y3;     \
	VMOVUPS     16(lo), X4;                 \
	VINSERTF128 $1, 16(hi), Y4, Y4;         \
	VMOVUPS     16(lo)(R8*1), X5;           \
	VINSERTF128 $1, 16(hi)(R8*1), Y5, Y5;   \
	VMOVUPS     16(lo)(R8*2), X6;           \
	VINSERTF128 $1, 16(hi)(R8*2), Y6, Y6;   \
	VMOVUPS     16(lo)(R9*1), X7;           \
	VINSERTF128 $1, 16(hi)(R9*1), Y7, Y7

// func packBT16(blocks int, src *float32, ld int, dst *float32, pitch int)
//
// dst[p*pitch+j] = src[j*ld+p] for j < 16, p < 8*blocks: packs 16 columns
// of a B panel (pitch 16 or 32) from 16 rows of a transposed B. Moves bits
// only, so it packs pairs of BF16 values (as 32-bit words) too.
TEXT ·packBT16(SB), NOSPLIT, $0-40
	MOVQ blocks+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8
	MOVQ dst+24(FP), DI
	MOVQ pitch+32(FP), R13
	SHLQ $2, R13
	LEAQ (R13)(R13*2), R14
	LEAQ (DI)(R13*4), DX  // dst row p+4
	LEAQ (R8)(R8*2), R9
	LEAQ (SI)(R8*4), R10  // row 4
	LEAQ (R10)(R8*4), R11 // row 8
	LEAQ (R11)(R8*4), R12 // row 12

loop:
	LOAD8(SI, R10)
	TRANSPOSE4(Y0, Y1, Y2, Y3, DI, 0)
	TRANSPOSE4(Y4, Y5, Y6, Y7, DX, 0)
	LOAD8(R11, R12)
	TRANSPOSE4(Y0, Y1, Y2, Y3, DI, 32)
	TRANSPOSE4(Y4, Y5, Y6, Y7, DX, 32)
	ADDQ $32, SI
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	LEAQ (DI)(R13*8), DI
	LEAQ (DX)(R13*8), DX
	DECQ CX
	JNZ  loop
	VZEROUPPER
	RET

// Copy 6 floats (24 bytes) from src (src16 = src+16 bytes) to off(BX).
#define COPY6(src, src16, off) \
	VMOVUPS src, X0;          \
	MOVQ    src16, R10;       \
	VMOVUPS X0, (off)(BX);    \
	MOVQ    R10, (off+16)(BX)

// func packAT6(blocks, panels int, src *float32, ld int, dst *float32, pitch int)
//
// For p < 8*blocks and q < panels:
//	dst[q*pitch + p*6 + i] = src[p*ld + q*6 + i], i < 6
// packs full 6-row A panels from a transposed A. Eight source rows are
// walked together so each panel receives 192 contiguous bytes at a time
// (walking one row across all panels thrashes L1 sets, since panel
// starts are a multiple of 2 KiB apart).
TEXT ·packAT6(SB), NOSPLIT, $0-48
	MOVQ blocks+0(FP), CX
	MOVQ src+16(FP), SI
	MOVQ ld+24(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	MOVQ dst+32(FP), DI
	MOVQ pitch+40(FP), R12
	SHLQ $2, R12

block:
	MOVQ panels+8(FP), DX
	MOVQ SI, AX
	LEAQ (SI)(R8*4), R11
	MOVQ DI, BX

panel:
	COPY6((AX), 16(AX), 0)
	COPY6((AX)(R8*1), 16(AX)(R8*1), 24)
	COPY6((AX)(R8*2), 16(AX)(R8*2), 48)
	COPY6((AX)(R9*1), 16(AX)(R9*1), 72)
	COPY6((R11), 16(R11), 96)
	COPY6((R11)(R8*1), 16(R11)(R8*1), 120)
	COPY6((R11)(R8*2), 16(R11)(R8*2), 144)
	COPY6((R11)(R9*1), 16(R11)(R9*1), 168)
	ADDQ $24, AX
	ADDQ $24, R11
	ADDQ R12, BX
	DECQ DX
	JNZ  panel

	LEAQ (SI)(R8*8), SI
	ADDQ $192, DI
	DECQ CX
	JNZ  block
	VZEROUPPER
	RET

// func packBN(rows int, src *float32, ld int, dst *float32, width int)
//
// dst[p*width+j] = src[p*ld+j] for j < width, p < rows: packs a 16- or
// 32-column B panel from a row-major B.
TEXT ·packBN(SB), NOSPLIT, $0-40
	MOVQ rows+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8
	MOVQ dst+24(FP), DI
	CMPQ width+32(FP), $32
	JEQ  wide
	CMPQ CX, $2
	JLT  one

two:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS (SI)(R8*1), Y2
	VMOVUPS 32(SI)(R8*1), Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	LEAQ    (SI)(R8*2), SI
	ADDQ    $128, DI
	SUBQ    $2, CX
	CMPQ    CX, $2
	JGE     two

one:
	TESTQ   CX, CX
	JZ      done
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	JMP     done

wide:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    R8, SI
	ADDQ    $128, DI
	DECQ    CX
	JNZ     wide

done:
	VZEROUPPER
	RET

// Copy 12 floats (48 bytes) from src (src32 = src+32 bytes) to off(BX).
#define COPY12(src, src32, off) \
	VMOVUPS src, Y0;           \
	VMOVUPS src32, X1;         \
	VMOVUPS Y0, (off)(BX);     \
	VMOVUPS X1, (off+32)(BX)

// func packAT12(blocks, panels int, src *float32, ld int, dst *float32, pitch int)
//
// As packAT6 for 12-row panels:
//	dst[q*pitch + p*12 + i] = src[p*ld + q*12 + i], i < 12
TEXT ·packAT12(SB), NOSPLIT, $0-48
	MOVQ blocks+0(FP), CX
	MOVQ src+16(FP), SI
	MOVQ ld+24(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	MOVQ dst+32(FP), DI
	MOVQ pitch+40(FP), R12
	SHLQ $2, R12

block12:
	MOVQ panels+8(FP), DX
	MOVQ SI, AX
	LEAQ (SI)(R8*4), R11
	MOVQ DI, BX

panel12:
	COPY12((AX), 32(AX), 0)
	COPY12((AX)(R8*1), 32(AX)(R8*1), 48)
	COPY12((AX)(R8*2), 32(AX)(R8*2), 96)
	COPY12((AX)(R9*1), 32(AX)(R9*1), 144)
	COPY12((R11), 32(R11), 192)
	COPY12((R11)(R8*1), 32(R11)(R8*1), 240)
	COPY12((R11)(R8*2), 32(R11)(R8*2), 288)
	COPY12((R11)(R9*1), 32(R11)(R9*1), 336)
	ADDQ $48, AX
	ADDQ $48, R11
	ADDQ R12, BX
	DECQ DX
	JNZ  panel12

	LEAQ (SI)(R8*8), SI
	ADDQ $384, DI
	DECQ CX
	JNZ  block12
	VZEROUPPER
	RET

// func packBT16w(blocks int, src *uint16, ld int, dst *uint32, pitch int)
//
// packBT16 on 32-bit words holding BF16 pairs (ld and pitch in words).
TEXT ·packBT16w(SB), NOSPLIT, $0-40
	JMP ·packBT16(SB)

// Interleave 16 columns of two BF16 rows (lo in Y0-style register a, hi in
// b) into 16 words lo|hi<<16 in column order, stored at off(DI).
#define PAIR16(a, b, off) \
	VPUNPCKLWD b, a, Y4;           \
	VPUNPCKHWD b, a, Y5;           \
	VPERM2I128 $0x20, Y5, Y4, Y6;  \
	VPERM2I128 $0x31, Y5, Y4, Y7;  \
	VMOVDQU    Y6, off(DI);        \
	VMOVDQU    Y7, off+32(DI)

// func packBNbf(kq int, src *uint16, ld int, dst *uint32)
//
// dst[q*32+j] = src[2q*ld+j] | src[(2q+1)*ld+j]<<16 for j < 32, q < kq:
// packs a 32-column BF16 B panel from a row-major B, pairing rows 2q and
// 2q+1 (VPUNPCK*WD interleave within 128-bit lanes; VPERM2I128 restores
// the column order).
TEXT ·packBNbf(SB), NOSPLIT, $0-32
	MOVQ kq+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $1, R8
	MOVQ dst+24(FP), DI

pairs:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU (SI)(R8*1), Y2
	VMOVDQU 32(SI)(R8*1), Y3
	PAIR16(Y0, Y2, 0)
	PAIR16(Y1, Y3, 64)
	LEAQ    (SI)(R8*2), SI
	ADDQ    $128, DI
	DECQ    CX
	JNZ     pairs
	VZEROUPPER
	RET
