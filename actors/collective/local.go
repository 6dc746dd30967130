package collective

import (
	"context"
	"fmt"
	"sync"
)

// NewLocal returns the n members of an in-memory group named name, for
// goroutines of one process and for tests: member i has rank i. The
// members run the same algorithms as members over the network.
func NewLocal(name string, n int) []Group {
	return NewLocalConfig(name, n, Config{})
}

// NewLocalConfig is NewLocal with the algorithms' settings (zero fields
// take their defaults).
func NewLocalConfig(name string, n int, cfg Config) []Group {
	if n < 1 {
		n = 1
	}
	h := newMemHub(name, n)
	gs := make([]Group, n)
	for r := range gs {
		g, err := NewGroup(name, r, n, nil, &memLinks{h: h, rank: r}, cfg)
		if err != nil {
			panic(err) // the arguments are valid by construction
		}
		gs[r] = g
	}
	return gs
}

func newMemHub(name string, n int) *memHub {
	h := &memHub{name: name, q: make([][]chan memMsg, n), lostCh: make(chan struct{}), gone: make([]chan struct{}, n), leave: make([]sync.Once, n)}
	for i := range h.gone {
		h.gone[i] = make(chan struct{})
	}
	for i := range h.q {
		h.q[i] = make([]chan memMsg, n)
		for j := range h.q[i] {
			if i != j {
				h.q[i][j] = make(chan memMsg, memQueue)
			}
		}
	}
	return h
}

// memQueue is how many messages a sender may be ahead of its receiver.
const memQueue = 64

// memHub is the shared state of an in-memory group.
type memHub struct {
	name string
	q    [][]chan memMsg // q[from][to]

	mu     sync.Mutex // guards lost
	lost   error      // the first failure, a *MemberError
	lostCh chan struct{}

	// gone[r] is closed when member r closed its links cleanly: it sent
	// everything it will send. Only calls that need more from r fail.
	gone  []chan struct{}
	leave []sync.Once
}

type memMsg struct {
	h    Header
	data []byte
}

func (h *memHub) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost == nil {
		h.lost = err
		close(h.lostCh)
	}
}

func (h *memHub) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// memLinks is one member's Links in a memHub.
type memLinks struct {
	h       *memHub
	rank    int
	release func() // when not nil, called once by Close
	once    sync.Once
}

func (l *memLinks) Send(ctx context.Context, to int, hd Header, data []byte) error {
	if err := l.h.err(); err != nil {
		return err
	}
	select {
	case <-l.h.gone[l.rank]:
		return l.closedErr()
	case <-l.h.gone[to]:
		return l.leftErr(to)
	default:
	}
	m := memMsg{h: hd, data: append([]byte(nil), data...)}
	select {
	case l.h.q[l.rank][to] <- m:
		return nil
	case <-l.h.lostCh:
		return l.h.err()
	case <-l.h.gone[to]:
		return l.leftErr(to)
	case <-l.h.gone[l.rank]:
		return l.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *memLinks) Recv(ctx context.Context, from int, hd Header, buf []byte) error {
	take := func(m memMsg) error {
		if m.h != hd || len(m.data) != len(buf) {
			return &MemberError{Group: l.h.name, Rank: from, Err: fmt.Errorf("%w: got %s, want %s", ErrMismatch, describe(m.h, len(m.data)), describe(hd, len(buf)))}
		}
		copy(buf, m.data)
		return nil
	}
	select {
	case m := <-l.h.q[from][l.rank]:
		return take(m)
	case <-l.h.lostCh:
		return l.h.err()
	case <-l.h.gone[from]:
		// What it sent before it left is still good.
		select {
		case m := <-l.h.q[from][l.rank]:
			return take(m)
		default:
			return l.leftErr(from)
		}
	case <-l.h.gone[l.rank]:
		return l.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *memLinks) Fail(err error) { l.h.fail(err) }

// Close leaves the group cleanly: what this member sent stays for the
// others to receive, and only their calls that need more from it fail.
func (l *memLinks) Close() error {
	l.once.Do(func() {
		if l.release != nil {
			l.release()
		}
		l.h.leave[l.rank].Do(func() { close(l.h.gone[l.rank]) })
	})
	return nil
}

// leftErr is the error of a call that needs a message from member r, which
// left the group.
func (l *memLinks) leftErr(r int) error {
	return &MemberError{Group: l.h.name, Rank: r, Err: fmt.Errorf("%w: it left the group", ErrMemberLost)}
}

func (l *memLinks) closedErr() error {
	return fmt.Errorf("collective group %q: %w", l.h.name, ErrClosed)
}

// describe names a message for a mismatch error.
func describe(h Header, bytes int) string {
	s := fmt.Sprintf("%s #%d of %d elements", h.Kind, h.Seq, h.Count)
	switch h.Kind {
	case KindAllreduce, KindAllreduceBF16, KindReduceScatter:
		s += " (" + h.Op.String() + ")"
	case KindBroadcast, KindBroadcastBF16:
		s += fmt.Sprintf(" (root %d)", h.Root)
	}
	return s + fmt.Sprintf(", chunk %d of %d bytes", h.Chunk, bytes)
}
