package aesgcm

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

func stdGCM(t testing.TB, key []byte) cipher.AEAD {
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func fast(t testing.TB, key []byte) *gcm {
	if !Fast() {
		t.Skip("this CPU lacks VAES, VPCLMULQDQ or AVX-512: New returns crypto/cipher's GCM")
	}
	return newFast(key)
}

func fill(r *rand.Rand, b []byte) []byte {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestSealMatchesStdlib: every length up to 2,100 bytes (the 16-, 4- and
// 1-block paths and every tail), a few large ones across chunk borders,
// additional data of several lengths, and Open of each.
func TestSealMatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	key := fill(r, make([]byte, 16))
	g, ref := fast(t, key), stdGCM(t, key)
	lens := []int{16<<10 - 1, 16 << 10, 16<<10 + 17, 64 << 10, 64<<10 + 16, 1<<20 + 3}
	for n := range 2100 {
		lens = append(lens, n)
	}
	for _, n := range lens {
		nonce := fill(r, make([]byte, 12))
		plain := fill(r, make([]byte, n))
		ad := fill(r, make([]byte, []int{0, 4, 16, 37, 300}[n%5]))
		want := ref.Seal(nil, nonce, plain, ad)
		got := g.Seal([]byte("prefix"), nonce, plain, ad)
		if !bytes.Equal(got[6:], want) || string(got[:6]) != "prefix" {
			t.Fatalf("%d bytes, %d of additional data: sealed differently from crypto/cipher", n, len(ad))
		}
		back, err := g.Open(nil, nonce, want, ad)
		if err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("%d bytes: Open: %v", n, err)
		}
		// In place, as the bulk frames do.
		buf := append([]byte(nil), plain...)
		if sealed := g.Seal(buf[:0], nonce, buf, ad); !bytes.Equal(sealed, want) {
			t.Fatalf("%d bytes: sealed in place differently", n)
		}
	}
}

// TestOpenRefusesForgeries: a flipped bit anywhere (ciphertext, tag,
// additional data, nonce) fails to open and leaves dst's spare capacity
// zero (the one-pass part of Open wrote plaintext there, then cleared it).
func TestOpenRefusesForgeries(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	key := fill(r, make([]byte, 16))
	g := fast(t, key)
	nonce, plain, ad := fill(r, make([]byte, 12)), fill(r, make([]byte, 700)), []byte("header")
	sealed := g.Seal(nil, nonce, plain, ad)
	try := func(what string, n, ct, a []byte) {
		t.Helper()
		dst := make([]byte, 0, len(ct))
		if out, err := g.Open(dst, n, ct, a); err == nil || out != nil {
			t.Fatalf("%s: opened", what)
		}
		if bytes.ContainsFunc(dst[:cap(dst)], func(c rune) bool { return c != 0 }) {
			t.Fatalf("%s: a forged message wrote to dst", what)
		}
	}
	for i := 0; i < len(sealed)*8; i += 7 {
		bad := bytes.Clone(sealed)
		bad[i/8] ^= 1 << (i % 8)
		try("ciphertext bit", nonce, bad, ad)
	}
	try("additional data", nonce, sealed, []byte("headeR"))
	badNonce := bytes.Clone(nonce)
	badNonce[11] ^= 1
	try("nonce", badNonce, sealed, ad)
	try("truncated", nonce, sealed[:len(sealed)-1], ad)
	try("shorter than a tag", nonce, sealed[:15], ad)
}

// TestGHASHKernelMatchesReference checks the 16-block and 1-block paths
// of ghashAsm against ghashRef, from a non-zero running hash.
func TestGHASHKernelMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	g := fast(t, fill(r, make([]byte, 16)))
	for _, blocks := range []int{1, 2, 15, 16, 17, 31, 32, 33, 100} {
		data := fill(r, make([]byte, 16*blocks))
		start := elem{r.Uint64(), r.Uint64()}
		var acc [16]byte
		binary.LittleEndian.PutUint64(acc[:8], start.lo)
		binary.LittleEndian.PutUint64(acc[8:], start.hi)
		ghashAsm(&g.h, &acc, &data[0], len(data))
		want := ghashRef(g.ref, start, data)
		if got := (elem{binary.LittleEndian.Uint64(acc[:8]), binary.LittleEndian.Uint64(acc[8:])}); got != want {
			t.Fatalf("%d blocks: kernel %x, reference %x", blocks, got, want)
		}
	}
}

