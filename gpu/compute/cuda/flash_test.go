//go:build cudaemu || cudagpu

package cuda

import (
	"fmt"
	"math"
	"testing"
)

// The flash attention kernels (kernels/flash_attn.cu) against
// gpu/compute/cpu's reference attention, on shapes around every tile edge:
// the row tiles hold faRows (16) rows of the flattened (position,
// head-of-group) sequence and the key tiles faCols (16) positions, so
// T*G and T are taken just below, at and above multiples of 16, for group
// sizes 1, 2, 3, 4 and head sizes 64 and 128 (and small odd ones).

// refLSE is each row's log-sum-exp of the causal scaled scores, in float64:
// lse (B,NH,T).
func refLSE(q, k []float32, B, T, NH, KVH, HD int, scale float32) []float64 {
	G := NH / KVH
	out := make([]float64, B*NH*T)
	for b := range B {
		for h := range NH {
			for t := range T {
				s := make([]float64, t+1)
				mx := math.Inf(-1)
				for j := 0; j <= t; j++ {
					var d float64
					for c := range HD {
						d += float64(q[((b*T+t)*NH+h)*HD+c]) * float64(k[((b*T+j)*KVH+h/G)*HD+c])
					}
					s[j] = d * float64(scale)
					mx = math.Max(mx, s[j])
				}
				var sum float64
				for _, x := range s {
					sum += math.Exp(x - mx)
				}
				out[(b*NH+h)*T+t] = mx + math.Log(sum)
			}
		}
	}
	return out
}

var flashCases = []gqaCase{
	{"hd64_g1_t17", 1, 17, 2, 2, 64},   // one row and one key past a tile
	{"hd128_g2_t16", 1, 16, 4, 2, 128}, // rows exactly two tiles, keys one
	{"hd64_g4_t9", 2, 9, 4, 1, 64},     // MQA; a position's heads straddle row tiles
	{"hd128_g4_t31", 1, 31, 8, 2, 128}, // keys one short of two tiles
	{"hd10_g3_t33", 1, 33, 6, 2, 10},   // group of 3, keys one past two tiles
	{"hd6_g2_t1", 2, 1, 4, 2, 6},       // a single position (the tiny Llama's head size)
	{"hd64_g2_t65", 1, 65, 4, 2, 64},   // T > HD: att also keeps a copy of out
}

func TestOpFlashAttention(t *testing.T) {
	saves := 0
	for _, c := range flashCases {
		if attSavesOut(c.T, c.HD) {
			saves++
		}
	}
	if saves == 0 || saves == len(flashCases) {
		t.Fatalf("%d of %d cases keep out in att: both backward paths must be covered", saves, len(flashCases))
	}
	for i, c := range flashCases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, uint64(60+i))
			B, T, NH, KVH, HD := c.B, c.T, c.NH, c.KVH, c.HD
			scale := float32(1 / math.Sqrt(float64(HD)))
			qh, kh := p.randn(B*T*NH*HD, 1), p.randn(B*T*KVH*HD, 1)
			q, k, v := p.up(qh), p.up(kh), p.rand(B*T*KVH*HD, 1)
			out, att := p.rand(B*T*NH*HD, 1), p.rand(B*NH*T*T, 1)
			p.e.GQAttentionForward(out.e, att.e, q.e, k.e, v.e, B, T, NH, KVH, HD, scale)
			p.r.GQAttentionForward(out.r, att.r, q.r, k.r, v.r, B, T, NH, KVH, HD, scale)
			p.check("flash_attn_forward.out", out, tol)

			lse := make([]float32, B*NH*T)
			p.e.Download(lse, att.e)
			want := refLSE(qh, kh, B, T, NH, KVH, HD, scale)
			for j := range lse {
				if d := math.Abs(float64(lse[j]) - want[j]); d > tol*math.Max(1, math.Abs(want[j])) {
					t.Fatalf("lse[%d] = %v, want %v", j, lse[j], want[j])
				}
			}

			// The backward may read only what the forward kept in att: the
			// caller is free to reuse out in between.
			p.e.Upload(out.e, p.randn(B*T*NH*HD, 1))
			dout := p.rand(B*T*NH*HD, 1)
			dq, dk, dv := p.rand(B*T*NH*HD, 1), p.rand(B*T*KVH*HD, 1), p.rand(B*T*KVH*HD, 1)
			p.e.GQAttentionBackward(dq.e, dk.e, dv.e, dout.e, q.e, k.e, v.e, att.e, B, T, NH, KVH, HD, scale)
			p.r.GQAttentionBackward(dq.r, dk.r, dv.r, dout.r, q.r, k.r, v.r, att.r, B, T, NH, KVH, HD, scale)
			p.check("flash_attn_backward.dq", dq, tol)
			p.check("flash_attn_backward.dk", dk, tol)
			p.check("flash_attn_backward.dv", dv, tol)
		})
	}
}

