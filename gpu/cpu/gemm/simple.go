package gemm

// sgemm is a cache-friendly pure-Go path: scale C by beta, then accumulate
// rank-1 updates row by row so the innermost loop streams contiguous rows.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		crow := c[i*ldc : i*ldc+n]
		scaleRow(crow, beta)
		if alpha == 0 || k == 0 {
			continue
		}
		for p := 0; p < k; p++ {
			var av float32
			if transA {
				av = a[p*lda+i]
			} else {
				av = a[i*lda+p]
			}
			av *= alpha
			if av == 0 {
				continue
			}
			if !transB {
				brow := b[p*ldb : p*ldb+n]
				for j, bv := range brow {
					crow[j] += av * bv
				}
			} else {
				for j := range crow {
					crow[j] += av * b[j*ldb+p]
				}
			}
		}
	}
}

func scaleRow(x []float32, beta float32) {
	switch beta {
	case 1:
	case 0:
		clear(x)
	default:
		for j := range x {
			x[j] *= beta
		}
	}
}
