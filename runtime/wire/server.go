package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"troupe/actors"

	"troupe/runtime/api"
	"troupe/runtime/transport"
)

// Target receives invocations for one actor; *actors.Instance is one.
type Target interface {
	Invoke(inv *actors.Invocation)
}

// Host finds the actors a server serves.
type Host interface {
	// Lookup returns the live actor with the given ID.
	Lookup(actorID string) (Target, bool)
}

// FencedHost is a Host that checks the incarnation a call names: a call
// sent with Client.InvokeIncarnation runs only on that incarnation of the
// actor (the incarnation is the actor's epoch, actors.ActorInfo.Epoch).
// The host refuses it otherwise, with an error wrapping
// actors.ErrStaleIncarnation: the caller is behind (it names an
// incarnation older than the one running here) or the incarnation running
// here was replaced (the call names a newer one, which the cluster
// committed elsewhere). Calls without an incarnation use Lookup.
type FencedHost interface {
	Host
	LookupIncarnation(actorID string, inc uint64) (Target, error)
}

// HostFunc adapts a function to Host.
type HostFunc func(actorID string) (Target, bool)

// Lookup implements Host.
func (f HostFunc) Lookup(id string) (Target, bool) { return f(id) }

// Server serves calls to the actors of one process.
type Server struct {
	host     Host
	fenced   FencedHost // host, when it checks incarnations
	maxFrame int
	sec      transport.Security

	mu    sync.Mutex
	lis   []net.Listener
	conns map[*serverConn]struct{}
	done  bool

	watching atomic.Bool // the watchdog of inline calls runs (see inline.go)
}

// NewServer returns a server for host's actors that authenticates every
// connection with sec before it reads a frame; reads poll for at most
// sec.ReadSpin(). maxFrame ≤ 0 means DefaultMaxFrame.
func NewServer(host Host, maxFrame int, sec transport.Security) *Server {
	fenced, _ := host.(FencedHost)
	return &Server{host: host, fenced: fenced, maxFrame: maxFrame, sec: sec, conns: map[*serverConn]struct{}{}}
}

// Serve accepts connections on l until Close; it returns nil after Close.
// Each connection is served once it has passed the handshake of the
// server's Security (transport.Security.Wrap: TLS on TCP when configured,
// then the token); the others are refused and counted.
func (s *Server) Serve(l net.Listener) error {
	l = s.sec.Wrap(l)
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.lis = append(s.lis, l)
	s.mu.Unlock()
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			done := s.done
			s.mu.Unlock()
			if done || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("wire: accept: %w", err)
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		go s.ServeConn(nc)
	}
}

// Close stops accepting and closes every connection; in-flight calls'
// contexts are cancelled.
func (s *Server) Close() error {
	s.mu.Lock()
	s.done = true
	lis, conns := s.lis, s.conns
	s.lis, s.conns = nil, map[*serverConn]struct{}{}
	s.mu.Unlock()
	for _, l := range lis {
		l.Close()
	}
	for sc := range conns {
		sc.c.close(ErrClosed)
	}
	return nil
}

// serverCall is a tracked call in flight on a server connection: one whose
// argument follows or whose caller may cancel it.
type serverCall struct {
	argLater *actors.Promise    // resolved by the arg frame
	cancel   context.CancelFunc // set when the caller may cancel
	producer uint64             // the call whose result argLater waits for here, or 0
}

// recentResults is how many recent small results a connection keeps for
// calls that name them as their argument (flagArgOfCall).
const recentResults = 16

// recentResult is a call's successful result, kept for a while.
type recentResult struct {
	id   uint64
	data []byte
}

// serverConn is the server side of one connection.
type serverConn struct {
	s   *Server
	c   *conn
	ctx context.Context // cancelled when the connection ends
	fr  *frameReader

	mu    sync.Mutex
	calls map[uint64]*serverCall // tracked calls
	// Results feeding other calls of the connection (flagArgOfCall): the
	// latest small ones, the calls in progress, and the calls waiting for
	// the result of one in progress. Kept once a call of the connection
	// has named another's result (chained); before, such a call asks the
	// client for its argument.
	recent  [recentResults]recentResult
	nRecent int
	running map[uint64]struct{}
	waiting map[uint64][]*actors.Promise
	chained atomic.Bool

	// inFlight counts calls received and not yet replied to, plus one
	// while the reader holds more buffered input (more calls are coming).
	// A reply that brings it back to zero at the end of a short burst of
	// calls (a synchronous call, a graph's few calls) is written by the
	// replying goroutine itself; other replies are queued for the writer
	// goroutine, so a stream of calls gets its replies in few writes.
	inFlight   atomic.Int64
	readerBusy bool         // the reader's share of inFlight; only the reader touches it
	burst      atomic.Int64 // calls received since inFlight was last zero

	inline inlineState // a call running on the reading goroutine
	ended  chan struct{}
}

