package gemm

// goKernel is the pure-Go micro-kernel with the same contract as the
// assembly one (see kernel_amd64.s); it is the fallback on CPUs without
// AVX2+FMA and for purego builds.
func goKernel(tiles, k int, a []float32, ars, aps, anext int, b []float32, bps int, c []float32, ldc int, alpha, beta float32) {
	for t := 0; t < tiles; t++ {
		goTile(k, a[t*anext:], ars, aps, b, bps, c[t*goMR*ldc:], ldc, alpha, beta)
	}
}

func goTile(k int, a []float32, ars, aps int, b []float32, bps int, c []float32, ldc int, alpha, beta float32) {
	// 2×4 register blocks: eight accumulators plus six operands fit the
	// sixteen SSE registers the Go compiler allocates.
	for i := 0; i < goMR; i += 2 {
		a0, a1 := a[i*ars:], a[(i+1)*ars:]
		for j := 0; j < goNR; j += 4 {
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			for p := 0; p < k; p++ {
				x0, x1 := a0[p*aps], a1[p*aps]
				bb := (*[4]float32)(b[p*bps+j:])
				c00 += x0 * bb[0]
				c01 += x0 * bb[1]
				c02 += x0 * bb[2]
				c03 += x0 * bb[3]
				c10 += x1 * bb[0]
				c11 += x1 * bb[1]
				c12 += x1 * bb[2]
				c13 += x1 * bb[3]
			}
			r0 := (*[4]float32)(c[i*ldc+j:])
			r1 := (*[4]float32)(c[(i+1)*ldc+j:])
			if beta == 0 {
				*r0 = [4]float32{alpha * c00, alpha * c01, alpha * c02, alpha * c03}
				*r1 = [4]float32{alpha * c10, alpha * c11, alpha * c12, alpha * c13}
				continue
			}
			r0[0], r0[1], r0[2], r0[3] = alpha*c00+beta*r0[0], alpha*c01+beta*r0[1], alpha*c02+beta*r0[2], alpha*c03+beta*r0[3]
			r1[0], r1[1], r1[2], r1[3] = alpha*c10+beta*r1[0], alpha*c11+beta*r1[1], alpha*c12+beta*r1[2], alpha*c13+beta*r1[3]
		}
	}
}

// goMR×goNR is the pure-Go kernel's tile.
const (
	goMR = 6
	goNR = 16
)
