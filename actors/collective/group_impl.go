package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"troupe/internal/reduce"
)

// NewGroup returns member rank of a group of size members that talk over
// links. actorIDs, when not nil, names each rank's actor in errors.
// Transports (and NewLocal) call it; programs use Create or NewLocal.
func NewGroup(name string, rank, size int, actorIDs []string, links Links, cfg Config) (Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("%w: rank %d of a group of %d", ErrBadArg, rank, size)
	}
	if actorIDs != nil && len(actorIDs) != size {
		return nil, fmt.Errorf("%w: %d actor IDs for a group of %d", ErrBadArg, len(actorIDs), size)
	}
	return &group{name: name, rank: rank, size: size, actors: actorIDs, links: links, cfg: cfg.withDefaults()}, nil
}

// group runs the algorithms over Links.
type group struct {
	name       string
	rank, size int
	actors     []string
	links      Links
	cfg        Config

	// closed is set by Close, which does not wait for a call in progress:
	// closing the links ends it.
	closed atomic.Bool

	mu      sync.Mutex // serialises calls; guards the following
	seq     uint64
	broken  error // the failure that ended the group, returned by later calls
	scratch []float32
}

// Lost is closed once the group's links say it failed (LossNotifier);
// it is never closed over links that do not say (the in-memory ones).
func (g *group) Lost() <-chan struct{} {
	if n, ok := g.links.(LossNotifier); ok {
		return n.Lost()
	}
	return nil
}

// Err is the failure Lost announced, nil before.
func (g *group) Err() error {
	if n, ok := g.links.(LossNotifier); ok {
		return n.Err()
	}
	return nil
}

func (g *group) Name() string { return g.name }
func (g *group) Rank() int    { return g.rank }
func (g *group) Size() int    { return g.size }

func (g *group) Close() error {
	if !g.closed.CompareAndSwap(false, true) {
		return nil
	}
	return g.links.Close()
}

// call runs one collective call: it numbers it, and turns any failure into
// the group's end, told to every peer so that none waits for this member.
func (g *group) call(ctx context.Context, h Header, fn func(h Header) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return fmt.Errorf("collective group %q: %s: %w", g.name, h.Kind, ErrClosed)
	}
	if g.broken != nil {
		return g.broken
	}
	g.seq++
	h.Seq = g.seq
	// A context already over fails the call even where the exchange could
	// complete, so that a cancelled member reliably drops out.
	err := ctx.Err()
	if err == nil {
		err = fn(h)
	}
	if err == nil {
		return nil
	}
	if g.closed.Load() {
		g.broken = fmt.Errorf("collective group %q: %s: %w", g.name, h.Kind, ErrClosed)
		return g.broken
	}
	var me *MemberError
	if !errors.As(err, &me) {
		// This member's own failure (its context ended): the peers lose it.
		me = &MemberError{Group: g.name, Rank: g.rank, Err: fmt.Errorf("%w: its %s call ended: %v", ErrMemberLost, h.Kind, err)}
	} else {
		// The links may hand every member the same error: fill a copy.
		cp := *me
		me = &cp
		err = me
	}
	if me.Actor == "" && g.actors != nil && me.Rank >= 0 && me.Rank < len(g.actors) {
		me.Actor = g.actors[me.Rank]
	}
	g.links.Fail(me)
	g.broken = me
	if !errors.Is(err, me) {
		return fmt.Errorf("collective group %q: %s: %w", g.name, h.Kind, err)
	}
	return me
}

func (g *group) Allreduce(ctx context.Context, buf []float32, op Op) error {
	if op > Max {
		return fmt.Errorf("%w: %v", ErrBadArg, op)
	}
	return g.call(ctx, Header{Kind: KindAllreduce, Op: op, Count: uint64(len(buf))}, func(h Header) error {
		return g.allreduce(ctx, h, buf, op)
	})
}

func (g *group) AllreduceBF16(ctx context.Context, buf []uint16, op Op) error {
	if op > Max {
		return fmt.Errorf("%w: %v", ErrBadArg, op)
	}
	return g.call(ctx, Header{Kind: KindAllreduceBF16, Op: op, Count: uint64(len(buf))}, func(h Header) error {
		return g.allreduceBF16(ctx, h, buf, op)
	})
}

func (g *group) Broadcast(ctx context.Context, buf []float32, root int) error {
	if root < 0 || root >= g.size {
		return fmt.Errorf("%w: root %d of a group of %d", ErrBadArg, root, g.size)
	}
	return g.call(ctx, Header{Kind: KindBroadcast, Root: int32(root), Count: uint64(len(buf))}, func(h Header) error {
		return g.broadcast(ctx, h, f32Bytes(buf), root)
	})
}

func (g *group) BroadcastBF16(ctx context.Context, buf []uint16, root int) error {
	if root < 0 || root >= g.size {
		return fmt.Errorf("%w: root %d of a group of %d", ErrBadArg, root, g.size)
	}
	return g.call(ctx, Header{Kind: KindBroadcastBF16, Root: int32(root), Count: uint64(len(buf))}, func(h Header) error {
		return g.broadcast(ctx, h, u16Bytes(buf), root)
	})
}

