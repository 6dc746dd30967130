package collective

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"troupe/actors/collective"
	"troupe/runtime/transport"
)

// links are one member's connections to the others (collective.Links).
type links struct {
	cfg   Config
	m     collective.Member
	peers []*peer // by rank; nil at m.Rank

	mu     sync.Mutex // guards lost
	lost   error      // the first failure, a *collective.MemberError
	lostCh chan struct{}

	stop      chan struct{} // closed by Close
	drainBy   time.Time     // set by Close before stop: when the readers stop draining
	closeOnce sync.Once
	wg        sync.WaitGroup // readers, heartbeats and the failure report
	told      sync.WaitGroup // the failure report
}

// peer is the connection to one other member.
type peer struct {
	rank int
	conn net.Conn
	// bulk, on a TLS connection, carries data frames' payloads in sealed
	// bulk frames beside the TLS records that carry the headers: AES-GCM
	// under keys exported from the TLS session, without crypto/tls's two
	// copies of every byte and with internal/aesgcm's VAES kernels. Nil on
	// other connections. Its reads belong to the reader, its writes to the
	// holder of wmu.
	bulk *transport.Bulk
	q    chan message // data frames read ahead
	free chan []byte  // payload buffers Recv is done with
	last atomic.Int64 // when a write last ended, in UnixNano
	// post holds a Recv's own buffer, offered to the reader so that the
	// next frame's payload is read straight into it rather than copied
	// from a queued one. taken counts the frames the receiver has had
	// (queued or read in place); the reader, which counts the frames it
	// has delivered, uses a post only when the two agree (nothing is
	// queued) and the header is the one the post expects.
	post  chan *posted
	taken atomic.Uint64
	// held is a frame the receiver took off q while the reader was
	// filling its post with the frame before: the next receive's. Only
	// the receiver (one call at a time per peer) touches it.
	held *message

	// gone is closed when the peer closed its links cleanly (its bye
	// frame came): it sent everything it will send. Frames queued before
	// are still good; only calls that need more from it fail.
	gone      chan struct{}
	leaveOnce sync.Once

	wmu   sync.Mutex // serialises writes; guards the following
	dirty bool       // a write was cut short, or the stream was ended: write nothing more
}

// posted is a Recv waiting for the next frame of a peer in its buffer.
type posted struct {
	h     collective.Header
	buf   []byte
	index uint64     // the frame it wants: peer.taken when posted
	done  chan error // the reader's answer: nil (filled), errPassed, or the read's failure
}

// errPassed: the reader did not use a post; the frame went to the queue.
var errPassed = errors.New("collective: post passed over")

type message struct {
	h    collective.Header
	data []byte
}

func newLinks(cfg Config, m collective.Member, conns []net.Conn) *links {
	l := &links{cfg: cfg, m: m, peers: make([]*peer, m.Size), lostCh: make(chan struct{}), stop: make(chan struct{})}
	for j, c := range conns {
		if j == m.Rank {
			continue
		}
		setSockBuf(c, cfg.SocketBuffer)
		p := &peer{rank: j, conn: c, q: make(chan message, cfg.QueueFrames), free: make(chan []byte, cfg.QueueFrames+2), post: make(chan *posted, 1), gone: make(chan struct{})}
		p.last.Store(time.Now().UnixNano())
		l.peers[j] = p
	}
	var bulkErr *collective.MemberError
	for _, p := range l.peers {
		if p == nil {
			continue
		}
		// The handshake is done (the hello and the token went through
		// it), so the TLS session's keys can be exported. Both ends make a
		// Bulk, or neither: a TLS connection of package transport has one.
		b, err := transport.NewBulk(p.conn)
		if err != nil && bulkErr == nil {
			bulkErr = l.memberErr(p.rank, fmt.Errorf("%w: its connection's sealed frames: %v", collective.ErrMemberLost, err))
		}
		p.bulk = b
		l.wg.Add(2)
		go l.read(p)
		go l.heartbeat(p)
	}
	if bulkErr != nil {
		l.lose(bulkErr)
	}
	return l
}

