//go:build amd64 && !purego

package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

// AVX2+FMA GELU kernels (gelu_amd64.s): the same tanh rational function as
// tanhf, eight lanes at a time. GELU is the largest non-matmul cost of a
// training step, so it gets vector code; everything else stays in Go.

//go:noescape
func geluFwdAVX2(out, in *float32, n int, k *[21][8]uint32)

// geluBwdAVX2 adds gelu'(inp)·dout to dinp, or stores it when set is 1.
//
//go:noescape
func geluBwdAVX2(dinp, inp, dout *float32, n int, k *[21][8]uint32, set int)

var hasGeluAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

var geluConsts = func() *[21][8]uint32 {
	vals := [19]float32{
		0.044715, 1, geluScale, 7.90531110763549805, -7.90531110763549805,
		-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
		5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03,
		1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03,
		0.5, 3 * 0.044715, 0.5 * geluScale,
	}
	var k [21][8]uint32
	for i, v := range vals {
		for j := range k[i] {
			k[i][j] = math.Float32bits(v)
		}
	}
	for j := 0; j < 8; j++ {
		k[19][j] = 0x80000000 // sign mask
		k[20][j] = 0x7fffffff // abs mask
	}
	return &k
}()

// geluFwdVec computes the largest multiple-of-8 prefix with the vector
// kernel and returns how many elements it did.
func geluFwdVec(out, in []float32) int {
	n := len(in) &^ 7
	if !hasGeluAsm || n == 0 {
		return 0
	}
	_ = out[n-1]
	geluFwdAVX2(&out[0], &in[0], n, geluConsts)
	return n
}

func geluBwdVec(dinp, inp, dout []float32, set bool) int {
	n := len(inp) &^ 7
	if !hasGeluAsm || n == 0 {
		return 0
	}
	_, _ = dinp[n-1], dout[n-1]
	s := 0
	if set {
		s = 1
	}
	geluBwdAVX2(&dinp[0], &inp[0], &dout[0], n, geluConsts, s)
	return n
}
