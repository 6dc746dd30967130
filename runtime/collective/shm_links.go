package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"troupe/actors/collective"
)

// shmSegment is a mapped segment (shm.go) and which side of it this
// process is.
type shmSegment struct {
	mem       []byte
	ringBytes int
	dialler   bool // ring 0 is this side's to produce
}

// rings returns this side's rings: the one it produces and the one it
// consumes.
func (s *shmSegment) rings() (out, in *shmRing) {
	r0, r1 := segmentRing(s.mem, s.ringBytes, 0), segmentRing(s.mem, s.ringBytes, 1)
	if s.dialler {
		return r0, r1
	}
	return r1, r0
}

// shmWaitSlice bounds one sleep on a futex: the wakes are explicit (the
// peer's, a failure's, a cancellation's, Close's), so it only caps what a
// lost wake could cost.
const shmWaitSlice = 100 * time.Millisecond

// shmPeer is the shared-memory side of a connection to one member.
type shmPeer struct {
	rank    int
	out, in *shmRing
	head    uint64 // what this side published of out (the producer's own copy)
	tail    uint64 // what this side consumed of in
	scratch []byte // a message of several fragments, gathered for RecvWith
}

// shmLinks are links whose peers on this host exchange data through shared
// memory; the socket links (l) carry the rest: heartbeats, failure
// reports and the end of a peer, and the data of peers without a segment.
type shmLinks struct {
	l     *links
	peers []*shmPeer // by rank; nil for socket peers
	segs  []*shmSegment

	// mu is held shared by every call that touches the segments and
	// exclusively by Close to unmap them.
	mu        sync.RWMutex
	closing   atomic.Bool
	closingCh chan struct{}
	closeOnce sync.Once
	watch     sync.WaitGroup
}

var (
	_ collective.Links      = (*shmLinks)(nil)
	_ collective.RecvWither = (*shmLinks)(nil)
)

// withShm returns l, with the peers that have a segment (segs[rank] not
// nil) moved onto it.
func withShm(l *links, segs []*shmSegment) collective.Links {
	s := &shmLinks{l: l, peers: make([]*shmPeer, len(segs)), closingCh: make(chan struct{})}
	for j, seg := range segs {
		if seg == nil {
			continue
		}
		out, in := seg.rings()
		s.peers[j] = &shmPeer{rank: j, out: out, in: in}
		s.segs = append(s.segs, seg)
	}
	if len(s.segs) == 0 {
		return l
	}
	s.watch.Add(1)
	go s.watchLost()
	return s
}

