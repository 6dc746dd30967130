package cuda

import (
	"math"
	"testing"
)

func TestFloat32ToBF16(t *testing.T) {
	cases := []struct {
		in   uint32 // float32 bits
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1.0 exact
		{0x3f808000, 0x3f80}, // halfway, even below: stays
		{0x3f818000, 0x3f82}, // halfway, odd below: rounds up to even
		{0x3f808001, 0x3f81}, // just above halfway
		{0x7f7fffff, 0x7f80}, // max float rounds to +Inf
		{0x7f800000, 0x7f80}, // +Inf
		{0xff800000, 0xff80}, // -Inf
		{0x7f800001, 0x7fc0}, // signalling NaN becomes a quiet NaN
	}
	for _, c := range cases {
		if got := Float32ToBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("Float32ToBF16(%#x) = %#x, want %#x", c.in, got, c.want)
		}
	}
	for _, h := range []uint16{0, 0x3f80, 0xc2f7, 0x0001} {
		if got := Float32ToBF16(BF16ToFloat32(h)); got != h {
			t.Errorf("round trip of %#x gives %#x", h, got)
		}
	}
}

// TestF16ToFloat32 checks every fp16 value against the binary16 definition:
// (-1)^s · 2^(e-15) · (1 + m/1024), subnormals 2^-14 · m/1024.
func TestF16ToFloat32(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		s, e, m := h>>15, int(h>>10)&0x1f, float64(h&0x3ff)
		var want float64
		switch {
		case e == 0x1f && m == 0:
			want = math.Inf(1)
		case e == 0x1f:
			want = math.NaN()
		case e == 0:
			want = math.Ldexp(m/1024, -14)
		default:
			want = math.Ldexp(1+m/1024, e-15)
		}
		if s == 1 {
			want = -want
		}
		got := F16ToFloat32(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) || math.Float32bits(got)&0x7fffff != uint32(h&0x3ff)<<13 {
				t.Fatalf("F16ToFloat32(%#04x) = %#08x, want a NaN with the payload kept", h, math.Float32bits(got))
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != (s == 1) {
			t.Fatalf("F16ToFloat32(%#04x) = %v, want %v", h, got, want)
		}
	}
	for h, want := range map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x7bff: 65504, 0x0001: 0x1p-24, 0x0400: 0x1p-14, 0x3555: 0.333251953125} {
		if got := F16ToFloat32(h); got != want {
			t.Errorf("F16ToFloat32(%#04x) = %v, want %v", h, got, want)
		}
	}
}