// TestOpFlashDecode runs several decode steps over one cache with ragged
// positions that end inside, at and just past the emulator's 16-position
// splits, so the partial results of up to five splits are combined.
func TestOpFlashDecode(t *testing.T) {
	for i, c := range []struct {
		B, maxT, NH, KVH, HD int
		steps                [][]int32
	}{
		{4, 70, 2, 2, 64, [][]int32{{0, 15, 16, 69}, {1, 16, 17, 68}}},
		{3, 40, 4, 2, 128, [][]int32{{31, 32, 0}, {33, 39, 1}}},
		{2, 35, 8, 2, 64, [][]int32{{34, 17}}},
		{1, 20, 20, 1, 8, [][]int32{{19}}}, // MQA with more than 16 query heads: two head tiles
	} {
		t.Run(fmt.Sprintf("g%d_hd%d_maxT%d", c.NH/c.KVH, c.HD, c.maxT), func(t *testing.T) {
			p := newPair(t, uint64(70+i))
			B, maxT, NH, KVH, HD := c.B, c.maxT, c.NH, c.KVH, c.HD
			p.e.cfg.decodeChunk = 16 // as on the emulator, also on a GPU: several splits
			if d := p.e.decodeChunk(B, maxT, NH, KVH); ceilDiv(maxT, d) < 2 {
				t.Fatalf("decode chunk %d leaves one split for maxT %d", d, maxT)
			}
			scale := float32(1 / math.Sqrt(float64(HD)))
			cache := p.rand(B*maxT*2*KVH*HD, 1)
			out := p.rand(B*NH*HD, 1)
			for _, ps := range c.steps {
				pos := p.positions(ps)
				q, k, v := p.rand(B*NH*HD, 1), p.rand(B*KVH*HD, 1), p.rand(B*KVH*HD, 1)
				p.e.GQAttentionDecode(out.e, cache.e, q.e, k.e, v.e, pos.e, B, maxT, NH, KVH, HD, scale)
				p.r.GQAttentionDecode(out.r, cache.r, q.r, k.r, v.r, pos.r, B, maxT, NH, KVH, HD, scale)
				p.check("flash_decode.out", out, tol)
				p.check("flash_decode.cache", cache, 0)
			}
		})
	}
}

// TestOpDecodeChunk checks the device's split size: a multiple of the key
// tile, at least 64 positions, and about two waves of 132 blocks when one
// row's heads alone would leave the device idle.
func TestOpDecodeChunk(t *testing.T) {
	b := &Backend{cfg: gpuLaunch}
	for _, c := range []struct{ B, maxT, NH, KVH, want int }{
		{1, 4096, 16, 8, 128},   // 8 blocks: 33 splits of 125 -> 128 positions
		{32, 4096, 16, 8, 2048}, // 256 blocks: 2 splits
		{1, 100, 16, 8, 64},     // short cache: the 64-position floor
		{1, 4096, 40, 1, 64},    // MQA, 3 head tiles: 88 splits of 47 -> the floor
	} {
		if got := b.decodeChunk(c.B, c.maxT, c.NH, c.KVH); got != c.want {
			t.Errorf("decodeChunk(B=%d, maxT=%d, NH=%d, KVH=%d) = %d, want %d", c.B, c.maxT, c.NH, c.KVH, got, c.want)
		}
	}
}
