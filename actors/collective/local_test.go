package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// runAll runs fn on every member at once and returns their errors.
func runAll(gs []Group, fn func(g Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() { errs[i] = fn(g) })
	}
	wg.Wait()
	return errs
}

func noErrs(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
}

func randBufs(n, size int, seed uint64) [][]float32 {
	r := rand.New(rand.NewPCG(seed, 2))
	out := make([][]float32, n)
	for i := range out {
		out[i] = make([]float32, size)
		for j := range out[i] {
			out[i][j] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(6)-3)))
		}
	}
	return out
}

// configs cover the direct exchange, the ring with one chunk per segment,
// and the ring with many small chunks.
var configs = []Config{
	{DirectMaxBytes: 1 << 30},
	{DirectMaxBytes: 1, ChunkBytes: 1 << 20},
	{DirectMaxBytes: 1, ChunkBytes: 64},
}

// TestAllreduce: every member ends with the same bits, close to a float64
// reduction, for sum, mean and max, group sizes 1..5 and lengths that do
// not divide evenly.
func TestAllreduce(t *testing.T) {
	for ci, cfg := range configs {
		for _, n := range []int{1, 2, 3, 4, 5} {
			for _, size := range []int{0, 1, 3, 17, 1000, 4099} {
				for _, op := range []Op{Sum, Mean, Max} {
					t.Run(fmt.Sprintf("cfg%d/n%d/len%d/%v", ci, n, size, op), func(t *testing.T) {
						in := randBufs(n, size, uint64(n*size+int(op)))
						want := make([]float64, size)
						for j := range want {
							want[j] = math.Inf(-1)
							if op != Max {
								want[j] = 0
							}
							for i := range n {
								if op == Max {
									want[j] = math.Max(want[j], float64(in[i][j]))
								} else {
									want[j] += float64(in[i][j])
								}
							}
							if op == Mean {
								want[j] /= float64(n)
							}
						}
						gs := NewLocalConfig("g", n, cfg)
						bufs := make([][]float32, n)
						for i := range bufs {
							bufs[i] = append([]float32(nil), in[i]...)
						}
						noErrs(t, runAll(gs, func(g Group) error { return g.Allreduce(t.Context(), bufs[g.Rank()], op) }))
						for i := 1; i < n; i++ {
							for j := range bufs[i] {
								if math.Float32bits(bufs[i][j]) != math.Float32bits(bufs[0][j]) {
									t.Fatalf("member %d element %d = %v, member 0 has %v: not the same bits", i, j, bufs[i][j], bufs[0][j])
								}
							}
						}
						for j, w := range want {
							if d := math.Abs(float64(bufs[0][j]) - w); d > 1e-5*math.Max(1, math.Abs(w))*float64(n) {
								t.Fatalf("element %d = %v, want %v", j, bufs[0][j], w)
							}
						}
					})
				}
			}
		}
	}
}

// TestAllreduceDeterministic: the same inputs give the same bits twice.
func TestAllreduceDeterministic(t *testing.T) {
	in := randBufs(4, 10007, 9)
	var first []float32
	for range 2 {
		gs := NewLocalConfig("g", 4, Config{DirectMaxBytes: 1, ChunkBytes: 1024})
		bufs := make([][]float32, 4)
		for i := range bufs {
			bufs[i] = append([]float32(nil), in[i]...)
		}
		noErrs(t, runAll(gs, func(g Group) error { return g.Allreduce(t.Context(), bufs[g.Rank()], Sum) }))
		if first == nil {
			first = bufs[0]
			continue
		}
		for j := range first {
			if math.Float32bits(first[j]) != math.Float32bits(bufs[0][j]) {
				t.Fatalf("element %d: %v then %v", j, first[j], bufs[0][j])
			}
		}
	}
}

func TestAllreduceBF16(t *testing.T) {
	for _, cfg := range configs {
		gs := NewLocalConfig("g", 3, cfg)
		bufs := [][]uint16{{0x3f80, 0x4000, 0xbf80}, {0x3f80, 0x4000, 0x3f80}, {0x3f80, 0x4040, 0x3f80}}
		noErrs(t, runAll(gs, func(g Group) error { return g.AllreduceBF16(t.Context(), bufs[g.Rank()], Sum) }))
		// 1+1+1 = 3 (0x4040), 2+2+3 = 7 (0x40e0), -1+1+1 = 1 (0x3f80)
		for i, b := range bufs {
			if b[0] != 0x4040 || b[1] != 0x40e0 || b[2] != 0x3f80 {
				t.Fatalf("member %d: %#x", i, b)
			}
		}
	}
}

