package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"troupe/gpu/compute"
)

// BenchmarkDecoderOps runs each decoder op at SmolLM2-135M's shapes (hidden
// 576, 9 query heads and 3 key/value heads of 64, MLP 1536) on one
// sequence of T tokens, on the fast backend and on the reference:
//
//	go test ./gpu/cpu -run '^$' -bench DecoderOps -benchtime 20x
//
// Decode runs B=8 rows each at position T-1 (a cache of T tokens).
func BenchmarkDecoderOps(b *testing.B) {
	const C, NH, KVH, HD, I, V = 576, 9, 3, 64, 1536, 49152
	const scale = 0.125
	for _, T := range []int{128, 512} {
		for _, be := range []*Backend{New(), NewReference()} {
			r := rand.New(rand.NewPCG(1, 1))
			buf := func(n int) compute.Buffer { x, _ := be.Alloc(n); be.Upload(x, randf(r, n, 1)); return x }
			ints := func(x []int32) compute.IntBuffer { p, _ := be.AllocInt(len(x)); be.UploadInt(p, x); return p }
			N := T
			nq, nk := N*NH*HD, N*KVH*HD
			x, out, rstd, w, din, dw := buf(N*C), buf(N*C), buf(N), buf(C), buf(N*C), buf(C)
			q, k, v, att, o := buf(nq), buf(nk), buf(nk), buf(NH*T*T), buf(nq)
			dq, dk, dv := buf(nq), buf(nk), buf(nk)
			g, u, h, dg, du := buf(N*I), buf(N*I), buf(N*I), buf(N*I), buf(N*I)
			cos, sin := ropeTables(T, HD)
			cb, sb := buf(len(cos)), buf(len(sin))
			be.Upload(cb, cos)
			be.Upload(sb, sin)
			pos := make([]int32, N)
			for i := range pos {
				pos[i] = int32(i)
			}
			pb, tok := ints(pos), ints(randTok(r, N, V))
			wte, dwte := buf(V*C), buf(V*C)
			const DB = 8
			cache, dqd, dkd, dod := buf(DB*T*2*KVH*HD), buf(DB*NH*HD), buf(DB*KVH*HD), buf(DB*NH*HD)
			dpos := make([]int32, DB)
			for i := range dpos {
				dpos[i] = int32(T - 1)
			}
			dpb := ints(dpos)
			attFlops := float64(4 * NH * HD * T * (T + 1) / 2) // q·k and att·v, causal half
			ops := []struct {
				name   string
				flops  float64 // per op, for GFLOP/s (0: none reported)
				tokens int
				fn     func()
			}{
				{"EmbedForward", 0, N, func() { be.EmbedForward(out, tok, wte, N, C, V) }},
				{"EmbedBackward", 0, N, func() { be.EmbedBackward(dwte, x, tok, N, C, V) }},
				{"RMSNormForward", 0, N, func() { be.RMSNormForward(out, rstd, x, w, N, C, 1e-5) }},
				{"RMSNormBackward", 0, N, func() { be.RMSNormBackward(din, dw, out, x, w, rstd, N, C) }},
				{"RopeForward", 0, N, func() { be.RopeForward(q, pb, cb, sb, N, NH, HD, T) }},
				{"RopeBackward", 0, N, func() { be.RopeBackward(dq, pb, cb, sb, N, NH, HD, T) }},
				{"SwiGLUForward", 0, N, func() { be.SwiGLUForward(h, g, u, N*I) }},
				{"SwiGLUBackward", 0, N, func() { be.SwiGLUBackward(dg, du, h, g, u, N*I) }},
				{"GQAttentionForward", attFlops, N, func() { be.GQAttentionForward(o, att, q, k, v, 1, T, NH, KVH, HD, scale) }},
				{"GQAttentionBackward", 2 * attFlops, N, func() { be.GQAttentionBackward(dq, dk, dv, o, q, k, v, att, 1, T, NH, KVH, HD, scale) }},
				{"GQAttentionDecode", float64(DB * 4 * NH * HD * T), DB, func() {
					be.GQAttentionDecode(dod, cache, dqd, dkd, dkd, dpb, DB, T, NH, KVH, HD, scale)
				}},
			}
			for _, op := range ops {
				b.Run(fmt.Sprintf("%s/T=%d/%s", op.name, T, be.Name()), func(b *testing.B) {
					c0 := cpuTime()
					for i := 0; i < b.N; i++ {
						op.fn()
					}
					el := b.Elapsed().Seconds()
					b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
					b.ReportMetric(float64(op.tokens*b.N)/el, "tokens/s")
					if op.flops > 0 {
						b.ReportMetric(op.flops*float64(b.N)/el/1e9, "GFLOP/s")
					}
					if err := be.Sync(); err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
}
