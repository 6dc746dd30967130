package reduce

import "math"

// Add sets dst[i] += src[i] for i < len(dst); src must be at least as long.
func Add(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if hasAVX2 && len(dst) >= 8 {
		n = len(dst) &^ 7
		addAVX2(&dst[0], &src[0], n)
	}
	addGo(dst[n:], src[n:])
}

// Max sets dst[i] = max(dst[i], src[i]) for i < len(dst), as x86's MAXPS
// does: dst[i] stays only when dst[i] > src[i], so a NaN on either side, or
// two zeros, give src[i].
func Max(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if hasAVX2 && len(dst) >= 8 {
		n = len(dst) &^ 7
		maxAVX2(&dst[0], &src[0], n)
	}
	maxGo(dst[n:], src[n:])
}

// Scale sets dst[i] *= s.
func Scale(dst []float32, s float32) {
	n := 0
	if hasAVX2 && len(dst) >= 8 {
		n = len(dst) &^ 7
		scaleAVX2(&dst[0], n, s)
	}
	scaleGo(dst[n:], s)
}

func addGo(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// maxGo is MAXPS(dst, src) element by element.
func maxGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, s := range src {
		if !(dst[i] > s) {
			dst[i] = s
		}
	}
}

func scaleGo(dst []float32, s float32) {
	for i := range dst {
		dst[i] *= s
	}
}

// BF16ToF32 sets dst[i] to the float32 value of the bfloat16 bits src[i]
// for i < len(dst); src must be at least as long.
func BF16ToF32(dst []float32, src []uint16) {
	src = src[:len(dst)]
	n := 0
	if hasAVX2 && len(dst) >= 8 {
		n = len(dst) &^ 7
		bf16ToF32AVX2(&dst[0], &src[0], n)
	}
	bf16ToF32Go(dst[n:], src[n:])
}

// F32ToBF16 sets dst[i] to src[i] rounded to bfloat16 as ToBF16 does, for
// i < len(dst); src must be at least as long.
func F32ToBF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	n := 0
	if hasAVX2 && len(dst) >= 8 {
		n = len(dst) &^ 7
		f32ToBF16AVX2(&dst[0], &src[0], n)
	}
	f32ToBF16Go(dst[n:], src[n:])
}

// AddBF16 sets dst[i] += the float32 value of the bfloat16 bits src[i], for
// i < len(dst): what BF16ToF32 into a scratch buffer and Add would give,
// bit for bit, in one pass.
func AddBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	n := 0
	if hasAVX2 && len(dst) >= 8 {
		n = len(dst) &^ 7
		addBF16AVX2(&dst[0], &src[0], n)
	}
	addBF16Go(dst[n:], src[n:])
}

// MaxBF16 is Max with src in bfloat16: what BF16ToF32 and Max would give,
// bit for bit, in one pass.
func MaxBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	n := 0
	if hasAVX2 && len(dst) >= 8 {
		n = len(dst) &^ 7
		maxBF16AVX2(&dst[0], &src[0], n)
	}
	maxBF16Go(dst[n:], src[n:])
}

func bf16ToF32Go(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}

func f32ToBF16Go(dst []uint16, src []float32) {
	src = src[:len(dst)]
	for i, f := range src {
		dst[i] = ToBF16(f)
	}
}

func addBF16Go(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] += math.Float32frombits(uint32(b) << 16)
	}
}

// maxBF16Go is MAXPS(dst, widen(src)) element by element.
func maxBF16Go(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		if v := math.Float32frombits(uint32(b) << 16); !(dst[i] > v) {
			dst[i] = v
		}
	}
}

// ToBF16 rounds f to bfloat16 bits, to nearest with ties to even.
func ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep it a quiet NaN
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}
