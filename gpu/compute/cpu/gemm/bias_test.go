package gemm

import (
	"math"
	"math/rand"
	"testing"
)

// SgemmBias equals Sgemm with beta 1 on C preset to the bias rows, bit for
// bit, on the serial, parallel (both splits) and few-rows paths, with C's
// stride wider than n and the elements outside C left alone.
func TestSgemmBias(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for _, tc := range []struct {
		tb      bool
		m, n, k int
	}{
		{true, 1, 7, 5}, {false, 3, 70, 9}, {true, 13, 17, 11}, {true, 512, 384, 128},
		{false, 300, 40, 200}, {true, 40, 600, 130}, {true, 7, 16, 0},
	} {
		lda, ldb, ldc := tc.k+1, tc.n+2, tc.n+3
		if tc.tb {
			ldb = tc.k + 2
		}
		a := randSlice(r, max(tc.m*lda, 1))
		b := randSlice(r, max(max(tc.k, tc.n)*ldb, 1))
		bias := randSlice(r, tc.n)
		got := make([]float32, tc.m*ldc)
		for i := range got {
			got[i] = float32(math.NaN()) // C is not read, only the gaps kept
		}
		want := append([]float32(nil), got...)
		for i := 0; i < tc.m; i++ {
			copy(want[i*ldc:i*ldc+tc.n], bias)
		}
		Sgemm(false, tc.tb, tc.m, tc.n, tc.k, 1, a, lda, b, ldb, 1, want, ldc)
		SgemmBias(false, tc.tb, tc.m, tc.n, tc.k, 1, a, lda, b, ldb, bias, got, ldc)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: element %d: got %v want %v", tc, i, got[i], want[i])
			}
		}
	}
}
