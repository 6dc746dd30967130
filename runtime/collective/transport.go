package collective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"troupe/actors/collective"
	"troupe/runtime/transport"
)

// localKind names the Unix sockets of collective listeners.
const localKind = "collective"

// helloTimeout bounds reading a new connection's hello.
const helloTimeout = 10 * time.Second

// Transport is the network collective.Transport of one process: one
// listener (TCP, and a Unix socket beside it), opened at the first group.
type Transport struct {
	cfg Config

	mu     sync.Mutex // guards the following
	lis    []net.Listener
	addr   string
	slots  map[string]*slot // members being formed, by slotKey
	closed bool

	wg sync.WaitGroup // accept loops and hello readers
}

// slot is a member being formed: the connections of higher ranks arrive
// there.
type slot struct {
	m       collective.Member
	arrived chan arrival
}

type arrival struct {
	from int
	conn net.Conn
	seg  *shmSegment // shared memory with the member, on one host
}

var _ collective.Transport = (*Transport)(nil)

// New returns a Transport; it listens once a group is formed.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Transport{cfg: cfg.withDefaults(), slots: map[string]*slot{}}, nil
}

// Addr is the listener's TCP address, "" before the first group.
func (t *Transport) Addr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.addr
}

// Close stops listening and drops the groups being formed; formed groups'
// links stay until their groups close.
func (t *Transport) Close() error {
	t.mu.Lock()
	t.closed = true
	lis := t.lis
	t.lis = nil
	slots := t.slots
	t.slots = map[string]*slot{}
	t.mu.Unlock()
	for _, l := range lis {
		l.Close()
	}
	for _, s := range slots {
		drain(s)
	}
	t.wg.Wait()
	return nil
}

// listenLocked opens the listeners.
func (t *Transport) listenLocked() error {
	if t.addr != "" {
		return nil
	}
	if t.closed {
		return fmt.Errorf("collective transport: closed")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(t.cfg.Host, "0"))
	if err != nil {
		return fmt.Errorf("collective transport: listen: %w", err)
	}
	t.lis = append(t.lis, t.cfg.Security.Wrap(l))
	if runtime.GOOS == "linux" && !t.cfg.NoUnix {
		if ul, err := transport.ListenLocal(localKind, l); err == nil {
			t.lis = append(t.lis, t.cfg.Security.Wrap(ul))
		}
	}
	t.addr = l.Addr().String()
	for _, l := range t.lis {
		t.wg.Add(1)
		go t.accept(l)
	}
	return nil
}

func (t *Transport) accept(l net.Listener) {
	defer t.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a refused handshake: the listener counted it
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			if err := t.admit(c); err != nil {
				c.Close()
			}
		}()
	}
}

// admit reads a new connection's hello and hands it to its slot.
func (t *Transport) admit(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	var b [helloFixed + maxEpoch]byte
	if _, err := io.ReadFull(c, b[:helloFixed]); err != nil {
		return err
	}
	h, n, err := decodeHelloFixed(b[:helloFixed])
	if err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b[helloFixed:helloFixed+n]); err != nil {
		return err
	}
	h.epoch = string(b[helloFixed : helloFixed+n])
	c.SetReadDeadline(time.Time{})
	t.mu.Lock()
	s := t.slots[slotKey(h.epoch, h.to)]
	t.mu.Unlock()
	if s == nil {
		return fmt.Errorf("collective transport: hello for an unknown group epoch %q", h.epoch)
	}
	if h.to != s.m.Rank || h.from <= s.m.Rank || h.from >= s.m.Size {
		return fmt.Errorf("collective transport: group %q: hello from rank %d to %d at rank %d", s.m.Group, h.from, h.to, s.m.Rank)
	}
	seg, err := acceptShm(c)
	if err != nil {
		return err
	}
	select {
	case s.arrived <- arrival{from: h.from, conn: c, seg: seg}:
		return nil
	default:
		seg.release()
		return fmt.Errorf("collective transport: group %q: too many connections", s.m.Group)
	}
}

// slotKey names a member being formed: two members of a group may live in
// one process.
func slotKey(epoch string, rank int) string { return fmt.Sprintf("%s/%d", epoch, rank) }

