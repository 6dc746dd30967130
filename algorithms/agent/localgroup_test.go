package agent

import (
	"context"
	"sync"
)

// localHub is an in-memory group for tests: every collective waits for
// all members, then reduces in rank order.
type localHub struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n       int
	bufs    [][]float32
	arrived int
	gen     int
	out     []float32
}

type localMember struct {
	h    *localHub
	rank int
}

func newLocalGroups(n int) []replicaGroup {
	h := &localHub{n: n, bufs: make([][]float32, n)}
	h.cond = sync.NewCond(&h.mu)
	out := make([]replicaGroup, n)
	for r := range out {
		out[r] = &localMember{h, r}
	}
	return out
}

func (m *localMember) Rank() int { return m.rank }
func (m *localMember) Size() int { return m.h.n }

// exchange hands buf in and, once every member has, combine makes the
// result every member copies out.
func (m *localMember) exchange(buf []float32, combine func([][]float32) []float32, dst []float32) {
	h := m.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bufs[m.rank] = append([]float32(nil), buf...)
	h.arrived++
	if h.arrived == h.n {
		h.out = combine(h.bufs)
		h.arrived = 0
		h.gen++
		h.cond.Broadcast()
	} else {
		g := h.gen
		for h.gen == g {
			h.cond.Wait()
		}
	}
	copy(dst, h.out)
}

func (m *localMember) Allreduce(_ context.Context, buf []float32, _ collectiveOp) error {
	m.exchange(buf, func(bs [][]float32) []float32 {
		s := append([]float32(nil), bs[0]...)
		for _, b := range bs[1:] {
			for i := range s {
				s[i] += b[i]
			}
		}
		return s
	}, buf)
	return nil
}

func (m *localMember) Allgather(_ context.Context, send, recv []float32) error {
	m.exchange(send, func(bs [][]float32) []float32 {
		var s []float32
		for _, b := range bs {
			s = append(s, b...)
		}
		return s
	}, recv)
	return nil
}
