package reduce

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// lengths around the vector widths (8 and 16 lanes, unrolled by 4).
var lengths = []int{0, 1, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 63, 64, 100, 1000, 4099}

// f32Edges are float32 inputs that rounding to bfloat16 must get right.
var f32Edges = []uint32{
	0x00000000, 0x80000000, // ±0
	0x00000001, 0x80000001, 0x00007fff, 0x00008000, 0x00018000, 0x007fffff, 0x807fffff, // denormals, ties among them
	0x00800000, 0x3f800000, 0xbf800000,
	0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0xbf818000, // ties and their neighbours
	0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7fffff, 0x7f7effff, 0x7f7f0000, // max finite: rounds to Inf from the tie up
	0x7f800000, 0xff800000, // ±Inf
	0x7f800001, 0xff800001, 0x7fc00000, 0xffc00000, 0x7fbfffff, 0x7f80ffff, 0x7fff0000, 0x7fffffff, 0xffffffff, 0x7fa01234, // NaNs with payloads
}

func checkF32ToBF16(t *testing.T, bits []uint32) {
	t.Helper()
	src := make([]float32, len(bits))
	for i, u := range bits {
		src[i] = math.Float32frombits(u)
	}
	got := make([]uint16, len(src))
	F32ToBF16(got, src)
	for i, f := range src {
		if want := ToBF16(f); got[i] != want {
			t.Fatalf("F32ToBF16 of %#08x (element %d of %d) = %#04x, ToBF16 gives %#04x", bits[i], i, len(src), got[i], want)
		}
	}
}

// TestF32ToBF16Edges: the vector rounding gives ToBF16's bits for ties,
// max finite, denormals, zeros, infinities and NaNs, in every lane.
func TestF32ToBF16Edges(t *testing.T) {
	for _, n := range lengths {
		bits := make([]uint32, n)
		for i := range bits {
			bits[i] = f32Edges[i%len(f32Edges)]
		}
		checkF32ToBF16(t, bits)
	}
	if got := ToBF16(math.Float32frombits(0x7f7f8000)); got != 0x7f80 {
		t.Errorf("ToBF16(0x7f7f8000) = %#x, want +Inf 0x7f80", got)
	}
	if got := ToBF16(math.Float32frombits(0x7f800001)); got != 0x7fc0 {
		t.Errorf("ToBF16(0x7f800001) = %#x, want quiet NaN 0x7fc0", got)
	}
}

// TestF32ToBF16Random: a seeded sample of arbitrary bit patterns, and of
// patterns near the rounding boundaries (low half 0x7fff, 0x8000, 0x8001).
func TestF32ToBF16Random(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 16))
	bits := make([]uint32, 1<<20)
	for i := range bits {
		u := r.Uint32()
		if i%2 == 1 {
			u = u&0xffff0000 | uint32(0x7fff+r.IntN(3))
		}
		bits[i] = u
	}
	checkF32ToBF16(t, bits)
}

// TestBF16AllPatterns: every bfloat16 widens to the float32 with its bits
// on top, and rounds back to itself (a NaN to itself made quiet).
func TestBF16AllPatterns(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	f := make([]float32, len(src))
	BF16ToF32(f, src)
	back := make([]uint16, len(src))
	F32ToBF16(back, f)
	for i, b := range src {
		if got := math.Float32bits(f[i]); got != uint32(b)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", b, got)
		}
		want := b
		if b&0x7fff > 0x7f80 {
			want |= 0x40
		}
		if back[i] != want || back[i] != ToBF16(f[i]) {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x, want %#04x", b, back[i], want)
		}
	}
}

// TestBF16KernelsMatchGo: AddBF16 and MaxBF16 give the Go loops' bits,
// which are those of widening and then Add or Max.
func TestBF16KernelsMatchGo(t *testing.T) {
	for _, n := range lengths {
		a, b := inputs(n, uint64(n)+100)
		x := make([]uint16, n)
		F32ToBF16(x, b)
		for i := range x {
			if i%13 == 5 { // NaNs with payloads
				x[i] = 0x7f81 + uint16(i%0x7f) | uint16(i&1)<<15
			}
		}
		w := make([]float32, n)
		BF16ToF32(w, x)
		want := append([]float32(nil), a...)
		addGo(want, w)
		got := append([]float32(nil), a...)
		AddBF16(got, x)
		sameSums(t, got, want, a, x)

		want = append(want[:0], a...)
		maxGo(want, w)
		got = append(got[:0], a...)
		MaxBF16(got, x)
		sameBits(t, "MaxBF16", got, want)
	}
}