func (g *group) Allgather(ctx context.Context, send, recv []float32) error {
	if len(recv) != g.size*len(send) {
		return fmt.Errorf("%w: allgather of %d elements into %d (want %d×%d)", ErrBadArg, len(send), len(recv), g.size, len(send))
	}
	return g.call(ctx, Header{Kind: KindAllgather, Count: uint64(len(send))}, func(h Header) error {
		m := len(send)
		copy(recv[g.rank*m:], send)
		if g.size == 1 || m == 0 {
			return nil
		}
		if 4*m*g.size <= g.cfg.DirectMaxBytes {
			return g.allgatherDirect(ctx, h, recv, m)
		}
		return g.ring(ctx, h, recv, Sum, false, true)
	})
}

func (g *group) ReduceScatter(ctx context.Context, send, recv []float32, op Op) error {
	if op > Max {
		return fmt.Errorf("%w: %v", ErrBadArg, op)
	}
	if len(send) != g.size*len(recv) {
		return fmt.Errorf("%w: reduce-scatter of %d elements into %d (want %d×%d)", ErrBadArg, len(send), len(recv), g.size, len(recv))
	}
	return g.call(ctx, Header{Kind: KindReduceScatter, Op: op, Count: uint64(len(send))}, func(h Header) error {
		m := len(recv)
		if g.size == 1 {
			copy(recv, send)
			return nil
		}
		if m == 0 {
			return nil
		}
		work := g.scratchF32(len(send))
		copy(work, send)
		var err error
		if 4*len(send) <= g.cfg.DirectMaxBytes {
			err = g.allreduceDirect(ctx, h, work, op)
		} else {
			err = g.ring(ctx, h, work, op, true, false)
		}
		if err != nil {
			return err
		}
		copy(recv, work[g.rank*m:(g.rank+1)*m])
		return nil
	})
}

func (g *group) Barrier(ctx context.Context) error {
	return g.call(ctx, Header{Kind: KindBarrier}, func(h Header) error {
		if g.size == 1 {
			return nil
		}
		return g.exchange(ctx, h, nil, func(int) []byte { return nil })
	})
}

// allreduce picks the algorithm by size.
func (g *group) allreduce(ctx context.Context, h Header, buf []float32, op Op) error {
	if g.size == 1 || len(buf) == 0 {
		return nil
	}
	if 4*len(buf) <= g.cfg.DirectMaxBytes {
		return g.allreduceDirect(ctx, h, buf, op)
	}
	return g.ring(ctx, h, buf, op, true, true)
}

// scratchF32 returns the group's scratch space, grown to n elements.
func (g *group) scratchF32(n int) []float32 {
	if cap(g.scratch) < n {
		g.scratch = make([]float32, n)
	}
	return g.scratch[:n]
}

// exchange sends send to every other member and receives each member's
// message into recvInto(member), all at once: the direct algorithms' one
// round. Member r sends to r+1, r+2, ... and receives from r-1, r-2, ...
// so that no member is everyone's first.
func (g *group) exchange(ctx context.Context, h Header, send []byte, recvInto func(p int) []byte) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		for k := 1; k < g.size; k++ {
			if err := g.links.Send(cctx, (g.rank+k)%g.size, h, send); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for k := 1; k < g.size; k++ {
		p := (g.rank - k + g.size) % g.size
		if err := g.links.Recv(cctx, p, h, recvInto(p)); err != nil {
			cancel()
			<-sent
			return err
		}
	}
	return <-sent
}

// allreduceDirect: every member receives every other member's buffer and
// reduces them all in rank order, so each ends with the same bits.
func (g *group) allreduceDirect(ctx context.Context, h Header, buf []float32, op Op) error {
	n := len(buf)
	all := g.scratchF32(n * g.size)
	copy(all[g.rank*n:], buf)
	err := g.exchange(ctx, h, f32Bytes(buf), func(p int) []byte { return f32Bytes(all[p*n : (p+1)*n]) })
	if err != nil {
		return err
	}
	copy(buf, all[:n])
	for p := 1; p < g.size; p++ {
		reduceInto(buf, all[p*n:(p+1)*n], op)
	}
	if op == Mean {
		divide(buf, g.size)
	}
	return nil
}

func (g *group) allgatherDirect(ctx context.Context, h Header, recv []float32, m int) error {
	return g.exchange(ctx, h, f32Bytes(recv[g.rank*m:(g.rank+1)*m]), func(p int) []byte {
		return f32Bytes(recv[p*m : (p+1)*m])
	})
}

func reduceInto(dst, src []float32, op Op) {
	switch op {
	case Sum, Mean:
		reduce.Add(dst, src)
	case Max:
		reduce.Max(dst, src)
	}
}

// divide sets x[i] /= n (a division, as torch's mean, not a product with
// 1/n).
func divide(x []float32, n int) {
	d := float32(n)
	for i := range x {
		x[i] /= d
	}
}

func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// bytesF32 views b, whose length is a multiple of 4 and whose start is
// 4-aligned (Go's allocations are), as float32s.
func bytesF32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func u16Bytes(x []uint16) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 2*len(x))
}