// incoming is one call received: its invocation and what the reply needs,
// in one allocation.
type incoming struct {
	sc      *serverConn
	id      uint64
	tracked bool
	inv     actors.Invocation
}

// resolved sends the call's outcome back.
func (in *incoming) resolved(data []byte, err error) {
	in.sc.reply(in.id, in.tracked, data, err)
}

// ServeConn serves one connection until it fails or the server closes. The
// connection must be authenticated already: Serve's are.
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(nc, s.maxFrame, s.sec.ReadSpin())
	ctx, cancelAll := context.WithCancel(context.Background())
	sc := &serverConn{s: s, c: c, ctx: ctx, fr: c.newFrameReader(), calls: map[uint64]*serverCall{}, ended: make(chan struct{})}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		nc.Close()
		cancelAll()
		return
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	sc.read()
	<-sc.ended // another goroutine may have taken over reading
	cancelAll()
	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
}

// read serves frames until the connection ends, or until another goroutine
// takes over reading while this one runs a long call inline.
func (sc *serverConn) read() {
	for {
		f, more, err := sc.fr.next()
		if err == nil {
			err = sc.handle(&f, more)
		}
		if err == errHandedOff {
			return
		}
		if err != nil {
			sc.c.fail(err)
			close(sc.ended)
			return
		}
	}
}

// track returns the tracked call id, creating it.
func (sc *serverConn) track(id uint64) *serverCall {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	t := sc.calls[id]
	if t == nil {
		t = &serverCall{}
		sc.calls[id] = t
	}
	return t
}

// lookup returns the tracked call id, or nil.
func (sc *serverConn) lookup(id uint64) *serverCall {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.calls[id]
}

// reply sends a call's outcome.
func (sc *serverConn) reply(id uint64, tracked bool, data []byte, err error) {
	if tracked {
		sc.mu.Lock()
		t := sc.calls[id]
		delete(sc.calls, id)
		if t != nil && t.producer != 0 {
			sc.unwaitLocked(t.producer, t.argLater)
		}
		sc.mu.Unlock()
		if t != nil && t.cancel != nil {
			t.cancel()
		}
	}
	if sc.chained.Load() {
		sc.mu.Lock()
		delete(sc.running, id)
		if err == nil && len(data) <= maxForwarded {
			sc.recent[sc.nRecent%recentResults] = recentResult{id: id, data: data}
			sc.nRecent++
		}
		waiters := sc.waiting[id]
		delete(sc.waiting, id)
		sc.mu.Unlock()
		for _, p := range waiters {
			p.Resolve(data, err)
		}
	}
	out := frame{kind: kindReply, callID: id, data: data}
	if err != nil {
		out.status, out.data = statusErr, encodeError(err)
	}
	direct := sc.inFlight.Add(-1) == 0 && sc.burst.Load() <= directPending
	if serr := sc.c.send(&out, direct); serr != nil && !errors.Is(serr, ErrClosed) {
		// The result is too large for a frame: say so instead.
		out.status, out.data = statusErr, encodeError(serr)
		sc.c.send(&out, direct)
	}
}

// target finds the actor a call is for: the incarnation it names, when
// it names one and the host is fenced.
func (sc *serverConn) target(f *frame) (Target, error) {
	if sc.s.fenced != nil && f.flags&flagEpoch != 0 {
		return sc.s.fenced.LookupIncarnation(f.actor, f.epoch)
	}
	t, ok := sc.s.host.Lookup(f.actor)
	if !ok {
		return nil, &api.NotHostedError{Actor: f.actor}
	}
	return t, nil
}

