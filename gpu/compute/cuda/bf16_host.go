package cuda

import "math"

// Float32ToBF16 rounds a float32 to bf16 bits exactly as float_to_bf16 in
// kernels/common.cuh (round to nearest even, NaN kept quiet).
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// BF16ToFloat32 widens bf16 bits (as from DownloadBF16) to float32, exactly.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F16ToFloat32 widens IEEE binary16 bits to float32 exactly as f16_to_float
// in kernels/common.cuh (NaN payloads kept).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		f := float32(man) * 0x1p-24
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}
