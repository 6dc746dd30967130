package collective

import (
	"context"
	"unsafe"

	"troupe/internal/reduce"
)

// allreduceBF16 reduces bfloat16 buffers that travel as bfloat16, two
// bytes an element: each element is reduced once, in float32, over the
// members' values in rank order (0, 1, ..., n-1), divided by n for Mean,
// and rounded once to nearest with ties to even. A partial sum never
// travels, so nothing is rounded twice, and the order depends on nothing
// but the rank: every member ends with the same bits.
//
// Small buffers go directly between every pair of members (each reduces
// the whole buffer). Larger ones are scattered: member k receives segment
// k of every member's buffer, reduces it and sends the result to every
// other member. Both phases go in chunks of ChunkBytes, so that reducing
// a chunk overlaps receiving the next and the results start out as soon as
// the first chunk is reduced. Each member sends and receives 2(n-1)/n of
// the buffer, as the ring does, in bfloat16.
func (g *group) allreduceBF16(ctx context.Context, h Header, buf []uint16, op Op) error {
	if g.size == 1 || len(buf) == 0 {
		return nil
	}
	if 2*len(buf) <= g.cfg.DirectMaxBytes {
		return g.allreduceBF16Direct(ctx, h, buf, op)
	}
	return g.allreduceBF16Scatter(ctx, h, buf, op)
}

// bf16Block bounds the float32 scratch of a direct reduction.
const bf16Block = 4096

func (g *group) allreduceBF16Direct(ctx context.Context, h Header, buf []uint16, op Op) error {
	n, m := g.size, len(buf)
	all := make([]uint16, n*m)
	copy(all[g.rank*m:], buf)
	err := g.exchange(ctx, h, u16Bytes(buf), func(p int) []byte { return u16Bytes(all[p*m : (p+1)*m]) })
	if err != nil {
		return err
	}
	acc := make([]float32, min(m, bf16Block))
	for lo := 0; lo < m; lo += bf16Block {
		hi := min(lo+bf16Block, m)
		a := acc[:hi-lo]
		reduce.BF16ToF32(a, all[lo:hi])
		for p := 1; p < n; p++ {
			addBF16(a, all[p*m+lo:p*m+hi], op)
		}
		if op == Mean {
			divide(a, n)
		}
		reduce.F32ToBF16(buf[lo:hi], a)
	}
	return nil
}

func (g *group) allreduceBF16Scatter(ctx context.Context, h Header, buf []uint16, op Op) error {
	n, r := g.size, g.rank
	seg := func(k int) (int, int) { return k * len(buf) / n, (k + 1) * len(buf) / n }
	chunk := max(g.cfg.ChunkBytes/2, 32)
	chunks := func(k int) int {
		lo, hi := seg(k)
		return (hi - lo + chunk - 1) / chunk
	}
	// part is chunk c of segment k.
	part := func(k, c int) []uint16 {
		lo, hi := seg(k)
		a := lo + c*chunk
		return buf[a:min(a+chunk, hi)]
	}
	maxC := 0
	for k := range n {
		maxC = max(maxC, chunks(k))
	}
	// Chunk numbers run per sender and receiver: segment q's chunks
	// first (the scatter), then the sender's reduced segment's.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{}, chunks(r)) // one token per reduced chunk
	scattered := make(chan struct{})        // the scatter's sends are done: the gather may write
	sent := make(chan error, 1)
	go func() {
		send := func(q, c int, data []uint16) error {
			hd := h
			hd.Chunk = uint32(c)
			return g.links.Send(cctx, q, hd, u16Bytes(data))
		}
		for c := range maxC {
			for k := 1; k < n; k++ {
				q := (r + k) % n
				if c < chunks(q) {
					if err := send(q, c, part(q, c)); err != nil {
						close(scattered)
						sent <- err
						return
					}
				}
			}
		}
		close(scattered)
		for c := range chunks(r) {
			select {
			case <-ready:
			case <-cctx.Done():
				sent <- cctx.Err()
				return
			}
			for k := 1; k < n; k++ {
				q := (r + k) % n
				if err := send(q, chunks(q)+c, part(r, c)); err != nil {
					sent <- err
					return
				}
			}
		}
		sent <- nil
	}()
	fail := func(err error) error {
		cancel()
		<-sent
		return err
	}
	acc := make([]float32, chunk)
	var raw []uint16
	rw, direct := g.links.(RecvWither)
	if !direct {
		raw = make([]uint16, chunk)
	}
	for c := range chunks(r) {
		mine := part(r, c)
		a := acc[:len(mine)]
		for p := range n {
			// The first value converts into the sum, the others add to it.
			into := func(x []uint16) {
				if p == 0 {
					reduce.BF16ToF32(a, x)
					return
				}
				addBF16(a, x, op)
			}
			if p == r {
				into(mine)
				continue
			}
			hd := h
			hd.Chunk = uint32(c)
			var err error
			if direct {
				err = rw.RecvWith(cctx, p, hd, 2*len(mine), func(b []byte) { into(bytesU16(b)) })
			} else if err = g.links.Recv(cctx, p, hd, u16Bytes(raw[:len(mine)])); err == nil {
				into(raw[:len(mine)])
			}
			if err != nil {
				return fail(err)
			}
		}
		if op == Mean {
			divide(a, n)
		}
		reduce.F32ToBF16(mine, a)
		ready <- struct{}{}
	}
	select {
	case <-scattered:
	case <-cctx.Done():
		return fail(cctx.Err())
	}
	for c := range maxC {
		for k := 1; k < n; k++ {
			p := (r - k + n) % n
			if c >= chunks(p) {
				continue
			}
			hd := h
			hd.Chunk = uint32(chunks(r) + c)
			if err := g.links.Recv(cctx, p, hd, u16Bytes(part(p, c))); err != nil {
				return fail(err)
			}
		}
	}
	return <-sent
}

// addBF16 reduces the bfloat16 values x into acc in one pass: what
// converting x to float32 and reduceInto would give, bit for bit (an
// IEEE float32 add per element; Max as MAXPS: acc unless acc > x fails).
func addBF16(acc []float32, x []uint16, op Op) {
	if op == Max {
		reduce.MaxBF16(acc, x)
		return
	}
	reduce.AddBF16(acc, x)
}

// bytesU16 views b, whose length is even and whose start is 2-aligned, as
// uint16s.
func bytesU16(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}