// handle serves one frame from the client.
func (sc *serverConn) handle(f *frame, more bool) error {
	// The reader counts as a call in flight while it has more input, so
	// replies made meanwhile are not written alone.
	if more != sc.readerBusy {
		sc.readerBusy = more
		if more {
			sc.inFlight.Add(1)
		} else {
			sc.inFlight.Add(-1) // replies made meanwhile were queued and the writer signalled
		}
	}
	switch f.kind {
	case kindCall:
		if sc.inFlight.Add(1) == 1 {
			sc.burst.Store(1)
		} else {
			sc.burst.Add(1)
		}
		tracked := f.flags&(flagArgLater|flagCancel) != 0
		t, err := sc.target(f)
		if err != nil {
			sc.reply(f.callID, false, nil, err)
			break
		}
		if sc.chained.Load() {
			sc.mu.Lock()
			sc.running[f.callID] = struct{}{}
			sc.mu.Unlock()
		}
		in := &incoming{sc: sc, id: f.callID, tracked: tracked}
		in.inv = actors.Invocation{Method: f.method, Arg: f.data, Reply: actors.NewPromiseFunc(in.resolved)}
		if tracked {
			tc := sc.track(f.callID)
			if f.flags&flagArgLater != 0 {
				tc.argLater = actors.NewPromise()
				in.inv.ArgRef, in.inv.Arg = tc.argLater, nil
				if f.flags&flagArgOfCall != 0 {
					sc.argOfCall(f.callID, tc, f.data)
				}
			}
			if f.flags&flagCancel != 0 {
				in.inv.Ctx, tc.cancel = context.WithCancel(sc.ctx)
			}
		}
		// A lone call, or one the next call waits for (a chain of
		// actors), runs here if the actor is idle and its argument is at
		// hand. Other calls in a burst go to their actors' goroutines, so
		// calls to different actors run in parallel.
		if (!more || sc.fr.peekArgSource() == f.callID) && argAtHand(&in.inv) {
			if ran, handedOff := sc.runInline(t, &in.inv); ran {
				if handedOff {
					return errHandedOff
				}
				break
			}
		}
		t.Invoke(&in.inv)
	case kindArg, kindArgErr:
		t := sc.lookup(f.callID)
		if t == nil || t.argLater == nil {
			break // the call already ended (cancelled)
		}
		if f.kind == kindArg {
			t.argLater.Resolve(f.data, nil)
		} else {
			t.argLater.Resolve(nil, decodeError(f.data))
		}
	case kindCancel:
		if t := sc.lookup(f.callID); t != nil && t.cancel != nil {
			t.cancel()
		}
	default:
		return fmt.Errorf("%w: kind %d from a client", ErrMalformed, f.kind)
	}
	return nil
}

// argAtHand reports whether inv's argument is there to run it now.
func argAtHand(inv *actors.Invocation) bool {
	if inv.ArgRef == nil {
		return true
	}
	p, ok := inv.ArgRef.(*actors.Promise)
	if !ok {
		return false
	}
	_, _, ready := p.Result()
	return ready
}

// argOfCall links the argument of call id to the result of the earlier
// call named by src (a uvarint): taken from the recent results, or on that
// call's reply if it is still running. Otherwise (a result not kept, or
// not a call ID) the server asks the client for the argument.
func (sc *serverConn) argOfCall(id uint64, tc *serverCall, src []byte) {
	pid, n := binary.Uvarint(src)
	if n > 0 && n == len(src) && pid != 0 {
		sc.mu.Lock()
		if sc.running == nil {
			// From now on the connection keeps what chains need.
			sc.running = map[uint64]struct{}{}
			sc.chained.Store(true)
		}
		for i := range sc.recent {
			if r := sc.recent[i]; r.id == pid && r.data != nil {
				sc.mu.Unlock()
				tc.argLater.Resolve(r.data, nil)
				return
			}
		}
		if _, ok := sc.running[pid]; ok && len(sc.waiting) < maxWaiting {
			if sc.waiting == nil {
				sc.waiting = map[uint64][]*actors.Promise{}
			}
			sc.waiting[pid] = append(sc.waiting[pid], tc.argLater)
			tc.producer = pid
			sc.mu.Unlock()
			return
		}
		sc.mu.Unlock()
	}
	sc.c.send(&frame{kind: kindNeedArg, callID: id}, true)
}

// maxWaiting bounds the calls whose producer a connection watches for.
const maxWaiting = 1024

// unwaitLocked forgets that p waits for the result of call id. sc.mu is
// held.
func (sc *serverConn) unwaitLocked(id uint64, p *actors.Promise) {
	ws := sc.waiting[id]
	for i, w := range ws {
		if w == p {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(sc.waiting, id)
	} else {
		sc.waiting[id] = ws
	}
}
