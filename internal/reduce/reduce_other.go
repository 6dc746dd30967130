//go:build !amd64 || purego

package reduce

const hasAVX2 = false

func addAVX2(dst, src *float32, n int)         { panic("unreachable") }
func maxAVX2(dst, src *float32, n int)         { panic("unreachable") }
func scaleAVX2(dst *float32, n int, s float32) { panic("unreachable") }
