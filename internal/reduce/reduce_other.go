//go:build !amd64 || purego

package reduce

const hasAVX2 = false

func addAVX2(dst, src *float32, n int)               { panic("unreachable") }
func maxAVX2(dst, src *float32, n int)               { panic("unreachable") }
func scaleAVX2(dst *float32, n int, s float32)       { panic("unreachable") }
func bf16ToF32AVX2(dst *float32, src *uint16, n int) { panic("unreachable") }
func f32ToBF16AVX2(dst *uint16, src *float32, n int) { panic("unreachable") }
func addBF16AVX2(dst *float32, src *uint16, n int)   { panic("unreachable") }
func maxBF16AVX2(dst *float32, src *uint16, n int)   { panic("unreachable") }