// readPayload reads the payload of frame f from p into buf (len f.n): a
// data frame's from its sealed bulk frames where p has them, else from
// the connection.
func (p *peer) readPayload(f frame, buf []byte) error {
	if p.bulk != nil && f.typ == frameData {
		return p.bulk.ReadFull(buf)
	}
	_, err := io.ReadFull(p.conn, buf)
	return err
}

// setSockBuf asks the kernel for socket buffers of n bytes each way on c
// (or the connection it wraps), so that a chunk's write and read take few
// round trips through the scheduler. The kernel caps n at
// net.core.[wr]mem_max; a conn that is not a socket keeps its own.
func setSockBuf(c net.Conn, n int) {
	for range 4 {
		if s, ok := c.(interface {
			SetReadBuffer(int) error
			SetWriteBuffer(int) error
		}); ok {
			s.SetReadBuffer(n)
			s.SetWriteBuffer(n)
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}

// memberErr is a failure of member rank.
func (l *links) memberErr(rank int, err error) *collective.MemberError {
	return &collective.MemberError{Group: l.m.Group, Rank: rank, Actor: actorOf(l.m, rank), Err: err}
}

// read reads p's frames until the connection ends. Once the group has
// failed, or this member closed its links, or the peer said bye, it goes on
// reading, and drops what it reads, until the peer's end closes too:
// closing a socket with unread input resets the connection, and the peer
// could lose what was sent before (a failure report, the last frames).
func (l *links) read(p *peer) {
	defer l.wg.Done()
	defer p.conn.Close()
	var hb [headerSize]byte
	var drop []byte
	var delivered uint64 // data frames queued or read in place
	for {
		if l.stopped() {
			l.drain(p, l.drainBy)
			return
		}
		p.conn.SetReadDeadline(time.Now().Add(l.cfg.Timeout))
		if _, err := io.ReadFull(p.conn, hb[:]); err != nil {
			l.readFailed(p, err)
			return
		}
		f, err := decodeFrame(hb[:], l.cfg.MaxPayload)
		if err != nil {
			if !l.stopped() {
				l.lose(l.memberErr(p.rank, fmt.Errorf("%w: %v", collective.ErrMemberLost, err)))
			}
			return
		}
		if f.typ == frameHeartbeat {
			continue
		}
		if f.typ == frameBye {
			l.leave(p)
			l.drain(p, time.Now().Add(l.cfg.Timeout))
			return
		}
		// Once the group has failed nothing more is queued: a receiver may
		// still take what was queued before, in order, and nothing after.
		var buf []byte
		select {
		case <-l.lostCh:
			p.conn.SetReadDeadline(time.Now().Add(l.cfg.Timeout))
			if err := l.skipPayload(p, f, &drop); err != nil {
				return
			}
			continue
		default:
		}
		if f.typ == frameData {
			select {
			case ps := <-p.post:
				if ps.index != delivered || ps.h != f.h || len(ps.buf) != int(f.n) {
					ps.done <- errPassed
					break
				}
				p.conn.SetReadDeadline(time.Now().Add(l.cfg.Timeout))
				if err := p.readPayload(f, ps.buf); err != nil {
					ps.done <- l.readFailed(p, err)
					return
				}
				delivered++
				ps.done <- nil
				continue
			default:
			}
		}
		select {
		case b := <-p.free:
			if cap(b) >= int(f.n) {
				buf = b[:f.n]
			}
		default:
		}
		if buf == nil {
			buf = make([]byte, f.n)
		}
		p.conn.SetReadDeadline(time.Now().Add(l.cfg.Timeout))
		if err := p.readPayload(f, buf); err != nil {
			l.readFailed(p, err)
			return
		}
		if f.typ == frameFail {
			kind := collective.ErrMemberLost
			if f.code == failMismatch {
				kind = collective.ErrMismatch
			}
			rank := int(f.rank)
			if rank < 0 || rank >= l.m.Size {
				rank = p.rank
			}
			l.lose(l.memberErr(rank, fmt.Errorf("%w: %s (reported by rank %d)", kind, buf, p.rank)))
			continue
		}
		delivered++
		select {
		case p.q <- message{h: f.h, data: buf}:
		case <-l.stop:
		case <-l.lostCh:
		}
	}
}

// readFailed handles a read of p's connection that failed with err: the
// peer is lost, unless this member closed its links (then nothing more is
// wanted from it). It returns the error a receiver waiting on the read
// gets.
func (l *links) readFailed(p *peer, err error) error {
	if l.stopped() {
		return l.closedErr()
	}
	me := l.memberErr(p.rank, l.connErr(err))
	l.lose(me)
	return me
}

// skipPayload reads and drops the payload of frame f from p. A sealed
// payload is opened (into *drop, grown to fit) to keep the frames' count
// in step; a plain one is copied through drop a MiB at a time.
func (l *links) skipPayload(p *peer, f frame, drop *[]byte) error {
	if p.bulk != nil && f.typ == frameData {
		if cap(*drop) < int(f.n) {
			*drop = make([]byte, f.n)
		}
		return p.bulk.ReadFull((*drop)[:f.n])
	}
	if cap(*drop) == 0 {
		*drop = make([]byte, max(1, min(int(f.n), 1<<20)))
	}
	_, err := io.CopyBuffer(io.Discard, io.LimitReader(p.conn, int64(f.n)), (*drop)[:cap(*drop)])
	return err
}

// drain reads and drops p's input until the peer ends its side of the
// connection or until deadline, so that closing it resets nothing. With
// sealed payloads it reads frame by frame, as they interleave with the
// TLS records.
func (l *links) drain(p *peer, deadline time.Time) {
	p.conn.SetReadDeadline(deadline)
	if p.bulk == nil {
		var b [4096]byte
		io.CopyBuffer(io.Discard, p.conn, b[:])
		return
	}
	var hb [headerSize]byte
	var drop []byte
	for {
		if _, err := io.ReadFull(p.conn, hb[:]); err != nil {
			return
		}
		f, err := decodeFrame(hb[:], l.cfg.MaxPayload)
		if err != nil || l.skipPayload(p, f, &drop) != nil {
			return
		}
	}
}

// leave records that p closed its links cleanly and ends this member's
// side of the connection: nothing more is to be sent to it.
func (l *links) leave(p *peer) {
	p.leaveOnce.Do(func() { close(p.gone) })
	// A write in progress to p is a call p left before it ended: it fails.
	p.conn.SetWriteDeadline(time.Now().Add(l.cfg.Heartbeat))
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if !p.dirty {
		p.dirty = true
		closeWrite(p.conn)
	}
}

// closeWrite ends c for writing (the peer reads EOF), or closes it where it
// cannot be half-closed.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

func (l *links) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *links) isGone(p *peer) bool {
	select {
	case <-p.gone:
		return true
	default:
		return false
	}
}

// leftErr fails the group for a call that needs more from p, which left,
// and returns the group's failure. The failure is recorded before the call
// ends, so that its other writes in progress end within a grace (cutoff)
// rather than at once, and the report follows on whole streams.
func (l *links) leftErr(p *peer) error {
	l.lose(l.memberErr(p.rank, fmt.Errorf("%w: it left the group", collective.ErrMemberLost)))
	return l.err()
}

func (l *links) closedErr() error {
	return fmt.Errorf("collective group %q: %w", l.m.Group, collective.ErrClosed)
}

// connErr describes a connection's failure.
func (l *links) connErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: silent for %v", collective.ErrMemberLost, l.cfg.Timeout)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: its connection closed", collective.ErrMemberLost)
	}
	return fmt.Errorf("%w: %w", collective.ErrMemberLost, err) // a sealed frame that did not open matches transport.ErrBulkFrame
}

