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
