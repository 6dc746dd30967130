// Command asm generates internal/reduce's AVX2 kernels (reduce_amd64.s and
// their Go declarations, stubs_amd64.go) with avo. Run it from the package:
//
//	go generate troupe/internal/reduce
//
// It is a module of its own, so that avo is no dependency of the main
// module and `go test ./...` does not see it.
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

func main() {
	ConstraintExpr("amd64,!purego")

	binary("addAVX2", "dst[i] += src[i] for i < n, n a positive multiple of 8.", func(m Mem, y reg.VecVirtual) { VADDPS(m, y, y) })
	binary("maxAVX2", "dst[i] = MAXPS(dst[i], src[i]): dst[i] > src[i] ? dst[i] : src[i], n a positive multiple of 8.", func(m Mem, y reg.VecVirtual) { VMAXPS(m, y, y) })
	scale()
	bf16ToF32()
	f32ToBF16()
	bf16Binary("addBF16AVX2", "dst[i] += float32(src[i]) for the bfloat16 bits src[i], i < n, n a positive multiple of 8.", func(w, y reg.VecVirtual) { VADDPS(w, y, y) })
	bf16Binary("maxBF16AVX2", "dst[i] = MAXPS(dst[i], float32(src[i])) for the bfloat16 bits src[i], n a positive multiple of 8.", func(w, y reg.VecVirtual) { VMAXPS(w, y, y) })

	Generate()
}

// loop emits the loop of a kernel over n elements (n a positive multiple
// of 8): blocks of unroll×8 elements while they last, then blocks of 8.
// body(k) handles k vectors of 8 elements and advances the pointers.
func loop(name string, n reg.Register, unroll int, body func(k int)) {
	big, tail, done := name+"_loop", name+"_tail", name+"_done"
	Label(big)
	CMPQ(n, U32(8*unroll))
	JL(LabelRef(tail))
	body(unroll)
	SUBQ(U32(8*unroll), n)
	JMP(LabelRef(big))
	Label(tail)
	CMPQ(n, U32(8))
	JL(LabelRef(done))
	body(1)
	SUBQ(U32(8), n)
	JMP(LabelRef(tail))
	Label(done)
	VZEROUPPER()
	RET()
}

// binary emits dst[i] = op(dst[i], src[i]) over float32.
func binary(name, doc string, op func(Mem, reg.VecVirtual)) {
	TEXT(name, NOSPLIT, "func(dst, src *float32, n int)")
	Pragma("noescape")
	Doc(doc)
	dst, src, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
	y := vecs(4)
	loop(name, n, 4, func(k int) {
		for i := range k {
			VMOVUPS(Mem{Base: dst, Disp: 32 * i}, y[i])
		}
		for i := range k {
			op(Mem{Base: src, Disp: 32 * i}, y[i])
		}
		for i := range k {
			VMOVUPS(y[i], Mem{Base: dst, Disp: 32 * i})
		}
		ADDQ(U32(32*k), dst)
		ADDQ(U32(32*k), src)
	})
}

func scale() {
	TEXT("scaleAVX2", NOSPLIT, "func(dst *float32, n int, s float32)")
	Pragma("noescape")
	Doc("dst[i] *= s for i < n, n a positive multiple of 8.")
	dst, n := Load(Param("dst"), GP64()), Load(Param("n"), GP64())
	s := YMM()
	b, err := Param("s").Resolve()
	if err != nil {
		panic(err)
	}
	VBROADCASTSS(b.Addr, s)
	y := vecs(4)
	loop("scaleAVX2", n, 4, func(k int) {
		for i := range k {
			VMULPS(Mem{Base: dst, Disp: 32 * i}, s, y[i])
		}
		for i := range k {
			VMOVUPS(y[i], Mem{Base: dst, Disp: 32 * i})
		}
		ADDQ(U32(32*k), dst)
	})
}

// bf16ToF32 widens: the bfloat16 bits are the float32's upper half.
func bf16ToF32() {
	TEXT("bf16ToF32AVX2", NOSPLIT, "func(dst *float32, src *uint16, n int)")
	Pragma("noescape")
	Doc("dst[i] = float32(src[i]) for the bfloat16 bits src[i], i < n, n a positive multiple of 8.")
	dst, src, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
	y := vecs(4)
	loop("bf16ToF32AVX2", n, 4, func(k int) {
		for i := range k {
			VPMOVZXWD(Mem{Base: src, Disp: 16 * i}, y[i])
			VPSLLD(U8(16), y[i], y[i])
		}
		for i := range k {
			VMOVUPS(y[i], Mem{Base: dst, Disp: 32 * i})
		}
		ADDQ(U32(32*k), dst)
		ADDQ(U32(16*k), src)
	})
}