// heartbeat writes a heartbeat on p's connection whenever nothing else
// was written for a heartbeat period. It never waits for the write lock: a
// write in progress tells the peer as much.
func (l *links) heartbeat(p *peer) {
	defer l.wg.Done()
	tick := time.NewTicker(l.cfg.Heartbeat)
	defer tick.Stop()
	hb := appendFrame(nil, frame{typ: frameHeartbeat})
	for {
		select {
		case <-l.stop:
			return
		case <-l.lostCh:
			return
		case <-p.gone:
			return
		case <-tick.C:
		}
		if time.Since(time.Unix(0, p.last.Load())) < l.cfg.Heartbeat/2 || !p.wmu.TryLock() {
			continue
		}
		if !p.dirty {
			if _, err := p.conn.Write(hb); err != nil {
				p.dirty = true
			}
			p.last.Store(time.Now().UnixNano())
		}
		p.wmu.Unlock()
	}
}

// Lost implements collective.LossNotifier: closed when the group fails,
// which the readers notice between calls too (a peer's end or silence).
func (l *links) Lost() <-chan struct{} { return l.lostCh }

// Err implements collective.LossNotifier.
func (l *links) Err() error { return l.err() }

func (l *links) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// lose records the group's failure (the first one wins), wakes every
// pending call and tells the other members.
func (l *links) lose(me *collective.MemberError) {
	l.mu.Lock()
	if l.lost != nil {
		l.mu.Unlock()
		return
	}
	l.lost = me
	close(l.lostCh)
	// Counted under mu, so that whoever sees lost set (Close) waits for
	// the report.
	l.wg.Add(1)
	l.told.Add(1)
	l.mu.Unlock()
	// Cut the writes in progress to the member at fault short; let the
	// others end (the peers drain their input now) within a grace, so that
	// the streams stay whole for the report.
	for _, p := range l.peers {
		if p != nil {
			p.conn.SetWriteDeadline(l.cutoff(p.rank))
		}
	}
	go func() {
		defer l.wg.Done()
		defer l.told.Done()
		l.tell(me)
	}()
}