// watchLost wakes this member's waits on the rings when the group fails
// (a peer died, went silent or reported a failure): they then see it.
func (s *shmLinks) watchLost() {
	defer s.watch.Done()
	select {
	case <-s.l.lostCh:
	case <-s.l.stop:
	case <-s.closingCh:
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.closing.Load() {
		for _, p := range s.peers {
			if p != nil {
				ring(p.out.prodBell)
				ring(p.in.consBell)
			}
		}
	}
}

// ring bumps a bell and wakes its sleepers.
func ring(bell *atomic.Uint32) {
	bell.Add(1)
	futexWake(bell)
}

func (s *shmLinks) closedErr() error {
	return fmt.Errorf("collective group %q: %w", s.l.m.Group, collective.ErrClosed)
}

func (s *shmLinks) leftErr(rank int) error {
	return s.l.memberErr(rank, fmt.Errorf("%w: it left the group", collective.ErrMemberLost))
}

// corrupt fails the group over bad shared bytes from rank.
func (s *shmLinks) corrupt(rank int, err error) error {
	me := s.l.memberErr(rank, fmt.Errorf("%w: its shared memory: %w", collective.ErrMemberLost, err))
	s.l.lose(me)
	return me
}

// stopped reports why a wait on a ring must end, or nil.
func (s *shmLinks) stopped(ctx context.Context) error {
	if err := s.l.err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closing.Load() {
		return s.closedErr()
	}
	select {
	case <-s.l.stop:
		return s.closedErr()
	default:
	}
	return nil
}

// wait waits until ready says so, sleeping on bell (with waiting raised so
// that the other side rings it) while it does not. stop says why to give
// up; it is asked after ready, and ready once more after it, so that what
// was published before the cause is still taken.
func (s *shmLinks) wait(ctx context.Context, bell, waiting *atomic.Uint32, ready func() (bool, error), stop func() error) error {
	var unhook func() bool
	defer func() {
		if unhook != nil {
			unhook()
		}
	}()
	for {
		ok, err := ready()
		if ok || err != nil {
			return err
		}
		if why := stop(); why != nil {
			if ok, err := ready(); ok || err != nil {
				return err
			}
			return why
		}
		waiting.Store(1)
		b := bell.Load()
		if ok, err := ready(); ok || err != nil {
			waiting.Store(0)
			return err
		}
		if unhook == nil {
			unhook = context.AfterFunc(ctx, func() { ring(bell) })
		}
		if stop() == nil {
			futexWait(bell, b, shmWaitSlice)
		}
		waiting.Store(0)
	}
}

// send writes one message to p's ring, in fragments of at most a quarter
// of the ring, each once there is room.
func (s *shmLinks) send(ctx context.Context, p *shmPeer, h collective.Header, data []byte) error {
	r := p.out
	stop := func() error {
		if err := s.stopped(ctx); err != nil {
			return err
		}
		if r.gone.Load() != 0 {
			return s.leftErr(p.rank)
		}
		return nil
	}
	if err := stop(); err != nil {
		return err
	}
	total, off := len(data), 0
	for first := true; first || off < total; first = false {
		n := min(total-off, r.maxFrag())
		need := recHeaderSize + align64(n)
		pos := int(p.head % uint64(r.size))
		pad := 0
		if r.size-pos < need {
			pad = r.size - pos
		}
		err := s.wait(ctx, r.prodBell, r.prodWait, func() (bool, error) {
			raceLock()
			tail := r.tail.Load()
			raceUnlock()
			used := p.head - tail
			if used > uint64(r.size) || tail%64 != 0 {
				return false, fmt.Errorf("%w: shared ring tail %d against head %d (ring of %d bytes)", ErrFrame, tail, p.head, r.size)
			}
			return uint64(r.size)-used >= uint64(pad+need), nil
		}, stop)
		if err != nil {
			if errors.Is(err, ErrFrame) {
				return s.corrupt(p.rank, err)
			}
			return err
		}
		if pad > 0 {
			encodeRecord(r.data[pos:], record{pad: true})
			pos = 0
		}
		copy(r.data[pos+recHeaderSize:], data[off:off+n])
		encodeRecord(r.data[pos:], record{h: h, total: uint64(total), off: uint64(off), n: uint32(n)})
		p.head += uint64(pad + need)
		raceLock()
		r.head.Store(p.head)
		raceUnlock()
		if r.consWait.Load() != 0 {
			ring(r.consBell)
		}
		off += n
	}
	return nil
}

// recv takes the next message from p's ring: into buf when into is set,
// else handing its payload to fn (in place when it came in one fragment).
func (s *shmLinks) recv(ctx context.Context, p *shmPeer, h collective.Header, n int, into bool, buf []byte, fn func([]byte)) error {
	r := p.in
	var avail uint64
	ready := func() (bool, error) {
		raceLock()
		head := r.head.Load()
		raceUnlock()
		avail = head - p.tail
		if avail > uint64(r.size) || head%64 != 0 {
			return false, fmt.Errorf("%w: shared ring head %d against tail %d (ring of %d bytes)", ErrFrame, head, p.tail, r.size)
		}
		return avail >= recHeaderSize, nil
	}
	stop := func() error {
		if err := s.stopped(ctx); err != nil {
			return err
		}
		if r.closed.Load() != 0 {
			return s.leftErr(p.rank)
		}
		return nil
	}
	var got uint64
	var gather []byte
	for {
		if err := s.wait(ctx, r.consBell, r.consWait, ready, stop); err != nil {
			if errors.Is(err, ErrFrame) {
				return s.corrupt(p.rank, err)
			}
			return err
		}
		pos := int(p.tail % uint64(r.size))
		var hb [recHeaderSize]byte
		copy(hb[:], r.data[pos:])
		rec, err := decodeRecord(hb[:], pos, r.size, s.l.cfg.MaxPayload)
		if err != nil {
			return s.corrupt(p.rank, err)
		}
		step := uint64(r.size - pos)
		if !rec.pad {
			step = uint64(recHeaderSize + align64(int(rec.n)))
		}
		if step > avail {
			return s.corrupt(p.rank, fmt.Errorf("%w: record at %d of %d bytes, %d published", ErrFrame, pos, step, avail))
		}
		if !rec.pad {
			if rec.h != h || rec.total != uint64(n) {
				return s.l.memberErr(p.rank, fmt.Errorf("%w: got %s, want %s", collective.ErrMismatch, describe(rec.h, int(rec.total)), describe(h, n)))
			}
			if rec.off != got {
				return s.corrupt(p.rank, fmt.Errorf("%w: fragment at offset %d of a message, want %d", ErrFrame, rec.off, got))
			}
			payload := r.data[pos+recHeaderSize : pos+recHeaderSize+int(rec.n)]
			switch {
			case into:
				copy(buf[got:], payload)
			case rec.off == 0 && uint64(rec.n) == rec.total:
				fn(payload)
			default:
				if gather == nil {
					if cap(p.scratch) < n {
						p.scratch = make([]byte, n)
					}
					gather = p.scratch[:n]
				}
				copy(gather[got:], payload)
			}
			got += uint64(rec.n)
		}
		p.tail += step
		raceLock()
		r.tail.Store(p.tail)
		raceUnlock()
		if r.prodWait.Load() != 0 {
			ring(r.prodBell)
		}
		if !rec.pad && got == uint64(n) {
			if gather != nil {
				fn(gather)
			}
			return nil
		}
	}
}

// enter begins a call that may touch the segments; leave ends it.
func (s *shmLinks) enter() error {
	s.mu.RLock()
	if s.closing.Load() {
		s.mu.RUnlock()
		return s.closedErr()
	}
	return nil
}

func (s *shmLinks) leave() { s.mu.RUnlock() }

// Send implements collective.Links.
func (s *shmLinks) Send(ctx context.Context, to int, h collective.Header, data []byte) error {
	p := s.peers[to]
	if p == nil {
		return s.l.Send(ctx, to, h, data)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.send(ctx, p, h, data)
}

// Recv implements collective.Links.
func (s *shmLinks) Recv(ctx context.Context, from int, h collective.Header, buf []byte) error {
	p := s.peers[from]
	if p == nil {
		return s.l.Recv(ctx, from, h, buf)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.recv(ctx, p, h, len(buf), true, buf, nil)
}

// RecvWith implements collective.RecvWither: fn reads the payload in the
// shared ring itself when it came in one fragment.
func (s *shmLinks) RecvWith(ctx context.Context, from int, h collective.Header, n int, fn func([]byte)) error {
	p := s.peers[from]
	if p == nil {
		return s.l.RecvWith(ctx, from, h, n, fn)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	return s.recv(ctx, p, h, n, false, nil, fn)
}

// Fail implements collective.Links.
func (s *shmLinks) Fail(err error) { s.l.Fail(err) }

// Close implements collective.Links: it tells each shared-memory peer that
// nothing more comes from this member nor is taken by it (what was
// published stays readable), ends the calls waiting on the rings, closes
// the socket links, and unmaps the segments once no call touches them.
// The kernel frees a segment when its other side unmaps it too, or dies.
func (s *shmLinks) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Store(true) // before the bells: a wait that wakes sees it
		s.mu.RLock()
		for _, p := range s.peers {
			if p != nil {
				p.out.closed.Store(1)
				p.in.gone.Store(1)
				ring(p.out.consBell)
				ring(p.in.prodBell)
			}
		}
		s.mu.RUnlock()
		close(s.closingCh)
		s.watch.Wait()
	})
	err := s.l.Close()
	s.mu.Lock()
	for _, seg := range s.segs {
		seg.release()
	}
	s.mu.Unlock()
	return err
}

// Lost implements collective.LossNotifier: the socket links beneath watch
// every peer, those over shared memory included.
func (s *shmLinks) Lost() <-chan struct{} { return s.l.Lost() }

// Err implements collective.LossNotifier.
func (s *shmLinks) Err() error { return s.l.Err() }
