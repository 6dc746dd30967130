package collective

import (
	"context"
)

// piece is a chunk of the buffer one ring message carries.
type piece struct {
	lo, hi int  // element range
	reduce bool // a reduce-scatter message (reduced into the buffer) or an allgather one (copied)
	last   bool // the reduce-scatter's last step: the chunk is final after it
}

// ring runs a pipelined ring over buf: a reduce-scatter (rs), after which
// member r holds the reduction of segment r, then an allgather (ag) that
// passes the reduced segments round. Segment k is elements
// [k·len/n, (k+1)·len/n). Each segment goes in chunks of ChunkBytes: a
// sender goroutine sends chunk i as soon as the receiver loop has reduced
// it, so sending one chunk overlaps receiving and reducing the next.
//
// Each segment's reduction starts at one member and takes the others' values
// in ring order, always the same for a given group size and length; the
// allgather then copies the result, so every member ends with its bits.
func (g *group) ring(ctx context.Context, h Header, buf []float32, op Op, rs, ag bool) error {
	n, r := g.size, g.rank
	right, left := (r+1)%n, (r-1+n)%n
	seg := func(k int) (int, int) {
		k = ((k % n) + n) % n
		return k * len(buf) / n, (k + 1) * len(buf) / n
	}
	chunk := max(g.cfg.ChunkBytes/4, 16)
	pieces := func(list []piece, k int, reduce, last bool) []piece {
		lo, hi := seg(k)
		for a := lo; a < hi; a += chunk {
			list = append(list, piece{lo: a, hi: min(a+chunk, hi), reduce: reduce, last: last})
		}
		return list
	}
	// The receive schedule: reduce-scatter step s brings segment r-s-2,
	// allgather step s segment r-s-1.
	var recv []piece
	lastStep := 0
	if rs {
		for s := 0; s < n-1; s++ {
			before := len(recv)
			recv = pieces(recv, r-s-2, true, s == n-2)
			lastStep = len(recv) - before
		}
	}
	if ag {
		for s := 0; s < n-1; s++ {
			before := len(recv)
			recv = pieces(recv, r-s-1, false, false)
			lastStep = len(recv) - before
		}
	}
	// The send schedule: first this member's own segment (r-1 for a
	// reduce-scatter, r for an allgather alone), then what it received,
	// but for the last step's, each once it is reduced.
	first := r
	if rs {
		first = r - 1
	}
	send := pieces(nil, first, false, false)
	nFirst := len(send)
	send = append(send, recv[:len(recv)-lastStep]...)

	var tmp []float32
	if _, ok := g.links.(RecvWither); !ok {
		tmp = make([]float32, chunk)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{}, len(recv)) // one token per received chunk, in order
	sent := make(chan error, 1)
	go func() {
		for i, p := range send {
			if i >= nFirst {
				select {
				case <-ready:
				case <-cctx.Done():
					sent <- cctx.Err()
					return
				}
			}
			hd := h
			hd.Chunk = uint32(i)
			if err := g.links.Send(cctx, right, hd, f32Bytes(buf[p.lo:p.hi])); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for j, p := range recv {
		hd := h
		hd.Chunk = uint32(j)
		dst := buf[p.lo:p.hi]
		var err error
		if p.reduce {
			if rw, ok := g.links.(RecvWither); ok {
				err = rw.RecvWith(cctx, left, hd, 4*len(dst), func(b []byte) { reduceInto(dst, bytesF32(b), op) })
			} else {
				src := tmp[:len(dst)]
				if err = g.links.Recv(cctx, left, hd, f32Bytes(src)); err == nil {
					reduceInto(dst, src, op)
				}
			}
			if err == nil && p.last && op == Mean {
				divide(dst, n)
			}
		} else {
			err = g.links.Recv(cctx, left, hd, f32Bytes(dst))
		}
		if err != nil {
			cancel()
			<-sent
			return err
		}
		ready <- struct{}{}
	}
	return <-sent
}

// broadcast sends root's data to every member: directly for small
// buffers, else down a chain root, root+1, ... in chunks, each member
// forwarding chunk i while it receives chunk i+1.
func (g *group) broadcast(ctx context.Context, h Header, data []byte, root int) error {
	n := g.size
	if n == 1 || len(data) == 0 {
		return nil
	}
	if len(data) <= g.cfg.DirectMaxBytes {
		if g.rank == root {
			for k := 1; k < n; k++ {
				if err := g.links.Send(ctx, (root+k)%n, h, data); err != nil {
					return err
				}
			}
			return nil
		}
		return g.links.Recv(ctx, root, h, data)
	}
	pos := (g.rank - root + n) % n
	right, left := (g.rank+1)%n, (g.rank-1+n)%n
	cb := g.cfg.ChunkBytes
	var chunks [][2]int
	for a := 0; a < len(data); a += cb {
		chunks = append(chunks, [2]int{a, min(a+cb, len(data))})
	}
	if pos == 0 {
		for i, c := range chunks {
			hd := h
			hd.Chunk = uint32(i)
			if err := g.links.Send(ctx, right, hd, data[c[0]:c[1]]); err != nil {
				return err
			}
		}
		return nil
	}
	forward := pos < n-1
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{}, len(chunks))
	sent := make(chan error, 1)
	if forward {
		go func() {
			for i, c := range chunks {
				select {
				case <-ready:
				case <-cctx.Done():
					sent <- cctx.Err()
					return
				}
				hd := h
				hd.Chunk = uint32(i)
				if err := g.links.Send(cctx, right, hd, data[c[0]:c[1]]); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
	} else {
		sent <- nil
	}
	for i, c := range chunks {
		hd := h
		hd.Chunk = uint32(i)
		if err := g.links.Recv(cctx, left, hd, data[c[0]:c[1]]); err != nil {
			cancel()
			<-sent
			return err
		}
		ready <- struct{}{}
	}
	return <-sent
}