func TestBroadcast(t *testing.T) {
	for _, cfg := range configs {
		for _, n := range []int{1, 2, 4, 5} {
			for root := range n {
				in := randBufs(n, 3001, uint64(root))
				gs := NewLocalConfig("g", n, cfg)
				noErrs(t, runAll(gs, func(g Group) error { return g.Broadcast(t.Context(), in[g.Rank()], root) }))
				for i := range n {
					for j := range in[i] {
						if in[i][j] != in[root][j] {
							t.Fatalf("n=%d root=%d: member %d element %d differs", n, root, i, j)
						}
					}
				}
				b16 := [][]uint16{{1, 2}, {3, 4}, {5, 6}, {7, 8}, {9, 10}}[:n]
				noErrs(t, runAll(gs, func(g Group) error { return g.BroadcastBF16(t.Context(), b16[g.Rank()], root) }))
				for i := range n {
					if b16[i][0] != uint16(2*root+1) || b16[i][1] != uint16(2*root+2) {
						t.Fatalf("bf16 n=%d root=%d: member %d has %v", n, root, i, b16[i])
					}
				}
			}
		}
	}
}

func TestAllgatherReduceScatter(t *testing.T) {
	for _, cfg := range configs {
		for _, n := range []int{1, 2, 3, 4} {
			const m = 513
			in := randBufs(n, m, 5)
			gs := NewLocalConfig("g", n, cfg)
			out := make([][]float32, n)
			noErrs(t, runAll(gs, func(g Group) error {
				out[g.Rank()] = make([]float32, n*m)
				return g.Allgather(t.Context(), in[g.Rank()], out[g.Rank()])
			}))
			for i := range n {
				for p := range n {
					for j := range m {
						if out[i][p*m+j] != in[p][j] {
							t.Fatalf("n=%d allgather: member %d slot %d element %d", n, i, p, j)
						}
					}
				}
			}
			// Reduce-scatter the gathered buffers (each member's the same):
			// member r gets n·in[r].
			rs := make([][]float32, n)
			noErrs(t, runAll(gs, func(g Group) error {
				rs[g.Rank()] = make([]float32, m)
				return g.ReduceScatter(t.Context(), out[g.Rank()], rs[g.Rank()], Mean)
			}))
			for r := range n {
				for j := range m {
					if d := math.Abs(float64(rs[r][j] - in[r][j])); d > 1e-5*math.Abs(float64(in[r][j]))+1e-30 {
						t.Fatalf("n=%d reduce-scatter mean: member %d element %d = %v, want %v", n, r, j, rs[r][j], in[r][j])
					}
				}
			}
		}
	}
}

func TestBarrier(t *testing.T) {
	gs := NewLocal("g", 4)
	var mu sync.Mutex
	arrived := 0
	noErrs(t, runAll(gs, func(g Group) error {
		mu.Lock()
		arrived++
		mu.Unlock()
		if err := g.Barrier(t.Context()); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if arrived != 4 {
			return fmt.Errorf("past the barrier with %d arrived", arrived)
		}
		return nil
	}))
}

func TestBadArgs(t *testing.T) {
	g := NewLocal("g", 2)[0]
	ctx := t.Context()
	for name, err := range map[string]error{
		"op":        g.Allreduce(ctx, nil, Op(9)),
		"root":      g.Broadcast(ctx, nil, 2),
		"allgather": g.Allgather(ctx, make([]float32, 2), make([]float32, 3)),
		"rs":        g.ReduceScatter(ctx, make([]float32, 3), make([]float32, 2), Sum),
	} {
		if !errors.Is(err, ErrBadArg) {
			t.Errorf("%s: %v, want ErrBadArg", name, err)
		}
	}
}

// TestMismatch: members calling different operations fail with
// ErrMismatch instead of mixing buffers.
func TestMismatch(t *testing.T) {
	gs := NewLocal("g", 2)
	errs := runAll(gs, func(g Group) error {
		if g.Rank() == 0 {
			return g.Allreduce(t.Context(), make([]float32, 4), Sum)
		}
		return g.Allreduce(t.Context(), make([]float32, 5), Sum)
	})
	for i, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("member %d: %v, want ErrMismatch", i, err)
		}
	}
}