// tell sends a failure report to every member but the one at fault, then
// shuts the connections for writing: the group is over. The readers close
// them once the peers have done the same.
func (l *links) tell(me *collective.MemberError) {
	code := byte(failLost)
	if errors.Is(me.Err, collective.ErrMismatch) {
		code = failMismatch
	}
	// The receiver wraps the text in the sentinel again.
	text := strings.TrimPrefix(strings.TrimPrefix(me.Err.Error(), collective.ErrMismatch.Error()+": "), collective.ErrMemberLost.Error()+": ")
	if len(text) > maxFailText {
		text = text[:maxFailText]
	}
	msg := appendFrame(nil, frame{typ: frameFail, code: code, rank: int32(me.Rank), n: uint32(len(text))})
	msg = append(msg, text...)
	var wg sync.WaitGroup
	for _, p := range l.peers {
		if p == nil || p.rank == me.Rank {
			continue
		}
		wg.Go(func() {
			p.wmu.Lock()
			defer p.wmu.Unlock()
			if !p.dirty {
				p.conn.SetWriteDeadline(time.Now().Add(l.cfg.Heartbeat))
				p.conn.Write(msg)
				p.dirty = true
			}
		})
	}
	wg.Wait()
	for _, p := range l.peers {
		if p == nil {
			continue
		}
		p.wmu.Lock()
		p.dirty = true
		p.conn.SetWriteDeadline(time.Now().Add(l.cfg.Heartbeat))
		closeWrite(p.conn)
		p.wmu.Unlock()
	}
}

