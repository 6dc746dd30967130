//go:build amd64 && !purego

package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

// AVX2+FMA exp for the softmaxes (attention, loss heads): the Cephes expf
// of fast.go's expf, eight lanes at a time.

//go:noescape
func expShiftAVX2(x *float32, n int, shift float32, k *[14][8]uint32, acc *[8]float32)

var hasExpAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

var expConsts = func() *[14][8]uint32 {
	vals := [13]float32{
		1.4426950408889634, 0.5, 0.693359375, 2.12194440e-4,
		1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1,
		1, 88, -87,
	}
	var k [14][8]uint32
	for i, v := range vals {
		for j := range k[i] {
			k[i][j] = math.Float32bits(v)
		}
	}
	for j := range k[13] {
		k[13][j] = 127
	}
	return &k
}()

// expShift sets x[i] = exp(x[i]-shift) and returns the sum of the results.
func expShift(x []float32, shift float32) float32 {
	n := len(x) &^ 7
	var sum float32
	if hasExpAsm && n > 0 {
		var acc [8]float32
		expShiftAVX2(&x[0], n, shift, expConsts, &acc)
		for _, v := range acc {
			sum += v
		}
	} else {
		n = 0
	}
	for i := n; i < len(x); i++ {
		x[i] = expf(x[i] - shift)
		sum += x[i]
	}
	return sum
}
