// Package aesgcm is AES-128-GCM for bulk data: the cipher of the sealed
// frames that carry objects between nodes (runtime/transport's Bulk).
//
// Why not crypto/cipher's GCM: Go's AES-GCM (crypto/internal/fips140/aes/gcm)
// uses AES-NI and PCLMULQDQ on 128-bit registers, one block per
// instruction. On CPUs with VAES and VPCLMULQDQ on AVX-512 (Intel since
// Ice Lake, AMD since Zen 4) four blocks fit in each instruction, and a
// fetch over TLS spends most of its CPU beyond plaintext's in the cipher
// (docs/performance.md). OpenSSL 3.0, Debian's, was no faster here. New
// returns this package's AEAD on such CPUs for 16-byte keys, and
// crypto/cipher's GCM everywhere else, and in Go's FIPS 140-3 mode; the two produce the same bytes
// (the tests compare them over every length up to a few kilobytes, and a
// fuzz test over any input).
//
// The kernels (aesgcm_amd64.s, declared in stubs_amd64.go) are generated
// by the avo program in _asm, a module of its own so that avo is no
// dependency of this module. After changing _asm/asm.go, regenerate them
// with
//
//	go generate troupe/internal/aesgcm
//
// and commit both files. ghash.go holds their field arithmetic in Go, the
// reference they are tested against.
//
// Representation. GCM maps the bits of a block to polynomial
// coefficients backwards (the first byte's high bit is x^0). The kernels
// skip that bit reflection and reverse only the bytes of each block
// (VPSHUFB); in the reversed reading a carry-less product gains a factor
// of x, which a key prepared as H·x^-1 cancels, and the product is
// reduced modulo x^128 + x^127 + x^126 + x^121 + 1 by two folds of 64
// bits with PCLMULQDQ. The counters of CTR mode are kept byte-reversed
// too, so that GCM's 32-bit big-endian count is a lane's low dword.
//
// The 256-byte groups of a message are encrypted and hashed in one pass
// (sealAsm, openAsm), the rest with the separate kernels (ctrAsm,
// ghashAsm). Side channels: AES rounds, carry-less products and the key
// schedule (AESKEYGENASSIST) run in constant time; Open compares tags
// with crypto/subtle, and when they differ zeroes the plaintext it wrote.
package aesgcm

//go:generate go run -C _asm . -out ../aesgcm_amd64.s -stubs ../stubs_amd64.go -pkg aesgcm
