package aesgcm

import (
	"encoding/binary"
)

// elem is an element of GHASH's field in the representation the
// assembly works in (see doc.go): a block with its 16 bytes reversed, as
// the two 64-bit halves of an XMM lane, so lo holds bytes 8–15 of the
// block read big-endian and hi bytes 0–7.
type elem struct{ lo, hi uint64 }

// load reads a GCM block into the assembly's representation.
func load(b []byte) elem {
	return elem{lo: binary.BigEndian.Uint64(b[8:16]), hi: binary.BigEndian.Uint64(b[0:8])}
}

// store writes e back as a GCM block.
func (e elem) store(b []byte) {
	binary.BigEndian.PutUint64(b[0:8], e.hi)
	binary.BigEndian.PutUint64(b[8:16], e.lo)
}

// gfpolyHi is the high half of the reduction constant: the reversed
// representation of x^128 + x^7 + x^2 + x + 1 read as x^128 + x^127 +
// x^126 + x^121 + 1, of which the multiplication needs x^63 + x^62 + x^57
// (times x^64).
const gfpolyHi = 0xc2 << 56

// clmul is a 64×64 → 128-bit carry-less product, with no branch or
// memory access that depends on its operands (it runs only when a key's
// powers are computed, and as the reference the assembly is tested
// against).
func clmul(a, b uint64) (lo, hi uint64) {
	for i := range 64 {
		m := -(b >> i & 1) // all ones when bit i of b is set
		lo ^= a << i & m
		if i > 0 {
			hi ^= a >> (64 - i) & m
		}
	}
	return lo, hi
}

// mul is GHASH's product of a and b when one of them carries the extra
// factor x^-1 that hashKey gives the key: a schoolbook 128×128 product
// (low, middle and high 128-bit parts) whose low 128 bits are cancelled
// by two folds with the reduction constant, 64 bits at a time. The
// assembly does the same operations on each 128-bit lane.
func mul(a, b elem) elem {
	var lo, mi, hi elem
	lo.lo, lo.hi = clmul(a.lo, b.lo)
	m0l, m0h := clmul(a.lo, b.hi)
	m1l, m1h := clmul(a.hi, b.lo)
	mi = elem{m0l ^ m1l, m0h ^ m1h}
	hi.lo, hi.hi = clmul(a.hi, b.hi)
	return reduce(lo, mi, hi)
}

// reduce folds the low part into the middle one and the middle into the
// high one, each fold adding a multiple of the polynomial that cancels 64
// low bits: t = X.lo·(x^63+x^62+x^57), then Y ^= swap(X) ^ t.
func reduce(lo, mi, hi elem) elem {
	tl, th := clmul(lo.lo, gfpolyHi)
	mi.lo ^= lo.hi ^ tl
	mi.hi ^= lo.lo ^ th
	tl, th = clmul(mi.lo, gfpolyHi)
	hi.lo ^= mi.hi ^ tl
	hi.hi ^= mi.lo ^ th
	return hi
}

// hashKey turns the raw hash key H = E(K, 0^128) into the form mul
// expects: reversed, then times x^-1, which in the reversed reading is a
// left shift by one bit with a fold of the bit shifted out.
func hashKey(h []byte) elem {
	e := load(h)
	carry := -(e.hi >> 63)
	e.hi = e.hi<<1 | e.lo>>63
	e.lo <<= 1
	e.hi ^= gfpolyHi & carry
	e.lo ^= 1 & carry
	return e
}

// powers returns H^n ... H^1 (highest first, the order the assembly
// loads them in lanes) of the prepared key h.
func powers(h elem, n int) []elem {
	p := make([]elem, n)
	p[n-1] = h
	for i := n - 2; i >= 0; i-- {
		p[i] = mul(p[i+1], h)
	}
	return p
}

// ghashRef adds the 16-byte blocks of data (len a multiple of 16) to the
// running hash acc: acc = (acc ^ block)·H for each block. It is the
// reference the assembly is tested against.
func ghashRef(h elem, acc elem, data []byte) elem {
	for ; len(data) >= 16; data = data[16:] {
		b := load(data)
		acc = mul(elem{acc.lo ^ b.lo, acc.hi ^ b.hi}, h)
	}
	return acc
}
