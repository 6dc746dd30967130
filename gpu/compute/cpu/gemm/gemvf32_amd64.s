//go:build amd64 && !purego

#include "textflag.h"

// func gemvF32x4(k16 int, w *float32, ldw int, x *float32, dots *[4]float32)
//
// dots[r] = sum over p < 16*k16 of W[r][p] * x[p], r < 4, for float32 rows
// W[r] at w + r*ldw (elements): gemvBF16x4 without the widening. Four rows
// share each load of x, two accumulators a row cover the FMA latency, and
// the loop prefetches the next four rows linearly, 256 bytes a step (what a
// step consumes): rows of 2-20 KiB are streams too short for the hardware
// prefetcher to ramp up on each. PREFETCHNTA, since each weight is read
// once a step: on a Zen 5 it read 5% faster than PREFETCHT0 (11 of 12
// paired runs), and prefetching further ahead or into L2 did not help.
//
// Registers: SI = &W[0][p], R9 = &W[3][p], R8 = ldw bytes, BX = &x[p],
// CX = steps left, Y0..Y7 accumulators (row r in Y(2r), Y(2r+1)),
// DX = prefetch pointer.
#define ROW(lo, hi, acc0, acc1) \
	VFMADD231PS lo, Y8, acc0; \
	VFMADD231PS hi, Y9, acc1

TEXT ·gemvF32x4(SB), NOSPLIT, $0-40
	MOVQ k16+0(FP), CX
	MOVQ w+8(FP), SI
	MOVQ ldw+16(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	ADDQ SI, R9
	MOVQ x+24(FP), BX
	LEAQ (SI)(R8*4), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop:
	PREFETCHNTA (DX)
	PREFETCHNTA 64(DX)
	PREFETCHNTA 128(DX)
	PREFETCHNTA 192(DX)
	ADDQ       $256, DX
	VMOVUPS    (BX), Y8
	VMOVUPS    32(BX), Y9
	ROW((SI), 32(SI), Y0, Y1)
	ROW((SI)(R8*1), 32(SI)(R8*1), Y2, Y3)
	ROW((SI)(R8*2), 32(SI)(R8*2), Y4, Y5)
	ROW((R9), 32(R9), Y6, Y7)
	ADDQ $64, SI
	ADDQ $64, R9
	ADDQ $64, BX
	DECQ CX
	JNZ  loop

	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y5, Y4, Y4
	VADDPS       Y7, Y6, Y6
	VHADDPS      Y2, Y0, Y0
	VHADDPS      Y6, Y4, Y4
	VHADDPS      Y4, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	MOVQ         dots+32(FP), DI
	VMOVUPS      X0, (DI)
	VZEROUPPER
	RET
