// Command asm generates internal/aesgcm's kernels (aesgcm_amd64.s and
// their Go declarations, stubs_amd64.go) with avo. Run it from the
// package:
//
//	go generate troupe/internal/aesgcm
//
// It is a module of its own, so that avo is no dependency of the main
// module and `go test ./...` does not see it.
//
// The kernels need AVX-512 (F, BW, VL), VAES and VPCLMULQDQ; the package
// calls them only when the CPU has all of them. See the package's doc.go
// for the representation of GHASH's field they work in; ghash.go holds
// the same arithmetic in Go, the reference they are tested against.
package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

var bswapMask, gfpoly, ctrPattern, inc4 Mem

func main() {
	ConstraintExpr("amd64,!purego")

	// bswapMask reverses the 16 bytes of a lane (VPSHUFB).
	bswapMask = GLOBL("bswapMask", RODATA|NOPTR)
	DATA(0, U64(0x08090a0b0c0d0e0f))
	DATA(8, U64(0x0001020304050607))
	// gfpoly is the reduction constant: x^63 + x^62 + x^57 in the high
	// half (and the 1 of the polynomial in the low half, which the
	// folds do not use).
	gfpoly = GLOBL("gfpoly", RODATA|NOPTR)
	DATA(0, U64(1))
	DATA(8, U64(0xc2<<56))
	// ctrPattern adds 0, 1, 2, 3 to the counters of a vector's lanes,
	// inc4 adds 4 to each.
	ctrPattern = GLOBL("ctrPattern", RODATA|NOPTR)
	for i := range 4 {
		DATA(16*i, U64(uint64(i)))
		DATA(16*i+8, U64(0))
	}
	inc4 = GLOBL("inc4", RODATA|NOPTR)
	for i := range 4 {
		DATA(16*i, U64(4))
		DATA(16*i+8, U64(0))
	}

	expandKey()
	ctr()
	ghash()
	crypt("sealAsm", true)
	crypt("openAsm", false)
	Generate()
}

// expandKey emits the AES-128 key schedule with AESKEYGENASSIST, which
// runs in constant time (a table-driven schedule would index memory by
// key bytes).
func expandKey() {
	TEXT("expandKeyAsm", NOSPLIT, "func(key *[16]byte, rk *[176]byte)")
	Pragma("noescape")
	Doc("expandKeyAsm writes the 11 round keys of AES-128 under key to rk.")
	key, rk := Load(Param("key"), GP64()), Load(Param("rk"), GP64())
	k, t, s := XMM(), XMM(), XMM()
	VMOVDQU(Mem{Base: key}, k)
	VMOVDQU(k, Mem{Base: rk})
	for i, rcon := range []uint8{1, 2, 4, 8, 16, 32, 64, 128, 27, 54} {
		VAESKEYGENASSIST(U8(rcon), k, t)
		VPSHUFD(U8(0xff), t, t) // RotWord(SubWord(w3)) ^ rcon, in every word
		for range 3 {           // k ^= k<<32 ^ k<<64 ^ k<<96: the running XOR of the words
			VPSLLDQ(U8(4), k, s)
			VPXOR(s, k, k)
		}
		VPXOR(t, k, k)
		VMOVDQU(k, Mem{Base: rk, Disp: 16 * (i + 1)})
	}
	RET()
}

// aesRounds encrypts the blocks of bs (4 per vector) with the broadcast
// round keys ks, round by round across the vectors so that the VAES
// units have independent work.
func aesRounds(ks, bs []reg.VecVirtual) {
	for _, b := range bs {
		VPXORD(ks[0], b, b)
	}
	for r := 1; r < 10; r++ {
		for _, b := range bs {
			VAESENC(ks[r], b, b)
		}
	}
	for _, b := range bs {
		VAESENCLAST(ks[10], b, b)
	}
}