// bf16Binary emits dst[i] = op(dst[i], widen(src[i])).
func bf16Binary(name, doc string, op func(w, y reg.VecVirtual)) {
	TEXT(name, NOSPLIT, "func(dst *float32, src *uint16, n int)")
	Pragma("noescape")
	Doc(doc)
	dst, src, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
	y, w := vecs(4), vecs(4)
	loop(name, n, 4, func(k int) {
		for i := range k {
			VPMOVZXWD(Mem{Base: src, Disp: 16 * i}, w[i])
			VPSLLD(U8(16), w[i], w[i])
			VMOVUPS(Mem{Base: dst, Disp: 32 * i}, y[i])
		}
		for i := range k {
			op(w[i], y[i])
		}
		for i := range k {
			VMOVUPS(y[i], Mem{Base: dst, Disp: 32 * i})
		}
		ADDQ(U32(32*k), dst)
		ADDQ(U32(16*k), src)
	})
}

// f32ToBF16 rounds as reduce.ToBF16 does, 8 lanes at a time:
//
//	u & 0x7fffffff > 0x7f800000 (a NaN): (u | 0x00400000) >> 16
//	otherwise:                           (u + 0x7fff + (u>>16)&1) >> 16
//
// The compare is signed, which is right as both sides are non-negative.
// VPACKUSDW packs two vectors' 16-bit results (no saturation: each is at
// most 0xffff) a 128-bit lane at a time; VPERMQ puts the lanes in order.
func f32ToBF16() {
	TEXT("f32ToBF16AVX2", NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Pragma("noescape")
	Doc("dst[i] = ToBF16(src[i]) for i < n, n a positive multiple of 8.")
	dst, src, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
	one, bias, abs, inf, quiet := bcast("bf16_one", 1), bcast("bf16_bias", 0x7fff), bcast("bf16_abs", 0x7fffffff), bcast("bf16_inf", 0x7f800000), bcast("bf16_quiet", 0x00400000)
	round := func(u reg.VecVirtual) {
		t, m := YMM(), YMM()
		VPAND(abs, u, m)
		VPCMPGTD(inf, m, m)
		VPSRLD(U8(16), u, t)
		VPAND(one, t, t)
		VPADDD(bias, t, t)
		VPADDD(u, t, t)
		VPOR(quiet, u, u)
		VPBLENDVB(m, u, t, u)
		VPSRLD(U8(16), u, u)
	}
	big, tail, done := "f32ToBF16AVX2_loop", "f32ToBF16AVX2_tail", "f32ToBF16AVX2_done"
	Label(big)
	CMPQ(n, U32(16))
	JL(LabelRef(tail))
	a, b := YMM(), YMM()
	VMOVDQU(Mem{Base: src}, a)
	VMOVDQU(Mem{Base: src, Disp: 32}, b)
	round(a)
	round(b)
	VPACKUSDW(b, a, a)
	VPERMQ(U8(0xd8), a, a)
	VMOVDQU(a, Mem{Base: dst})
	ADDQ(U32(64), src)
	ADDQ(U32(32), dst)
	SUBQ(U32(16), n)
	JMP(LabelRef(big))
	Label(tail)
	CMPQ(n, U32(8))
	JL(LabelRef(done))
	c := YMM()
	VMOVDQU(Mem{Base: src}, c)
	round(c)
	hi := XMM()
	VEXTRACTI128(U8(1), c, hi)
	VPACKUSDW(hi, c.AsX(), hi)
	VMOVDQU(hi, Mem{Base: dst})
	Label(done)
	VZEROUPPER()
	RET()
}

// bcast loads the 32-bit constant v into every lane of a new vector.
func bcast(name string, v uint32) reg.VecVirtual {
	m := GLOBL(name, RODATA|NOPTR)
	DATA(0, U32(v))
	y := YMM()
	VPBROADCASTD(m, y)
	return y
}

func vecs(k int) []reg.VecVirtual {
	y := make([]reg.VecVirtual, k)
	for i := range y {
		y[i] = YMM()
	}
	return y
}
