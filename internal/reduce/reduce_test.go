package reduce

import (
	"math"
	"math/rand/v2"
	"testing"
)

// special values the kernels must treat as the Go loops do, bit for bit.
var special = []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1, -1, math.MaxFloat32, math.SmallestNonzeroFloat32}

func inputs(n int, seed uint64) (a, b []float32) {
	r := rand.New(rand.NewPCG(seed, 1))
	a, b = make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
		if r.IntN(8) == 0 {
			a[i] = special[r.IntN(len(special))]
		}
		if r.IntN(8) == 0 {
			b[i] = special[r.IntN(len(special))]
		}
	}
	return a, b
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d of %d: %v (%#x), want %v (%#x)", what, i, len(want), got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestKernelsMatchGo: the vector kernels give the Go loops' bits, for
// lengths around the vector widths and with NaNs, infinities and zeros.
func TestKernelsMatchGo(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 100, 1000} {
		a, b := inputs(n, uint64(n))
		want := append([]float32(nil), a...)
		addGo(want, b)
		got := append([]float32(nil), a...)
		Add(got, b)
		sameBits(t, "Add", got, want)

		want = append(want[:0], a...)
		maxGo(want, b)
		got = append(got[:0], a...)
		Max(got, b)
		sameBits(t, "Max", got, want)

		want = append(want[:0], a...)
		scaleGo(want, 0.25)
		got = append(got[:0], a...)
		Scale(got, 0.25)
		sameBits(t, "Scale", got, want)
	}
}

func TestMaxSemantics(t *testing.T) {
	nan := float32(math.NaN())
	d := []float32{1, 3, nan, 2, 0, 0, 0, 0}
	s := []float32{2, 1, 5, nan, 0, 0, 0, 0}
	Max(d, s)
	if d[0] != 2 || d[1] != 3 || d[2] != 5 || d[3] == d[3] {
		t.Fatalf("Max = %v, want [2 3 5 NaN ...]", d[:4])
	}
}

func TestBF16(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{float32(math.Inf(-1)), 0xff80},
	}
	for _, c := range cases {
		if got := ToBF16(c.f); got != c.want {
			t.Errorf("ToBF16(%v) = %#x, want %#x", c.f, got, c.want)
		}
	}
	if b := ToBF16(float32(math.NaN())); b&0x7f80 != 0x7f80 || b&0x7f == 0 {
		t.Errorf("ToBF16(NaN) = %#x, not a NaN", b)
	}
	f := make([]float32, 2)
	BF16ToF32(f, []uint16{0x3f80, 0xc000})
	if f[0] != 1 || f[1] != -2 {
		t.Errorf("BF16ToF32 = %v", f)
	}
}

func BenchmarkAdd(b *testing.B) {
	x, y := inputs(1<<20, 1)
	b.SetBytes(4 << 20)
	for b.Loop() {
		Add(x, y)
	}
}

func BenchmarkAddGo(b *testing.B) {
	x, y := inputs(1<<20, 1)
	b.SetBytes(4 << 20)
	for b.Loop() {
		addGo(x, y)
	}
}

func BenchmarkMax(b *testing.B) {
	x, y := inputs(1<<20, 1)
	b.SetBytes(4 << 20)
	for b.Loop() {
		Max(x, y)
	}
}

func BenchmarkScale(b *testing.B) {
	x, _ := inputs(1<<20, 1)
	b.SetBytes(4 << 20)
	for b.Loop() {
		Scale(x, 1)
	}
}
