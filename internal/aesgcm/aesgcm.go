package aesgcm

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/fips140"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"unsafe"
)

const (
	// NonceSize and Overhead are GCM's standard nonce and tag sizes, the
	// only ones this package's AEAD has.
	NonceSize = 12
	Overhead  = 16

	// maxPlain is GCM's limit on one message: 2^32 - 2 blocks.
	maxPlain = (1<<32 - 2) * 16
)

var errOpen = errors.New("aesgcm: message authentication failed")

// New returns AES-GCM under key with a 12-byte nonce and a 16-byte tag:
// this package's on CPUs with the instructions its kernels need and a
// 16-byte key, crypto/cipher's otherwise.
func New(key []byte) (cipher.AEAD, error) {
	if !Fast() || len(key) != 16 {
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(b)
	}
	return newFast(key), nil
}

// Fast reports whether New returns this package's AEAD for a 16-byte key
// on this CPU: it has the instructions, and Go's FIPS 140-3 mode is off
// (in it, every AES-GCM is the validated module's, crypto/cipher's).
func Fast() bool { return hasKernels && !fips140.Enabled() }

// gcm is the AEAD of the kernels.
type gcm struct {
	rk  [176]byte
	h   [256]byte // H^16..H^1, each as two little-endian halves (lo, hi)
	ref elem      // H^1, for the reference tests
}

func newFast(key []byte) *gcm {
	g := new(gcm)
	expandKeyAsm((*[16]byte)(key), &g.rk)
	var zero, hraw [64]byte
	var c [16]byte // the counter block 0^128: the first key stream block is H
	ctrAsm(&g.rk, &c, &hraw[0], &zero[0], 64)
	g.ref = hashKey(hraw[:16])
	for i, p := range powers(g.ref, 16) {
		binary.LittleEndian.PutUint64(g.h[16*i:], p.lo)
		binary.LittleEndian.PutUint64(g.h[16*i+8:], p.hi)
	}
	return g
}

func (g *gcm) NonceSize() int { return NonceSize }
func (g *gcm) Overhead() int  { return Overhead }

// xorStream XORs src with the key stream from counter block c into dst
// (same length), advancing c.
func (g *gcm) xorStream(c *[16]byte, dst, src []byte) {
	n := len(src) &^ 63
	if n > 0 {
		ctrAsm(&g.rk, c, &dst[0], &src[0], n)
	}
	if rest := len(src) - n; rest > 0 {
		var buf [64]byte
		copy(buf[:], src[n:])
		ctrAsm(&g.rk, c, &buf[0], &buf[0], 64)
		copy(dst[n:], buf[:rest])
	}
}

// hash adds data to acc, zero-padding a last partial block.
func (g *gcm) hash(acc *[16]byte, data []byte) {
	n := len(data) &^ 15
	if n > 0 {
		ghashAsm(&g.h, acc, &data[0], n)
	}
	if n < len(data) {
		var b [16]byte
		copy(b[:], data[n:])
		ghashAsm(&g.h, acc, &b[0], 16)
	}
}

// tag finishes the hash of ad and ciphertext ct into the tag under j0.
func (g *gcm) tag(acc *[16]byte, j0 *[16]byte, adLen, ctLen int) [16]byte {
	var lens [16]byte
	binary.BigEndian.PutUint64(lens[:8], uint64(adLen)*8)
	binary.BigEndian.PutUint64(lens[8:], uint64(ctLen)*8)
	ghashAsm(&g.h, acc, &lens[0], 16)
	var t [16]byte
	elem{lo: binary.LittleEndian.Uint64(acc[:8]), hi: binary.LittleEndian.Uint64(acc[8:])}.store(t[:])
	var ek, zero [64]byte
	c := *j0
	ctrAsm(&g.rk, &c, &ek[0], &zero[0], 64)
	subtle.XORBytes(t[:], t[:], ek[:16])
	return t
}

func counter(nonce []byte) (j0, c [16]byte) {
	copy(j0[:], nonce)
	j0[15] = 1
	c = j0
	c[15] = 2
	return j0, c
}

// Seal appends the ciphertext of plaintext and its tag to dst, as
// cipher.AEAD says (dst and plaintext may overlap exactly or not at all).
func (g *gcm) Seal(dst, nonce, plaintext, additionalData []byte) []byte {
	if len(nonce) != NonceSize {
		panic("aesgcm: incorrect nonce length given to GCM")
	}
	if uint64(len(plaintext)) > maxPlain {
		panic("aesgcm: message too large for GCM")
	}
	ret, out := sliceForAppend(dst, len(plaintext)+Overhead)
	if inexactOverlap(out, plaintext) {
		panic("aesgcm: invalid buffer overlap")
	}
	j0, c := counter(nonce)
	var acc [16]byte
	g.hash(&acc, additionalData)
	ct := out[:len(plaintext)]
	n := len(plaintext) &^ 255
	if n > 0 {
		sealAsm(&g.rk, &g.h, &c, &acc, &ct[0], &plaintext[0], n)
	}
	g.xorStream(&c, ct[n:], plaintext[n:])
	g.hash(&acc, ct[n:])
	t := g.tag(&acc, &j0, len(additionalData), len(plaintext))
	copy(out[len(plaintext):], t[:])
	return ret
}

// Open authenticates ciphertext and additionalData and, if they are
// authentic, appends the plaintext to dst. It decrypts and hashes in one
// pass; when the tag does not match, it zeroes what it wrote to dst's
// spare capacity and returns an error, as crypto/cipher's GCM does.
func (g *gcm) Open(dst, nonce, ciphertext, additionalData []byte) ([]byte, error) {
	if len(nonce) != NonceSize {
		panic("aesgcm: incorrect nonce length given to GCM")
	}
	if len(ciphertext) < Overhead || uint64(len(ciphertext)) > maxPlain+Overhead {
		return nil, errOpen
	}
	ct, want := ciphertext[:len(ciphertext)-Overhead], ciphertext[len(ciphertext)-Overhead:]
	ret, out := sliceForAppend(dst, len(ct))
	if inexactOverlap(out, ciphertext) {
		panic("aesgcm: invalid buffer overlap")
	}
	j0, c := counter(nonce)
	var acc [16]byte
	g.hash(&acc, additionalData)
	n := len(ct) &^ 255
	if n > 0 {
		openAsm(&g.rk, &g.h, &c, &acc, &out[0], &ct[0], n)
	}
	g.hash(&acc, ct[n:])
	t := g.tag(&acc, &j0, len(additionalData), len(ct))
	if subtle.ConstantTimeCompare(t[:], want) != 1 {
		clear(out[:n])
		return nil, errOpen
	}
	g.xorStream(&c, out[n:], ct[n:])
	return ret, nil
}

// sliceForAppend extends in by n bytes, returning the whole slice and the
// extension (the idiom of crypto/cipher).
func sliceForAppend(in []byte, n int) (head, tail []byte) {
	if total := len(in) + n; cap(in) >= total {
		head = in[:total]
	} else {
		head = make([]byte, total)
		copy(head, in)
	}
	return head, head[len(in):]
}

// inexactOverlap reports whether x and y share memory at any position
// other than the same one (crypto/internal/alias's rule for AEADs).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	return anyOverlap(x, y)
}

func anyOverlap(x, y []byte) bool {
	return uintptr(unsafe.Pointer(&x[0])) <= uintptr(unsafe.Pointer(&y[len(y)-1])) &&
		uintptr(unsafe.Pointer(&y[0])) <= uintptr(unsafe.Pointer(&x[len(x)-1]))
}
