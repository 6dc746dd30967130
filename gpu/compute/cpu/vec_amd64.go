//go:build amd64 && !purego

package cpu

// AVX2 row helpers of the softmaxes (vec_amd64.s): Go does not vectorize
// the max and scale loops, which cost more than the exp itself in the
// causal attention forward.

//go:noescape
func maxAVX2(x *float32, n int) float32

//go:noescape
func scaleAVX2(x *float32, n int, s float32)

// maxVec returns max(x) (x not empty); the same value as maxRef.
func maxVec(x []float32) float32 {
	n := len(x) &^ 7
	if !hasExpAsm || n == 0 {
		return maxRef(x)
	}
	m := maxAVX2(&x[0], n)
	for _, v := range x[n:] {
		m = max(m, v)
	}
	return m
}

// scaleVec sets x[i] *= s; the same values as scaleRef.
func scaleVec(x []float32, s float32) {
	n := len(x) &^ 7
	if hasExpAsm && n > 0 {
		scaleAVX2(&x[0], n, s)
	} else {
		n = 0
	}
	for i := n; i < len(x); i++ {
		x[i] *= s
	}
}

//go:noescape
func sumSquaresAVX2(x *float32, n int) float64

// sumSquaresVec returns Σ x[i]² (float32 sums of 256 elements added in
// float64, as kSumSquares' Go loop; the order differs from refSumSquares'
// by rounding only).
func sumSquaresVec(x []float32) float64 {
	n := len(x) &^ 31
	var s float64
	if hasExpAsm && n > 0 {
		s = sumSquaresAVX2(&x[0], n)
	} else {
		n = 0
	}
	return s + sumSquaresGo(x[n:])
}
