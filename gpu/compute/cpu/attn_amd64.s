//go:build amd64 && !purego

#include "textflag.h"

// func dotsAVX2(q, k *float32, ldk, hd, n int, out *float32)
// out[s] = Σ_{i<hd} q[i]·k[s·ldk+i] for s < n; hd a positive multiple of
// 8, ldk in elements.
TEXT ·dotsAVX2(SB), NOSPLIT, $0-48
	MOVQ q+0(FP), R8
	MOVQ k+8(FP), R9
	MOVQ ldk+16(FP), R10
	SHLQ $2, R10
	MOVQ hd+24(FP), R11
	MOVQ n+32(FP), R12
	MOVQ out+40(FP), R13
rows:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ R8, SI
	MOVQ R9, DI
	MOVQ R11, CX
loop32:
	CMPQ CX, $32
	JLT  loop8
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	VMOVUPS 32(SI), Y5
	VFMADD231PS 32(DI), Y5, Y1
	VMOVUPS 64(SI), Y6
	VFMADD231PS 64(DI), Y6, Y2
	VMOVUPS 96(SI), Y7
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  loop32
loop8:
	CMPQ CX, $8
	JLT  reduce
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  loop8
reduce:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, (R13)
	ADDQ $4, R13
	ADDQ R10, R9
	DECQ R12
	JNZ  rows
	VZEROUPPER
	RET

// func wsumAVX2(out, v *float32, ldv, hd, n int, w *float32)
// out[i] = Σ_{s<n} w[s]·v[s·ldv+i] for i < hd; hd a positive multiple of
// 8, n >= 1, ldv in elements. Each column block's sums stay in registers
// across all n rows.
TEXT ·wsumAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), R8
	MOVQ v+8(FP), R9
	MOVQ ldv+16(FP), R10
	SHLQ $2, R10
	MOVQ hd+24(FP), R11
	MOVQ n+32(FP), R12
	MOVQ w+40(FP), R13
cols32:
	CMPQ R11, $32
	JLT  cols8
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ R9, DI
	MOVQ R13, SI
	MOVQ R12, CX
rows32:
	VBROADCASTSS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y4, Y1
	VFMADD231PS 64(DI), Y4, Y2
	VFMADD231PS 96(DI), Y4, Y3
	ADDQ $4, SI
	ADDQ R10, DI
	DECQ CX
	JNZ  rows32
	VMOVUPS Y0, (R8)
	VMOVUPS Y1, 32(R8)
	VMOVUPS Y2, 64(R8)
	VMOVUPS Y3, 96(R8)
	ADDQ $128, R8
	ADDQ $128, R9
	SUBQ $32, R11
	JMP  cols32
cols8:
	CMPQ R11, $8
	JLT  done
	VXORPS Y0, Y0, Y0
	MOVQ R9, DI
	MOVQ R13, SI
	MOVQ R12, CX
rows8:
	VBROADCASTSS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $4, SI
	ADDQ R10, DI
	DECQ CX
	JNZ  rows8
	VMOVUPS Y0, (R8)
	ADDQ $32, R8
	ADDQ $32, R9
	SUBQ $8, R11
	JMP  cols8
done:
	VZEROUPPER
	RET