// FuzzBF16 compares the vector conversions and the fused kernels with the
// scalar loops on arbitrary bytes.
func FuzzBF16(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 0, 0x80, 0x7f, 0, 0x80, 0x7f, 0x7f})
	edge := make([]byte, 4*len(f32Edges))
	for i, u := range f32Edges {
		binary.LittleEndian.PutUint32(edge[4*i:], u)
	}
	f.Add(edge)
	f.Fuzz(func(t *testing.T, b []byte) {
		n := len(b) / 4
		src := make([]float32, n)
		for i := range src {
			src[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		got, want := make([]uint16, n), make([]uint16, n)
		F32ToBF16(got, src)
		f32ToBF16Go(want, src)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("F32ToBF16 of %#08x = %#04x, scalar %#04x", math.Float32bits(src[i]), got[i], want[i])
			}
		}
		h := make([]uint16, len(b)/2)
		for i := range h {
			h[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		gw, ww := make([]float32, len(h)), make([]float32, len(h))
		BF16ToF32(gw, h)
		bf16ToF32Go(ww, h)
		sameBits(t, "BF16ToF32", gw, ww)
		m := min(n, len(h))
		ga, wa := append([]float32(nil), src[:m]...), append([]float32(nil), src[:m]...)
		AddBF16(ga, h)
		addBF16Go(wa, h)
		sameSums(t, ga, wa, src[:m], h)
		ga, wa = append(ga[:0], src[:m]...), append(wa[:0], src[:m]...)
		MaxBF16(ga, h)
		maxBF16Go(wa, h)
		sameBits(t, "MaxBF16", ga, wa)
	})
}

// sameSums compares AddBF16's results got with the scalar loop's want for
// dst d and src h. Where both d[i] and src[i] are NaNs, IEEE 754 leaves the
// payload open and Go's compiler may order an add's operands either way, so
// there got[i] need only be one of them made quiet (AVX2 keeps d[i]'s).
func sameSums(t *testing.T, got, want, d []float32, h []uint16) {
	t.Helper()
	for i := range want {
		a, w := math.Float32bits(d[i]), uint32(h[i])<<16
		g := math.Float32bits(got[i])
		if isNaN(a) && isNaN(w) {
			if g != a|0x400000 && g != w|0x400000 {
				t.Fatalf("AddBF16: element %d: NaN %#08x + NaN %#08x = %#08x, want one of them made quiet", i, a, w, g)
			}
			continue
		}
		if g != math.Float32bits(want[i]) {
			t.Fatalf("AddBF16: element %d of %d: %#08x + %#08x = %#08x, want %#08x", i, len(want), a, w, g, math.Float32bits(want[i]))
		}
	}
}

func isNaN(u uint32) bool { return u&0x7fffffff > 0x7f800000 }

func benchBF16(b *testing.B, n int) ([]float32, []uint16) {
	f, _ := inputs(n, 3)
	h := make([]uint16, n)
	f32ToBF16Go(h, f)
	return f, h
}

// The conversions' bytes are those read and written: 6 an element.
func BenchmarkBF16ToF32(b *testing.B) {
	f, h := benchBF16(b, 1<<20)
	b.SetBytes(6 << 20)
	for b.Loop() {
		BF16ToF32(f, h)
	}
}

func BenchmarkBF16ToF32Go(b *testing.B) {
	f, h := benchBF16(b, 1<<20)
	b.SetBytes(6 << 20)
	for b.Loop() {
		bf16ToF32Go(f, h)
	}
}

func BenchmarkF32ToBF16(b *testing.B) {
	f, h := benchBF16(b, 1<<20)
	b.SetBytes(6 << 20)
	for b.Loop() {
		F32ToBF16(h, f)
	}
}

func BenchmarkF32ToBF16Go(b *testing.B) {
	f, h := benchBF16(b, 1<<20)
	b.SetBytes(6 << 20)
	for b.Loop() {
		f32ToBF16Go(h, f)
	}
}

// AddBF16 reads 6 bytes an element and writes 4.
func BenchmarkAddBF16(b *testing.B) {
	f, h := benchBF16(b, 1<<20)
	b.SetBytes(10 << 20)
	for b.Loop() {
		AddBF16(f, h)
	}
}

func BenchmarkAddBF16Go(b *testing.B) {
	f, h := benchBF16(b, 1<<20)
	b.SetBytes(10 << 20)
	for b.Loop() {
		addBF16Go(f, h)
	}
}
