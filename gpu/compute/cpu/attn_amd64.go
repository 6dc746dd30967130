//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// AVX2+FMA kernels for attention over a KV cache (attn_amd64.s): the
// decode step's scores (one query against many cached keys) and its
// weighted sum of cached values. In Go they run one scalar multiply-add
// at a time; they are most of a long-context decode step.

//go:noescape
func dotsAVX2(q, k *float32, ldk, hd, n int, out *float32)

//go:noescape
func wsumAVX2(out, v *float32, ldv, hd, n int, w *float32)

var hasAttnAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dots sets out[s] = q·k[s*ldk:][:len(q)] for s < len(out).
func dots(out, q, k []float32, ldk int) {
	hd, n := len(q), len(out)
	v := hd &^ 7
	if !hasAttnAsm || v == 0 || n == 0 {
		dotsGo(out, q, k, ldk)
		return
	}
	_ = k[(n-1)*ldk+hd-1]
	dotsAVX2(&q[0], &k[0], ldk, v, n, &out[0])
	if v < hd {
		for s := range out {
			out[s] += dot8(q[v:], k[s*ldk+v:][:hd-v])
		}
	}
}

// wsum sets out[i] = Σ_s w[s]·v[s*ldv+i] for i < len(out).
func wsum(out, v []float32, ldv int, w []float32) {
	hd, n := len(out), len(w)
	c := hd &^ 7
	if !hasAttnAsm || c == 0 || n == 0 {
		wsumGo(out, v, ldv, w)
		return
	}
	_ = v[(n-1)*ldv+hd-1]
	wsumAVX2(&out[0], &v[0], ldv, c, n, &w[0])
	if c < hd {
		wsumGo(out[c:], v[c:], ldv, w)
	}
}
