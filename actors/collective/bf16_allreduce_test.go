package collective

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"troupe/internal/reduce"
)

// reduceBF16Ref is the reduction allreduceBF16 computes, element by
// element: for tests and for checking a transport's results.
func reduceBF16Ref(bufs [][]uint16, op Op) []uint16 {
	n := len(bufs)
	out := make([]uint16, len(bufs[0]))
	acc, t := make([]float32, 1), make([]float32, 1)
	for i := range out {
		reduce.BF16ToF32(acc, bufs[0][i:i+1])
		for p := 1; p < n; p++ {
			reduce.BF16ToF32(t, bufs[p][i:i+1])
			reduceInto(acc, t, op)
		}
		if op == Mean {
			divide(acc, n)
		}
		out[i] = reduce.ToBF16(acc[0])
	}
	return out
}

// countLinks counts the payload bytes a member sends.
type countLinks struct {
	Links
	sent *atomic.Int64
}

func (c countLinks) Send(ctx context.Context, to int, h Header, data []byte) error {
	c.sent.Add(int64(len(data)))
	return c.Links.Send(ctx, to, h, data)
}

// countedLocal is NewLocalConfig whose members count the bytes they send
// (the links hide RecvWith, so the Recv path runs).
func countedLocal(n int, cfg Config, sent *atomic.Int64) []Group {
	h := newMemHub("g", n)
	gs := make([]Group, n)
	for r := range gs {
		g, err := NewGroup("g", r, n, nil, countLinks{Links: &memLinks{h: h, rank: r}, sent: sent}, cfg)
		if err != nil {
			panic(err)
		}
		gs[r] = g
	}
	return gs
}

func randBF16(n, size int, seed uint64) [][]uint16 {
	r := rand.New(rand.NewPCG(seed, 5))
	out := make([][]uint16, n)
	for i := range out {
		out[i] = make([]uint16, size)
		for j := range out[i] {
			out[i][j] = reduce.ToBF16(float32(r.NormFloat64() * float64(int(1)<<r.IntN(12))))
		}
	}
	return out
}

// TestAllreduceBF16Wire: every member ends with the bits of the reference
// (float32 in rank order, rounded once), for every op, group size and
// algorithm, and the buffers travel as bfloat16: the bytes sent are those
// of 2-byte elements (the direct exchange n-1 whole buffers a member, the
// scatter and gather 2(n-1)/n of one).
func TestAllreduceBF16Wire(t *testing.T) {
	for _, cfg := range configs {
		for _, n := range []int{1, 2, 3, 5} {
			for _, size := range []int{1, 7, 1000, 50001} {
				for _, op := range []Op{Sum, Mean, Max} {
					name := fmt.Sprintf("direct%d/chunk%d/n%d/len%d/%v", cfg.DirectMaxBytes, cfg.ChunkBytes, n, size, op)
					in := randBF16(n, size, uint64(n*size)+uint64(op))
					want := reduceBF16Ref(in, op)
					var sent atomic.Int64
					gs := countedLocal(n, cfg, &sent)
					bufs := make([][]uint16, n)
					for i := range bufs {
						bufs[i] = append([]uint16(nil), in[i]...)
					}
					noErrs(t, runAll(gs, func(g Group) error { return g.AllreduceBF16(t.Context(), bufs[g.Rank()], op) }))
					for i, b := range bufs {
						for j := range b {
							if b[j] != want[j] {
								t.Fatalf("%s: member %d element %d: %#04x, want %#04x", name, i, j, b[j], want[j])
							}
						}
					}
					wantBytes := int64(2 * (n - 1) * 2 * size) // scatter and gather: 2(n-1)/n of the buffer, n members
					if 2*size <= cfg.withDefaults().DirectMaxBytes {
						wantBytes = int64(n * (n - 1) * 2 * size)
					}
					if n == 1 {
						wantBytes = 0
					}
					if got := sent.Load(); got != wantBytes {
						t.Fatalf("%s: %d bytes sent, want %d (two a element)", name, got, wantBytes)
					}
				}
			}
		}
	}
}

// TestAllreduceBF16Rounding: the sum is rounded once. 1 + 2⁻⁸ + 2⁻⁸ in
// bfloat16 (8 bits of precision): rounding each partial sum keeps 1 (a tie,
// to even), rounding once gives 1 + 2⁻⁷.
func TestAllreduceBF16Rounding(t *testing.T) {
	one, tiny := reduce.ToBF16(1), reduce.ToBF16(1.0/256)
	for _, cfg := range configs {
		gs := NewLocalConfig("g", 3, cfg)
		size := 40000 // large enough for the scatter in the ring configs
		bufs := make([][]uint16, 3)
		for i := range bufs {
			bufs[i] = make([]uint16, size)
			for j := range bufs[i] {
				bufs[i][j] = tiny
				if i == 0 {
					bufs[i][j] = one
				}
			}
		}
		noErrs(t, runAll(gs, func(g Group) error { return g.AllreduceBF16(t.Context(), bufs[g.Rank()], Sum) }))
		want := reduce.ToBF16(1 + 2.0/256)
		if want == one {
			t.Fatal("the reference rounds to 1")
		}
		for i, b := range bufs {
			for j := range b {
				if b[j] != want {
					t.Fatalf("member %d element %d: %#04x, want %#04x", i, j, b[j], want)
				}
			}
		}
	}
}

// BenchmarkAllreduceBF16 compares an allreduce of the same n elements as
// float32 and as bfloat16 between in-memory members, where the bfloat16
// path's conversions, not the wire, set its pace:
// go test -run '^$' -bench AllreduceBF16 ./actors/collective
func BenchmarkAllreduceBF16(b *testing.B) {
	const n = 1 << 20
	for _, members := range []int{2, 4} {
		for _, kind := range []string{"f32", "bf16"} {
			b.Run(fmt.Sprintf("n%d/%s", members, kind), func(b *testing.B) {
				gs := NewLocal("g", members)
				in := randBF16(members, n, 1)
				f := make([][]float32, members)
				for i := range f {
					f[i] = make([]float32, n)
					reduce.BF16ToF32(f[i], in[i])
				}
				b.SetBytes(4 * n) // the buffer's float32 size for both: MB/s compare the same values
				for b.Loop() {
					for _, err := range runAll(gs, func(g Group) error {
						if kind == "bf16" {
							return g.AllreduceBF16(b.Context(), in[g.Rank()], Sum)
						}
						return g.Allreduce(b.Context(), f[g.Rank()], Sum)
					}) {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