// ctr emits AES-CTR with GCM's counter: the last 4 bytes of the block
// count big-endian and wrap without carrying into the nonce. The counters
// are kept reversed (the count then is the low dword of each lane, which
// VPADDD increments) and reversed back before encryption.
func ctr() {
	TEXT("ctrAsm", NOSPLIT, "func(rk *[176]byte, ctr *[16]byte, dst, src *byte, n int)")
	Pragma("noescape")
	Doc("ctrAsm XORs n bytes of src (n a multiple of 64) with the key stream",
		"of AES-128 under rk in counter mode from the block *ctr, into dst,",
		"and advances *ctr past the blocks it used.")
	rk, cp := Load(Param("rk"), GP64()), Load(Param("ctr"), GP64())
	dst, src, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
	ks := roundKeys(rk)
	bswap, c, inc := ZMM(), ZMM(), ZMM()
	VBROADCASTI32X4(bswapMask, bswap)
	loadCounters(cp, bswap, c, inc)

	blocks := func(k int) {
		bs := nextCounters(k, bswap, c, inc)
		aesRounds(ks, bs)
		for j, b := range bs {
			VPXORD(Mem{Base: src, Disp: 64 * j}, b, b)
			VMOVDQU64(b, Mem{Base: dst, Disp: 64 * j})
		}
		ADDQ(U32(64*k), src)
		ADDQ(U32(64*k), dst)
		SUBQ(U32(64*k), n)
	}
	Label("ctr_loop32")
	CMPQ(n, U32(512))
	JB(LabelRef("ctr_loop4"))
	blocks(8)
	JMP(LabelRef("ctr_loop32"))
	Label("ctr_loop4")
	CMPQ(n, U32(64))
	JB(LabelRef("ctr_done"))
	blocks(1)
	JMP(LabelRef("ctr_loop4"))
	Label("ctr_done")
	VPSHUFB(bswap, c, c) // lane 0 holds the next counter
	VMOVDQU(c.AsX(), Mem{Base: cp})
	VZEROUPPER()
	RET()
}

// mulNoReduce adds the unreduced products of the lanes of a and b to lo,
// mi and hi (set instead of added when first).
func mulNoReduce(a, b, lo, mi, hi reg.VecVirtual, first bool) {
	if first {
		VPCLMULQDQ(U8(0x00), a, b, lo)
		VPCLMULQDQ(U8(0x01), a, b, mi)
		t := ZMM()
		VPCLMULQDQ(U8(0x10), a, b, t)
		VPXORD(t, mi, mi)
		VPCLMULQDQ(U8(0x11), a, b, hi)
		return
	}
	t0, t1, t2, t3 := ZMM(), ZMM(), ZMM(), ZMM()
	VPCLMULQDQ(U8(0x00), a, b, t0) // a.lo·b.lo
	VPCLMULQDQ(U8(0x01), a, b, t1) // a.lo·b.hi
	VPCLMULQDQ(U8(0x10), a, b, t2) // a.hi·b.lo
	VPCLMULQDQ(U8(0x11), a, b, t3) // a.hi·b.hi
	VPXORD(t0, lo, lo)
	VPTERNLOGD(U8(0x96), t2, t1, mi)
	VPXORD(t3, hi, hi)
}

// reduceInto folds lo into mi and mi into hi (see reduce in ghash.go):
// hi then holds each lane's reduced product.
func reduceInto(lo, mi, hi, poly reg.VecVirtual) {
	t := ZMM()
	VPCLMULQDQ(U8(0x01), lo, poly, t) // lo.lo · poly.hi
	VPSHUFD(U8(0x4e), lo, lo)         // swap lo's halves
	VPTERNLOGD(U8(0x96), t, lo, mi)
	VPCLMULQDQ(U8(0x01), mi, poly, t)
	VPSHUFD(U8(0x4e), mi, mi)
	VPTERNLOGD(U8(0x96), t, mi, hi)
}

