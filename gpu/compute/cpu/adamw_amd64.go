//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func adamwAVX2(p, gr, m, v *float32, n int, k *[10][8]float32)

var hasAdamAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// adamwVec updates the largest multiple-of-8 prefix with the AVX2 kernel
// and returns its length (0 without AVX2). k holds scale, b1, 1-b1, b2,
// 1-b2, 1/c1, 1/c2, eps, lr, wd.
func adamwVec(p, g, m, v []float32, k *[10][8]float32) int {
	n := len(p) &^ 7
	if !hasAdamAsm || n == 0 {
		return 0
	}
	_, _, _ = g[n-1], m[n-1], v[n-1]
	adamwAVX2(&p[0], &g[0], &m[0], &v[0], n, k)
	return n
}