// cutoff is the write deadline that ends a write to peer when the call is
// over: at once, unless the group failed through another member, when the
// write may end within a heartbeat so that the failure report can follow
// it on a whole stream.
func (l *links) cutoff(peer int) time.Time {
	var me *collective.MemberError
	if err := l.err(); err != nil && errors.As(err, &me) && me.Rank != peer {
		return time.Now().Add(l.cfg.Heartbeat)
	}
	return time.Unix(1, 0)
}

// Send implements collective.Links.
func (l *links) Send(ctx context.Context, to int, h collective.Header, data []byte) error {
	if err := l.err(); err != nil {
		return err
	}
	if l.stopped() {
		return l.closedErr()
	}
	p := l.peers[to]
	if l.isGone(p) {
		return l.leftErr(p)
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := l.err(); err != nil {
		return err
	}
	if l.stopped() {
		return l.closedErr()
	}
	if l.isGone(p) {
		return l.leftErr(p)
	}
	if p.dirty {
		return l.memberErr(to, fmt.Errorf("%w: its connection broke", collective.ErrMemberLost))
	}
	stop := context.AfterFunc(ctx, func() { p.conn.SetWriteDeadline(l.cutoff(to)) })
	hdr := appendFrame(nil, frame{typ: frameData, h: h, n: uint32(len(data))})
	var err error
	if p.bulk != nil {
		if _, err = p.conn.Write(hdr); err == nil {
			err = p.bulk.Write(data)
		}
	} else {
		bufs := net.Buffers{hdr, data}
		_, err = bufs.WriteTo(p.conn)
	}
	p.last.Store(time.Now().UnixNano())
	if !stop() && err == nil {
		// The deadline may have been cut after the write ended; restore it.
		p.conn.SetWriteDeadline(time.Time{})
	}
	if err == nil {
		return nil
	}
	p.dirty = true
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if l.stopped() {
		return l.closedErr()
	}
	if l.isGone(p) {
		return l.leftErr(p)
	}
	// The peer may have closed after reporting another member's failure:
	// give the reader a moment to read the report before blaming the peer.
	select {
	case <-l.lostCh:
		return l.err()
	case <-p.gone:
		return l.leftErr(p)
	case <-time.After(l.cfg.Heartbeat):
	case <-ctx.Done():
		return ctx.Err()
	}
	me := l.memberErr(to, l.connErr(err))
	go l.lose(me)
	return me
}

// Recv implements collective.Links. When nothing is queued it offers buf
// to the reader, which reads the next frame's payload straight into it:
// one copy of the data fewer (the allgather's and broadcast's path).
func (l *links) Recv(ctx context.Context, from int, h collective.Header, buf []byte) error {
	p := l.peers[from]
	if len(buf) == 0 || len(p.q) > 0 || p.held != nil {
		return l.RecvWith(ctx, from, h, len(buf), func(data []byte) { copy(buf, data) })
	}
	if err := l.err(); err != nil {
		return l.RecvWith(ctx, from, h, len(buf), func(data []byte) { copy(buf, data) })
	}
	ps := &posted{h: h, buf: buf, index: p.taken.Load(), done: make(chan error, 1)}
	p.post <- ps // empty: one receiver per peer at a time, and every post is answered before Recv returns
	// withdraw takes the post back, or waits for the reader's answer if
	// it has it: buf must not be written once Recv returns.
	withdraw := func() error {
		select {
		case <-p.post:
			return errPassed
		default:
			return <-ps.done
		}
	}
	select {
	case err := <-ps.done:
		if err == nil {
			p.taken.Add(1)
			return nil
		}
		if err != errPassed {
			return err
		}
	case m := <-p.q:
		p.taken.Add(1)
		if err := withdraw(); err == nil {
			// The reader filled the post, then queued the next frame.
			p.held = &m
			p.taken.Add(1)
			return nil
		}
		return l.take(p, m, h, len(buf), func(data []byte) { copy(buf, data) })
	case <-l.lostCh:
		if err := withdraw(); err == nil {
			p.taken.Add(1)
			return nil
		}
	case <-p.gone:
		if err := withdraw(); err == nil {
			p.taken.Add(1)
			return nil
		}
	case <-l.stop:
		if err := withdraw(); err == nil {
			p.taken.Add(1)
			return nil
		}
		return l.closedErr()
	case <-ctx.Done():
		if err := withdraw(); err == nil {
			p.taken.Add(1)
			return nil
		}
		return ctx.Err()
	}
	return l.RecvWith(ctx, from, h, len(buf), func(data []byte) { copy(buf, data) })
}

// RecvWith implements collective.RecvWither: fn gets the payload in the
// reader's buffer, which goes back to the reader afterwards.
func (l *links) RecvWith(ctx context.Context, from int, h collective.Header, n int, fn func(data []byte)) error {
	p := l.peers[from]
	if m := p.held; m != nil {
		p.held = nil
		return l.take(p, *m, h, n, fn)
	}
	select {
	case m := <-p.q:
		p.taken.Add(1)
		return l.take(p, m, h, n, fn)
	case <-l.lostCh:
		// What the peer sent before the failure is still good.
		select {
		case m := <-p.q:
			p.taken.Add(1)
			return l.take(p, m, h, n, fn)
		default:
			return l.err()
		}
	case <-p.gone:
		// So is what it sent before it left; nothing more comes.
		select {
		case m := <-p.q:
			p.taken.Add(1)
			return l.take(p, m, h, n, fn)
		default:
			return l.leftErr(p)
		}
	case <-l.stop:
		return l.closedErr()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take checks a received message against what the receiver expects and
// hands it to fn.
func (l *links) take(p *peer, m message, h collective.Header, n int, fn func([]byte)) error {
	defer func() {
		select {
		case p.free <- m.data:
		default:
		}
	}()
	if m.h != h || len(m.data) != n {
		return l.memberErr(p.rank, fmt.Errorf("%w: got %s, want %s", collective.ErrMismatch, describe(m.h, len(m.data)), describe(h, n)))
	}
	fn(m.data)
	return nil
}

// Fail implements collective.Links.
func (l *links) Fail(err error) {
	var me *collective.MemberError
	if !errors.As(err, &me) {
		me = l.memberErr(l.m.Rank, fmt.Errorf("%w: %v", collective.ErrMemberLost, err))
	}
	l.lose(me)
}

// Close implements collective.Links. A clean close means "sent
// everything": each peer gets a bye frame after this member's last frame,
// takes what came before it, and fails only the calls that need more from
// this member. Close waits (within the group's timeout) for the peers to
// end their side, so that no unread input resets a connection and drops
// what was sent last. After a failure the report goes out instead.
func (l *links) Close() error {
	l.closeOnce.Do(func() {
		if l.err() != nil {
			l.told.Wait()
		}
		l.drainBy = time.Now().Add(l.cfg.Timeout)
		close(l.stop)
		bye := appendFrame(nil, frame{typ: frameBye})
		var wg sync.WaitGroup
		for _, p := range l.peers {
			if p == nil {
				continue
			}
			wg.Go(func() {
				// A write in progress belongs to a call this member leaves
				// mid-way: it may end within a heartbeat, or is cut short
				// and the peer sees a broken frame.
				p.conn.SetWriteDeadline(time.Now().Add(l.cfg.Heartbeat))
				p.wmu.Lock()
				defer p.wmu.Unlock()
				if p.dirty {
					return
				}
				p.dirty = true
				if _, err := p.conn.Write(bye); err != nil {
					p.conn.Close()
					return
				}
				closeWrite(p.conn)
			})
		}
		wg.Wait()
	})
	l.wg.Wait()
	return nil
}

func describe(h collective.Header, n int) string {
	return fmt.Sprintf("%s #%d of %d elements (op %d, root %d), chunk %d of %d bytes", h.Kind, h.Seq, h.Count, h.Op, h.Root, h.Chunk, n)
}