// ghash emits the GHASH update over whole blocks: 16 blocks at a time
// against H^16..H^1 with one reduction, then one block at a time.
func ghash() {
	TEXT("ghashAsm", NOSPLIT, "func(h *[256]byte, acc *[16]byte, data *byte, n int)")
	Pragma("noescape")
	Doc("ghashAsm adds n bytes of data (n a multiple of 16) to the hash *acc:",
		"acc = (acc ^ block)·H for each block. h holds H^16..H^1 and acc the",
		"hash, in the representation of doc.go.")
	h, accp := Load(Param("h"), GP64()), Load(Param("acc"), GP64())
	data, n := Load(Param("data"), GP64()), Load(Param("n"), GP64())
	bswap, poly, acc := ZMM(), ZMM(), ZMM()
	VBROADCASTI32X4(bswapMask, bswap)
	VBROADCASTI32X4(gfpoly, poly)
	VMOVDQU(Mem{Base: accp}, acc.AsX()) // zeroes the upper lanes

	CMPQ(n, U32(256))
	JB(LabelRef("ghash_loop1"))
	hp := make([]reg.VecVirtual, 4) // hp[j]: the powers for the blocks of vector j
	for j := range hp {
		hp[j] = ZMM()
		VMOVDQU64(Mem{Base: h, Disp: 64 * j}, hp[j])
	}
	Label("ghash_loop16")
	CMPQ(n, U32(256))
	JB(LabelRef("ghash_loop1"))
	ds := make([]reg.VecVirtual, 4)
	for j := range ds {
		ds[j] = ZMM()
		VMOVDQU64(Mem{Base: data, Disp: 64 * j}, ds[j])
	}
	hash16(ds, hp, bswap, poly, acc)
	ADDQ(U32(256), data)
	SUBQ(U32(256), n)
	JMP(LabelRef("ghash_loop16"))

	Label("ghash_loop1")
	CMPQ(n, U32(16))
	JB(LabelRef("ghash_done"))
	h1 := ZMM()
	VMOVDQU(Mem{Base: h, Disp: 240}, h1.AsX())
	Label("ghash_next1")
	d := ZMM()
	VMOVDQU(Mem{Base: data}, d.AsX())
	VPSHUFB(bswap.AsX(), d.AsX(), d.AsX())
	VPXORD(acc.AsX(), d.AsX(), d.AsX())
	lo1, mi1 := ZMM(), ZMM()
	mulNoReduce(d, h1, lo1, mi1, acc, true) // on whole vectors: lanes 1–3 are zero
	reduceInto(lo1, mi1, acc, poly)
	ADDQ(U32(16), data)
	SUBQ(U32(16), n)
	CMPQ(n, U32(16))
	JAE(LabelRef("ghash_next1"))

	Label("ghash_done")
	VMOVDQU(acc.AsX(), Mem{Base: accp})
	VZEROUPPER()
	RET()
}

// crypt emits CTR and GHASH in one pass over whole 256-byte groups: each
// group's 16 blocks are encrypted (or decrypted) and then the 16
// ciphertext blocks hashed against H^16..H^1. The AES rounds (VAES) and
// the carry-less products (VPCLMULQDQ) go to different execution units,
// and the only values one group passes to the next are the counter and
// the hash, so the CPU can overlap one group's hashing with the next
// one's rounds. Measured on 64 KiB in cache (BenchmarkOpen, BenchmarkSeal
// against BenchmarkKernels): opening 1.3–1.45 times the speed of the two
// passes one after the other; sealing, whose hash must wait for its
// group's rounds, about the same speed as the two passes.
func crypt(name string, seal bool) {
	TEXT(name, NOSPLIT, "func(rk *[176]byte, h *[256]byte, ctr, acc *[16]byte, dst, src *byte, n int)")
	Pragma("noescape")
	what := "opens (decrypts, hashing the ciphertext src)"
	if seal {
		what = "seals (encrypts, hashing the ciphertext written to dst)"
	}
	Doc(name+" "+what+" n bytes",
		"(n a multiple of 256) with AES-128 under rk in counter mode from *ctr",
		"and GHASH into *acc, and advances *ctr. h and acc as for ghashAsm.")
	rk, h := Load(Param("rk"), GP64()), Load(Param("h"), GP64())
	cp, accp := Load(Param("ctr"), GP64()), Load(Param("acc"), GP64())
	dst, src, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
	ks := roundKeys(rk)
	bswap, poly, c, inc, acc := ZMM(), ZMM(), ZMM(), ZMM(), ZMM()
	VBROADCASTI32X4(bswapMask, bswap)
	VBROADCASTI32X4(gfpoly, poly)
	loadCounters(cp, bswap, c, inc)
	VMOVDQU(Mem{Base: accp}, acc.AsX())
	hp := make([]reg.VecVirtual, 4)
	for j := range hp {
		hp[j] = ZMM()
		VMOVDQU64(Mem{Base: h, Disp: 64 * j}, hp[j])
	}

	loop, done := name+"_loop", name+"_done"
	Label(loop)
	CMPQ(n, U32(256))
	JB(LabelRef(done))
	bs := nextCounters(4, bswap, c, inc)
	aesRounds(ks, bs)
	ds := make([]reg.VecVirtual, 4) // the ciphertext, to hash
	for j, b := range bs {
		if seal {
			VPXORD(Mem{Base: src, Disp: 64 * j}, b, b)
			VMOVDQU64(b, Mem{Base: dst, Disp: 64 * j})
			ds[j] = b
		} else {
			ds[j] = ZMM()
			VMOVDQU64(Mem{Base: src, Disp: 64 * j}, ds[j])
			VPXORD(ds[j], b, b)
			VMOVDQU64(b, Mem{Base: dst, Disp: 64 * j})
		}
	}
	hash16(ds, hp, bswap, poly, acc)
	ADDQ(U32(256), src)
	ADDQ(U32(256), dst)
	SUBQ(U32(256), n)
	JMP(LabelRef(loop))

	Label(done)
	VPSHUFB(bswap, c, c)
	VMOVDQU(c.AsX(), Mem{Base: cp})
	VMOVDQU(acc.AsX(), Mem{Base: accp})
	VZEROUPPER()
	RET()
}

