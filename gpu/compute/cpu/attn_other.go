//go:build !amd64 || purego

package cpu

// dots sets out[s] = q·k[s*ldk:][:len(q)] for s < len(out).
func dots(out, q, k []float32, ldk int) { dotsGo(out, q, k, ldk) }

// wsum sets out[i] = Σ_s w[s]·v[s*ldv+i] for i < len(out).
func wsum(out, v []float32, ldv int, w []float32) { wsumGo(out, v, ldv, w) }
