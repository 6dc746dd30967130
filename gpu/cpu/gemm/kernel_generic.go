package gemm

// goKernel is the pure-Go micro-kernel with the same contract as the
// assembly one; it is the fallback on CPUs without AVX2+FMA and for purego
// builds.
func goKernel(k int, a, b []float32, ldb int, c []float32, ldc int, beta float32) {
	var acc [mr][nr]float32
	for p := 0; p < k; p++ {
		ap := (*[mr]float32)(a[p*mr:])
		bp := (*[nr]float32)(b[p*ldb:])
		for i := 0; i < mr; i++ {
			av := ap[i]
			row := &acc[i]
			for j := 0; j < nr; j++ {
				row[j] += av * bp[j]
			}
		}
	}
	for i := 0; i < mr; i++ {
		crow := (*[nr]float32)(c[i*ldc:])
		if beta == 0 {
			*crow = acc[i]
			continue
		}
		for j := 0; j < nr; j++ {
			crow[j] = acc[i][j] + beta*crow[j]
		}
	}
}
