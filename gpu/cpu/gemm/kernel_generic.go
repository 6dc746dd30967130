package gemm

// goKernel is the pure-Go micro-kernel with the same contract as the
// assembly one (see kernel_amd64.s); it is the fallback on CPUs without
// AVX2+FMA and for purego builds.
func goKernel(tiles, k int, a []float32, ars, aps, anext int, b []float32, bps int, c []float32, ldc int, alpha, beta float32) {
	for t := 0; t < tiles; t++ {
		goTile(k, a[t*anext:], ars, aps, b, bps, c[t*mr*ldc:], ldc, alpha, beta)
	}
}

func goTile(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, alpha, beta float32) {
	var acc [mr][nr]float32
	for p := 0; p < k; p++ {
		bp := (*[nr]float32)(b[p*bps:])
		for i := 0; i < mr; i++ {
			av := a[i*ars+p*aps]
			row := &acc[i]
			for j := 0; j < nr; j++ {
				row[j] += av * bp[j]
			}
		}
	}
	for i := 0; i < mr; i++ {
		crow := (*[nr]float32)(c[i*ldc:])
		if beta == 0 {
			for j := 0; j < nr; j++ {
				crow[j] = alpha * acc[i][j]
			}
			continue
		}
		for j := 0; j < nr; j++ {
			crow[j] = alpha*acc[i][j] + beta*crow[j]
		}
	}
}
