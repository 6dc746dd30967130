package aesgcm

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// sealRef is AES-GCM from crypto/aes's block cipher and this package's
// GHASH reference, for a 12-byte nonce.
func sealRef(key, nonce, plain, ad []byte) []byte {
	blk, _ := aes.NewCipher(key)
	var h [16]byte
	blk.Encrypt(h[:], h[:])
	hk := hashKey(h[:])
	var j0 [16]byte
	copy(j0[:], nonce)
	j0[15] = 1
	out := make([]byte, len(plain))
	ctr := j0
	for off := 0; off < len(plain); off += 16 {
		binary.BigEndian.PutUint32(ctr[12:], binary.BigEndian.Uint32(ctr[12:])+1)
		var ks [16]byte
		blk.Encrypt(ks[:], ctr[:])
		for i := off; i < min(off+16, len(plain)); i++ {
			out[i] = plain[i] ^ ks[i-off]
		}
	}
	pad := func(b []byte) []byte { return append(bytes.Clone(b), make([]byte, (16-len(b)%16)%16)...) }
	var acc elem
	acc = ghashRef(hk, acc, pad(ad))
	acc = ghashRef(hk, acc, pad(out))
	var lens [16]byte
	binary.BigEndian.PutUint64(lens[:8], uint64(len(ad))*8)
	binary.BigEndian.PutUint64(lens[8:], uint64(len(plain))*8)
	acc = ghashRef(hk, acc, lens[:])
	var tag, ek [16]byte
	acc.store(tag[:])
	blk.Encrypt(ek[:], j0[:])
	for i := range tag {
		tag[i] ^= ek[i]
	}
	return append(out, tag[:]...)
}

func TestReferenceMatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		key, nonce := make([]byte, 16), make([]byte, 12)
		plain, ad := make([]byte, n), make([]byte, r.IntN(40))
		for _, b := range [][]byte{key, nonce, plain, ad} {
			for i := range b {
				b[i] = byte(r.Uint32())
			}
		}
		blk, _ := aes.NewCipher(key)
		g, _ := cipher.NewGCM(blk)
		want := g.Seal(nil, nonce, plain, ad)
		if got := sealRef(key, nonce, plain, ad); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: reference %x, crypto/cipher %x", n, got, want)
		}
	}
}
