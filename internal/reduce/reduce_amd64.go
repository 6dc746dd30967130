//go:build amd64 && !purego

package reduce

import "golang.org/x/sys/cpu"

var hasAVX2 = cpu.X86.HasAVX2

// The AVX2 loops (reduce_amd64.s); n is a positive multiple of 8.

//go:noescape
func addAVX2(dst, src *float32, n int)

//go:noescape
func maxAVX2(dst, src *float32, n int)

//go:noescape
func scaleAVX2(dst *float32, n int, s float32)