// roundKeys broadcasts the 11 round keys at rk to every lane of a vector
// each.
func roundKeys(rk reg.Register) []reg.VecVirtual {
	ks := make([]reg.VecVirtual, 11)
	for i := range ks {
		ks[i] = ZMM()
		VBROADCASTI32X4(Mem{Base: rk, Disp: 16 * i}, ks[i])
	}
	return ks
}

// loadCounters loads the counter block at cp into the lanes of c,
// reversed and counted on by 0, 1, 2, 3, and sets inc to add 4 to each.
func loadCounters(cp reg.Register, bswap, c, inc reg.VecVirtual) {
	VBROADCASTI32X4(Mem{Base: cp}, c)
	VPSHUFB(bswap, c, c)
	VPADDD(ctrPattern, c, c)
	VMOVDQU64(inc4, inc)
}

// nextCounters returns k vectors of the next 4k counter blocks, in GCM's
// byte order, ready for the AES rounds.
func nextCounters(k int, bswap, c, inc reg.VecVirtual) []reg.VecVirtual {
	bs := make([]reg.VecVirtual, k)
	for j := range bs {
		bs[j] = ZMM()
		VPSHUFB(bswap, c, bs[j])
		VPADDD(inc, c, c)
	}
	return bs
}

// sumLanes XORs the four 128-bit lanes of v into the low lane of acc (its
// upper lanes zeroed).
func sumLanes(v, acc reg.VecVirtual) {
	t0, t1, t2 := ZMM(), ZMM(), ZMM()
	VEXTRACTI32X4(U8(1), v, t0.AsX())
	VEXTRACTI32X4(U8(2), v, t1.AsX())
	VEXTRACTI32X4(U8(3), v, t2.AsX())
	VPXORD(t0.AsX(), v.AsX(), acc.AsX())
	VPTERNLOGD(U8(0x96), t1.AsX(), t2.AsX(), acc.AsX())
}

// hash16 adds the 16 blocks of ds (as loaded, in GCM's byte order; they
// are clobbered) to acc against the powers hp: acc = (acc ^ b0)·H^16 ^
// b1·H^15 ^ ... ^ b15·H, with one reduction.
func hash16(ds, hp []reg.VecVirtual, bswap, poly, acc reg.VecVirtual) {
	lo, mi, hi := ZMM(), ZMM(), ZMM()
	for j, d := range ds {
		VPSHUFB(bswap, d, d)
		if j == 0 {
			VPXORD(acc, d, d)
		}
		mulNoReduce(d, hp[j], lo, mi, hi, j == 0)
	}
	reduceInto(lo, mi, hi, poly)
	sumLanes(hi, acc)
}