// TestMemberLost: a member that leaves mid-call makes every other
// member's call fail with a *MemberError naming it, and later calls too.
func TestMemberLost(t *testing.T) {
	gs := NewLocalConfig("g", 4, Config{DirectMaxBytes: 1, ChunkBytes: 64})
	errs := runAll(gs, func(g Group) error {
		if g.Rank() == 2 {
			return g.Close()
		}
		return g.Allreduce(t.Context(), make([]float32, 1<<16), Sum)
	})
	for i, err := range errs {
		if i == 2 {
			continue
		}
		var me *MemberError
		if !errors.Is(err, ErrMemberLost) || !errors.As(err, &me) || me.Rank != 2 {
			t.Fatalf("member %d: %v, want a MemberError for rank 2", i, err)
		}
	}
	if err := gs[0].Barrier(t.Context()); !errors.Is(err, ErrMemberLost) {
		t.Fatalf("a later call: %v, want ErrMemberLost", err)
	}
	if err := gs[2].Barrier(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("a call on the closed member: %v, want ErrClosed", err)
	}
}

// TestCancelled: a member whose context ends mid-call makes the others'
// calls fail naming it, instead of leaving them waiting.
func TestCancelled(t *testing.T) {
	gs := NewLocal("g", 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	errs := runAll(gs, func(g Group) error {
		if g.Rank() == 1 {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return g.Barrier(c)
		}
		return g.Barrier(ctx)
	})
	if !errors.Is(errs[1], context.Canceled) {
		t.Fatalf("the cancelled member: %v, want context.Canceled", errs[1])
	}
	for _, i := range []int{0, 2} {
		var me *MemberError
		if !errors.As(errs[i], &me) || me.Rank != 1 || !errors.Is(errs[i], ErrMemberLost) {
			t.Fatalf("member %d: %v, want a MemberError for rank 1", i, errs[i])
		}
	}
}

func TestWithGroup(t *testing.T) {
	g := NewLocal("grads", 1)[0]
	ctx := WithGroup(t.Context(), g)
	if got, err := Of(ctx, "grads"); err != nil || got != g {
		t.Fatalf("Of = %v, %v", got, err)
	}
	if _, err := Of(ctx, "other"); !errors.Is(err, ErrNoGroup) {
		t.Fatalf("Of(other): %v, want ErrNoGroup", err)
	}
}

// TestCloseDuringCall: Close does not wait for a call in progress; the call
// ends with ErrClosed, the others' with ErrMemberLost.
func TestCloseDuringCall(t *testing.T) {
	gs := NewLocal("g", 2)
	done := make(chan error, 1)
	go func() { done <- gs[0].Barrier(t.Context()) }() // rank 1 never comes
	if err := gs[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) && !errors.Is(err, ErrMemberLost) {
		t.Fatalf("the call on the closed member: %v", err)
	}
	if err := gs[1].Barrier(t.Context()); !errors.Is(err, ErrMemberLost) {
		t.Fatalf("the other member: %v, want ErrMemberLost", err)
	}
}

// TestCloseAfterLastCall: a member that closes right after its last call
// has sent everything: the others still receive it, and only a later call
// that needs it fails, naming it.
func TestCloseAfterLastCall(t *testing.T) {
	for _, cfg := range configs {
		gs := NewLocalConfig("g", 3, cfg)
		want := randBufs(1, 500, 9)[0] // fits the in-memory queues: the root returns before the others receive
		if err := gs[0].Broadcast(t.Context(), append([]float32(nil), want...), 0); err != nil {
			t.Fatal(err)
		}
		gs[0].Close()
		bufs := [][]float32{nil, make([]float32, len(want)), make([]float32, len(want))}
		noErrs(t, runAll(gs[1:], func(g Group) error { return g.Broadcast(t.Context(), bufs[g.Rank()], 0) }))
		for _, b := range bufs[1:] {
			for i := range b {
				if b[i] != want[i] {
					t.Fatalf("element %d: %v, want %v", i, b[i], want[i])
				}
			}
		}
		errs := runAll(gs[1:], func(g Group) error { return g.Barrier(t.Context()) })
		for i, err := range errs {
			var me *MemberError
			if !errors.Is(err, ErrMemberLost) || !errors.As(err, &me) || me.Rank != 0 {
				t.Fatalf("member %d: %v, want a MemberError for rank 0", i+1, err)
			}
		}
	}
}