// TestCounterWraps: GCM's count is the last 32 bits, wrapping without a
// carry into the nonce; the kernel's lanes must do the same.
func TestCounterWraps(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	key := fill(r, make([]byte, 16))
	g := fast(t, key)
	blk, _ := aes.NewCipher(key)
	var c [16]byte
	fill(r, c[:12])
	binary.BigEndian.PutUint32(c[12:], 0xffffffff-5)
	start := c
	src := fill(r, make([]byte, 512))
	got := make([]byte, 512)
	g.xorStream(&c, got, src)
	want := make([]byte, 512)
	k := start
	for off := 0; off < 512; off += 16 {
		var ks [16]byte
		blk.Encrypt(ks[:], k[:])
		for i := range 16 {
			want[off+i] = src[off+i] ^ ks[i]
		}
		binary.BigEndian.PutUint32(k[12:], binary.BigEndian.Uint32(k[12:])+1)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the key stream differs across the wrap of the 32-bit count")
	}
	if c != k {
		t.Fatalf("counter after: %x, want %x", c, k)
	}
}

func TestNewFallsBack(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		key := make([]byte, n)
		a, err := New(key)
		if err != nil {
			t.Fatal(err)
		}
		_, isFast := a.(*gcm)
		if want := Fast() && n == 16; isFast != want {
			t.Fatalf("%d-byte key: fast AEAD %v, want %v", n, isFast, want)
		}
		if a.NonceSize() != 12 || a.Overhead() != 16 {
			t.Fatalf("%d-byte key: nonce %d, overhead %d", n, a.NonceSize(), a.Overhead())
		}
	}
	if _, err := New(make([]byte, 15)); err == nil {
		t.Fatal("a 15-byte key was accepted")
	}
}

func FuzzSealOpen(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), []byte("nonce-12byte"), []byte("plain"), []byte("ad"), uint16(0))
	f.Fuzz(func(t *testing.T, key, nonce, plain, ad []byte, flip uint16) {
		if len(key) < 16 || len(nonce) < 12 {
			return
		}
		key, nonce = key[:16], nonce[:12]
		g, ref := fast(t, key), stdGCM(t, key)
		want := ref.Seal(nil, nonce, plain, ad)
		if got := g.Seal(nil, nonce, plain, ad); !bytes.Equal(got, want) {
			t.Fatalf("sealed differently from crypto/cipher")
		}
		bad := bytes.Clone(want)
		bad[int(flip)%len(bad)] ^= 1 << (flip >> 13)
		_, errRef := ref.Open(nil, nonce, bad, ad)
		out, err := g.Open(nil, nonce, bad, ad)
		if (err == nil) != (errRef == nil) {
			t.Fatalf("Open: %v, crypto/cipher: %v", err, errRef)
		}
		if err == nil && !bytes.Equal(out, plain) {
			t.Fatal("opened to other bytes")
		}
	})
}

// BenchmarkSeal and BenchmarkOpen set this package's AEAD beside
// crypto/cipher's on 64 KiB, the bulk frames' size.
func BenchmarkSeal(b *testing.B) { benchAEAD(b, true) }
func BenchmarkOpen(b *testing.B) { benchAEAD(b, false) }

func benchAEAD(b *testing.B, seal bool) {
	key := make([]byte, 16)
	for _, impl := range []string{"crypto-cipher", "aesgcm"} {
		b.Run(impl, func(b *testing.B) {
			var a cipher.AEAD = stdGCM(b, key)
			if impl == "aesgcm" {
				a = fast(b, key)
			}
			nonce, plain := make([]byte, 12), make([]byte, 64<<10)
			ct := a.Seal(nil, nonce, plain, nil)
			buf := make([]byte, 0, len(ct))
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if seal {
					a.Seal(buf[:0], nonce, plain, nil)
				} else if _, err := a.Open(buf[:0], nonce, ct, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKernels times the two passes apart on 64 KiB in cache.
func BenchmarkKernels(b *testing.B) {
	g := fast(b, make([]byte, 16))
	buf := make([]byte, 64<<10)
	b.Run("ctr", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		var c [16]byte
		for b.Loop() {
			ctrAsm(&g.rk, &c, &buf[0], &buf[0], len(buf))
		}
	})
	b.Run("ghash", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		var acc [16]byte
		for b.Loop() {
			ghashAsm(&g.h, &acc, &buf[0], len(buf))
		}
	})
}