// Prepare implements collective.Transport: it readies a slot for m and
// returns the listener's address.
func (t *Transport) Prepare(ctx context.Context, m collective.Member) (string, error) {
	if len(m.Epoch) == 0 || len(m.Epoch) > maxEpoch {
		return "", fmt.Errorf("collective transport: epoch of %d bytes", len(m.Epoch))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.listenLocked(); err != nil {
		return "", err
	}
	if old := t.slots[slotKey(m.Epoch, m.Rank)]; old != nil {
		drain(old)
	}
	t.slots[slotKey(m.Epoch, m.Rank)] = &slot{m: m, arrived: make(chan arrival, m.Size)}
	return t.addr, nil
}

// Abandon implements collective.Transport.
func (t *Transport) Abandon(m collective.Member) {
	t.mu.Lock()
	s := t.slots[slotKey(m.Epoch, m.Rank)]
	delete(t.slots, slotKey(m.Epoch, m.Rank))
	t.mu.Unlock()
	if s != nil {
		drain(s)
	}
}

// drain closes the connections that arrived at a slot no one will take.
func drain(s *slot) {
	for {
		select {
		case a := <-s.arrived:
			a.conn.Close()
			a.seg.release()
		default:
			return
		}
	}
}

// Connect implements collective.Transport: m dials the members of lower
// rank and waits for the others to dial it.
func (t *Transport) Connect(ctx context.Context, m collective.Member, endpoints []string) (collective.Links, error) {
	if len(endpoints) != m.Size {
		return nil, fmt.Errorf("collective transport: group %q: %d endpoints for %d members", m.Group, len(endpoints), m.Size)
	}
	// The slot stays while the others dial in; Connect's end removes it.
	t.mu.Lock()
	s := t.slots[slotKey(m.Epoch, m.Rank)]
	t.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w: group %q epoch %s was not prepared here", collective.ErrNoGroup, m.Group, m.Epoch)
	}
	defer func() {
		t.mu.Lock()
		if t.slots[slotKey(m.Epoch, m.Rank)] == s {
			delete(t.slots, slotKey(m.Epoch, m.Rank))
		}
		t.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, t.cfg.ConnectTimeout)
	defer cancel()
	conns := make([]net.Conn, m.Size)
	segs := make([]*shmSegment, m.Size)
	fail := func(err error) (collective.Links, error) {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		for _, seg := range segs {
			seg.release()
		}
		drain(s)
		return nil, err
	}
	errs := make([]error, m.Rank)
	var wg sync.WaitGroup
	for j := range m.Rank {
		wg.Go(func() {
			c, err := t.dial(ctx, endpoints[j])
			if err == nil {
				c.SetWriteDeadline(time.Now().Add(helloTimeout))
				_, err = c.Write(appendHello(nil, hello{epoch: m.Epoch, from: m.Rank, to: j}))
				c.SetWriteDeadline(time.Time{})
				if err == nil {
					segs[j], err = offerShm(c)
				}
				if err != nil {
					c.Close()
				}
			}
			if err != nil {
				errs[j] = &collective.MemberError{Group: m.Group, Rank: j, Actor: actorOf(m, j), Err: fmt.Errorf("%w: connecting to %s: %v", collective.ErrMemberLost, endpoints[j], err)}
				return
			}
			conns[j] = c
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	for missing := m.Size - 1 - m.Rank; missing > 0; {
		select {
		case a := <-s.arrived:
			if conns[a.from] != nil {
				a.conn.Close()
				a.seg.release()
				continue
			}
			conns[a.from], segs[a.from] = a.conn, a.seg
			missing--
		case <-ctx.Done():
			for j := m.Rank + 1; j < m.Size; j++ {
				if conns[j] == nil {
					return fail(&collective.MemberError{Group: m.Group, Rank: j, Actor: actorOf(m, j), Err: fmt.Errorf("%w: it did not connect: %v", collective.ErrMemberLost, ctx.Err())})
				}
			}
		}
	}
	return withShm(newLinks(t.cfg, m, conns), segs), nil
}

// dial connects to a member's endpoint: through its Unix socket when it is
// on this host, else over TCP.
func (t *Transport) dial(ctx context.Context, ep string) (net.Conn, error) {
	if !t.cfg.NoUnix && runtime.GOOS == "linux" {
		if c, err := t.cfg.Security.DialLocal(ctx, localKind, ep); err == nil {
			return c, nil
		}
	}
	return t.cfg.Security.Dial(ctx, nil, "tcp", ep)
}

func actorOf(m collective.Member, rank int) string {
	if rank >= 0 && rank < len(m.Actors) {
		return m.Actors[rank]
	}
	return ""
}
