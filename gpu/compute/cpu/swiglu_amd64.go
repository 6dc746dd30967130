//go:build amd64 && !purego

package cpu

// AVX2+FMA SwiGLU kernels (swiglu_amd64.s), on expShiftAVX2's exp: the
// Go loops spend most of their time in the scalar division of
// x/(1+exp(-x)).

//go:noescape
func swigluFwdAVX2(out, gate, up *float32, n int, k *[14][8]uint32)

//go:noescape
func swigluBwdAVX2(dgate, dup, dout, gate, up *float32, n int, k *[14][8]uint32, setG, setU int)

// swigluFwdVec computes the largest multiple-of-8 prefix with the vector
// kernel and returns its length (0 without AVX2).
func swigluFwdVec(out, gate, up []float32) int {
	n := len(gate) &^ 7
	if !hasExpAsm || n == 0 {
		return 0
	}
	_, _ = out[n-1], up[n-1]
	swigluFwdAVX2(&out[0], &gate[0], &up[0], n, expConsts)
	return n
}

func swigluBwdVec(dgate, dup, dout, gate, up []float32, setG, setU bool) int {
	n := len(gate) &^ 7
	if !hasExpAsm || n == 0 {
		return 0
	}
	_, _, _, _ = dgate[n-1], dup[n-1], dout[n-1], up[n-1]
	swigluBwdAVX2(&dgate[0], &dup[0], &dout[0], &gate[0], &up[0], n, expConsts, b2i(setG), b2i(setU))
	return n
}
