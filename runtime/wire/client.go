package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"troupe/actors"
	"troupe/runtime/transport"
)

// Client is the caller's side of one connection to a worker process. Many
// goroutines share it; calls are multiplexed by ID.
//
// Replies are read on demand. A goroutine waiting for a result (Wait on
// the call's promise) reads the connection itself when nobody else is, and
// hands each reply to its call, until its own arrives: a synchronous call
// then costs what a raw socket ping-pong costs, with no wake-up of a reader
// goroutine in between (measured on this project's machines: a hand-off
// between goroutines doubles a cross-process round trip). A background
// goroutine reads instead when calls are in flight that nobody drives: a
// burst of calls, results awaited through Done (WaitAll, select), the calls
// left in flight when a driving caller got its reply.
//
// An idle connection is therefore not read; Err probes one that has been
// idle for a while, so a worker that died meanwhile is noticed before a
// call is sent to it.
type Client struct {
	c      *conn
	fr     *frameReader // used by the goroutine holding the read role
	nextID atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]clientCall
	err     error // set once the connection is gone
	done    chan struct{}
	ended   bool

	// The read role: one goroutine at a time reads replies.
	reading   bool          // someone holds it
	driving   bool          // held by a caller waiting for its result (Drive)
	kicked    bool          // a read deadline was set to interrupt the driver
	idleSince time.Time     // when the role was last released with nothing in flight
	wakeBG    chan struct{} // wakes the background reader

	probeAfter time.Duration // how long unread before Err probes (probeIdle; tests set 0)
}

// clientCall is a call waiting for its reply.
type clientCall struct {
	reply *actors.Promise
	stop  func() bool // stops the cancellation watcher, if any
	// argFrom is the argument of a call that named an earlier call on
	// this connection as its argument (flagArgOfCall): sent if the server
	// asks for it (needarg).
	argFrom actors.ObjectRef
}

// directPending is how many calls may be in flight on a connection for a
// new call to be written by its caller rather than by the writer
// goroutine, and to leave the reading of its reply to whoever waits for
// it: a few calls launched together (a graph's nodes) each save a
// goroutine wake-up, while a longer burst shares the writer's writes and
// has the background reader read the replies.
const directPending = 4

// maxDepScan bounds the pending calls searched for the one whose result is
// a new call's argument; past it the argument is awaited by a goroutine.
const maxDepScan = 64

// maxForwarded is the largest argument the reader sends itself when the
// server asks for one, and the largest result a server keeps for calls
// that name it as their argument.
const maxForwarded = 64 << 10

// probeIdle is how long a connection may go unread before Err probes it.
const probeIdle = 5 * time.Millisecond

// A DialOption changes how Dial connects.
type DialOption func(*dialOptions)

type dialOptions struct {
	noUnix bool
}

// NoUnix makes Dial use TCP even for an address served on this host
// (UnixEnv=0): for measuring and troubleshooting.
func NoUnix() DialOption { return func(o *dialOptions) { o.noUnix = true } }

// Dial connects to a worker's call server and authenticates with sec (TLS
// when sec.Client is set, then the token). network is "tcp" or "unix". For
// a TCP address served on this host with ListenLocal, it connects through
// the Unix socket beside it instead (unless NoUnix), with the token and
// without TLS. The client's reads poll for at most sec.ReadSpin().
func Dial(ctx context.Context, sec transport.Security, network, addr string, maxFrame int, opts ...DialOption) (*Client, error) {
	var o dialOptions
	for _, f := range opts {
		f(&o)
	}
	spin := sec.ReadSpin()
	if network == "tcp" && localOS && !o.noUnix {
		nc, err := dialLocal(ctx, sec, addr)
		if err == nil {
			return newClient(nc, maxFrame, spin), nil
		}
		if errors.Is(err, transport.ErrUnauthenticated) || ctx.Err() != nil {
			return nil, fmt.Errorf("wire: dial %s (local socket): %w", addr, err)
		}
	}
	nc, err := sec.Dial(ctx, &net.Dialer{KeepAliveConfig: dialKeepAlive}, network, addr)
	if err != nil {
		return nil, fmt.Errorf("wire: dial %s %s: %w", network, addr, err)
	}
	return newClient(nc, maxFrame, spin), nil
}

// NewClient runs the client side over an established connection, one
// that is already authenticated (a pipe in tests); its reads poll for at
// most DefaultSpin.
func NewClient(nc net.Conn, maxFrame int) *Client {
	return newClient(nc, maxFrame, DefaultSpin)
}

// newClient is NewClient with reads polling for at most spin (0: not at
// all).
func newClient(nc net.Conn, maxFrame int, spin time.Duration) *Client {
	c := newConn(nc, maxFrame, spin)
	cl := &Client{c: c, fr: c.newFrameReader(), pending: map[uint64]clientCall{}, done: make(chan struct{}),
		wakeBG: make(chan struct{}, 1), idleSince: time.Now(), probeAfter: probeIdle}
	go cl.readInBackground()
	return cl
}

// Close closes the connection; pending calls fail with ErrClosed.
func (cl *Client) Close() error {
	cl.c.close(ErrClosed)
	<-cl.done
	return nil
}

// Done is closed once the connection is gone and that is known: an idle
// connection is not read, so its loss is noticed by the next call or Err.
func (cl *Client) Done() <-chan struct{} { return cl.done }

// Err reports why the connection ended, or nil. A connection nobody has
// read for a while is probed first (a non-blocking peek), so a peer that
// closed it meanwhile is noticed.
func (cl *Client) Err() error {
	cl.mu.Lock()
	if cl.err != nil || cl.reading || len(cl.pending) > 0 || time.Since(cl.idleSince) < cl.probeAfter {
		err := cl.err
		cl.mu.Unlock()
		return err
	}
	// Probed under the lock, so nobody starts reading meanwhile.
	cl.idleSince = time.Now()
	perr := cl.c.probe()
	cl.mu.Unlock()
	if perr != nil {
		cl.end(cl.c.fail(perr))
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.err
}

// readInBackground reads replies whenever calls are in flight that nobody
// drives, until the connection ends.
func (cl *Client) readInBackground() {
	for {
		select {
		case <-cl.wakeBG:
		case <-cl.c.closed:
			cl.end(cl.c.Err())
			return
		}
		cl.mu.Lock()
		if cl.reading || len(cl.pending) == 0 {
			cl.mu.Unlock()
			continue
		}
		cl.reading = true
		cl.mu.Unlock()
		for {
			more, err := cl.readOne()
			if err != nil {
				// Not errInterrupted: only a driver's reads are interrupted.
				cl.end(err)
				return
			}
			cl.mu.Lock()
			if !more && len(cl.pending) == 0 {
				cl.releaseLocked()
				cl.mu.Unlock()
				break
			}
			cl.mu.Unlock()
		}
	}
}

// Drive implements actors.Driver: the caller waiting for call id reads
// replies, handing each to its call, until id's arrives or ctx ends. It
// returns at once if another goroutine is reading.
func (cl *Client) Drive(ctx context.Context, id uint64) {
	if ctx.Err() != nil {
		return
	}
	cl.mu.Lock()
	if _, ok := cl.pending[id]; !ok || cl.reading {
		cl.mu.Unlock()
		return
	}
	cl.reading, cl.driving = true, true
	cl.mu.Unlock()
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, cl.interrupt)
	}
	for {
		_, err := cl.readOne()
		if err != nil && err != errInterrupted {
			cl.end(err)
			break
		}
		cl.mu.Lock()
		if err == errInterrupted && cl.kicked {
			cl.c.nc.SetReadDeadline(time.Time{})
			cl.kicked = false
		}
		if _, mine := cl.pending[id]; mine && ctx.Err() == nil {
			cl.mu.Unlock()
			continue
		}
		cl.releaseLocked()
		cl.mu.Unlock()
		break
	}
	if stop != nil {
		stop()
	}
}

// Need implements actors.Driver: a goroutine is about to wait for a result
// without driving, so the background reader reads if nobody is.
func (cl *Client) Need() {
	cl.mu.Lock()
	cl.needLocked()
	cl.mu.Unlock()
}

// needLocked wakes the background reader if calls are in flight and nobody
// reads. cl.mu is held.
func (cl *Client) needLocked() {
	if cl.reading || len(cl.pending) == 0 {
		return
	}
	select {
	case cl.wakeBG <- struct{}{}:
	default:
	}
}

// releaseLocked gives up the read role; calls still in flight go to the
// background reader. cl.mu is held.
func (cl *Client) releaseLocked() {
	if cl.kicked {
		cl.c.nc.SetReadDeadline(time.Time{})
		cl.kicked = false
	}
	cl.reading, cl.driving = false, false
	if len(cl.pending) == 0 {
		cl.idleSince = time.Now()
		return
	}
	cl.needLocked()
}

// interrupt makes a driver's read return (its context ended) by setting a
// read deadline in the past; the driver clears it.
func (cl *Client) interrupt() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.driving && !cl.kicked {
		cl.kicked = true
		cl.c.nc.SetReadDeadline(aLongTimeAgo)
	}
}

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// readOne reads one reply and hands it to its call. more reports whether
// more input is buffered.
func (cl *Client) readOne() (more bool, err error) {
	f, more, err := cl.fr.next()
	if err != nil {
		return false, err
	}
	if f.kind == kindNeedArg {
		cl.mu.Lock()
		call, ok := cl.pending[f.callID]
		cl.mu.Unlock()
		if ok && call.argFrom != nil {
			cl.supplyArg(f.callID, call.argFrom)
		}
		return more, nil
	}
	if f.kind != kindReply {
		return false, cl.c.fail(fmt.Errorf("%w: kind %d from a server", ErrMalformed, f.kind))
	}
	cl.mu.Lock()
	call, ok := cl.pending[f.callID]
	delete(cl.pending, f.callID)
	cl.mu.Unlock()
	if !ok {
		return more, nil // a reply to a call already failed locally
	}
	if call.stop != nil {
		call.stop()
	}
	switch f.status {
	case statusOK:
		call.reply.Resolve(f.data, nil)
	default:
		call.reply.Resolve(nil, decodeError(f.data))
	}
	return more, nil
}

// end fails every call in flight with err, the connection's end, once.
func (cl *Client) end(err error) {
	cl.c.close(err)
	cl.mu.Lock()
	if cl.ended {
		cl.mu.Unlock()
		return
	}
	cl.ended = true
	cl.err = err
	pending := cl.pending
	cl.pending = nil
	cl.reading, cl.driving = false, false
	cl.mu.Unlock()
	for _, call := range pending {
		if call.stop != nil {
			call.stop()
		}
		call.reply.Resolve(nil, fmt.Errorf("call lost: %w", err))
	}
	close(cl.done)
}

// Invoke sends one call to actorID. The outcome arrives through inv.Reply.
func (cl *Client) Invoke(actorID string, inv *actors.Invocation) {
	cl.InvokeIncarnation(actorID, -1, inv)
}

// InvokeIncarnation sends one call to incarnation inc of actorID (its
// epoch, the actor's committed restart count): a server whose host is a
// FencedHost runs it only on that incarnation and otherwise fails it with
// an error wrapping actors.ErrStaleIncarnation. inc < 0 names none (as
// Invoke).
func (cl *Client) InvokeIncarnation(actorID string, inc int, inv *actors.Invocation) {
	id := cl.nextID.Add(1)
	f := frame{kind: kindCall, callID: id, actor: actorID, method: inv.Method, data: inv.Arg}
	if inc >= 0 {
		f.flags |= flagEpoch
		f.epoch = uint64(inc)
	}
	var later actors.ObjectRef
	if inv.ArgRef != nil {
		if p, ok := inv.ArgRef.(*actors.Promise); ok {
			if data, err, ready := p.Result(); ready && err == nil {
				f.data = data
			} else {
				later = inv.ArgRef
			}
		} else {
			later = inv.ArgRef
		}
		if later != nil {
			f.flags |= flagArgLater
			f.data = nil
		}
	}
	if inv.Ctx != nil && inv.Ctx.Done() != nil {
		if err := inv.Ctx.Err(); err != nil {
			inv.Reply.Resolve(nil, fmt.Errorf("call %s: not sent: %w", inv.Method, err))
			return
		}
		f.flags |= flagCancel
	}
	cl.mu.Lock()
	if cl.pending == nil {
		err := cl.err
		cl.mu.Unlock()
		inv.Reply.Resolve(nil, fmt.Errorf("call %s: %w", inv.Method, err))
		return
	}
	call := clientCall{reply: inv.Reply}
	var src uint64
	if later != nil {
		src = cl.producerLocked(later)
	}
	if src != 0 {
		// The argument is the result of a call on this connection: the
		// server takes it from there without it coming back through this
		// process, and asks for it in the rare case it cannot.
		f.flags |= flagArgOfCall
		f.data = binary.AppendUvarint(nil, src)
		call.argFrom = later
	}
	cl.pending[id] = call
	// A call with few others in flight is written by the caller: waking
	// the writer goroutine would cost more than the write. Calls in a
	// burst share the writer's writes, and the background reader reads
	// their replies; the reply to a lone call is read by its waiter.
	direct := len(cl.pending) <= directPending
	if direct {
		inv.Reply.SetDriver(cl, id)
	} else {
		cl.needLocked()
	}
	cl.mu.Unlock()
	if err := cl.c.send(&f, direct); err != nil {
		cl.fail(id, fmt.Errorf("call %s: %w", inv.Method, err))
		return
	}
	if f.flags&flagCancel != 0 {
		// Watch for cancellation once the call is on its way, so a cancel
		// frame never overtakes it. The reply may have come already.
		stop := context.AfterFunc(inv.Ctx, func() { cl.c.send(&frame{kind: kindCancel, callID: id}, false) })
		cl.mu.Lock()
		call, ok := cl.pending[id]
		if ok {
			call.stop = stop
			cl.pending[id] = call
		}
		cl.mu.Unlock()
		if !ok {
			stop()
		}
	}
	if later != nil && src == 0 {
		go cl.sendArgLater(id, inv, later)
	}
}

// producerLocked returns the ID of the pending call on this connection
// whose reply is ref, or 0. cl.mu is held.
func (cl *Client) producerLocked(ref actors.ObjectRef) uint64 {
	p, ok := ref.(*actors.Promise)
	if !ok || len(cl.pending) > maxDepScan {
		return 0
	}
	for pid, call := range cl.pending {
		if call.reply == p {
			return pid
		}
	}
	return 0
}

// supplyArg sends ref as the argument of call id, which the server asked
// for. The reader calls it: a resolved small argument is written at once,
// anything else by a goroutine, so the reader never waits.
func (cl *Client) supplyArg(id uint64, ref actors.ObjectRef) {
	p, ok := ref.(*actors.Promise)
	if !ok {
		go cl.sendArgLater(id, &actors.Invocation{Method: "argument"}, ref)
		return
	}
	data, err, ready := p.Result()
	if !ready || len(data) > maxForwarded {
		go cl.sendArgLater(id, &actors.Invocation{Method: "argument"}, ref)
		return
	}
	f := frame{kind: kindArg, callID: id, data: data}
	if err != nil {
		f.kind, f.data = kindArgErr, encodeError(err)
	}
	if serr := cl.c.send(&f, true); serr != nil {
		cl.fail(id, fmt.Errorf("call argument: %w", serr))
	}
}

// sendArgLater waits for a call's argument and sends it after the call.
func (cl *Client) sendArgLater(id uint64, inv *actors.Invocation, ref actors.ObjectRef) {
	ctx := inv.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	data, err := ref.Wait(ctx)
	f := frame{kind: kindArg, callID: id, data: data}
	if err != nil {
		f.kind, f.data = kindArgErr, encodeError(err)
	}
	// Written by this goroutine when no write is in progress: the callee
	// is waiting for it.
	if serr := cl.c.send(&f, true); serr != nil {
		cl.fail(id, fmt.Errorf("call %s: argument: %w", inv.Method, serr))
	}
}

// fail resolves a pending call locally.
func (cl *Client) fail(id uint64, err error) {
	cl.mu.Lock()
	call, ok := cl.pending[id]
	delete(cl.pending, id)
	cl.mu.Unlock()
	if ok {
		if call.stop != nil {
			call.stop()
		}
		call.reply.Resolve(nil, err)
	}
}

// Ref returns an actors.Ref for an actor served over this connection. kill
// ends the actor through the control plane; nil refuses Kill.
func (cl *Client) Ref(id, name, typeName string, kill func(ctx context.Context, reason string) error) actors.Ref {
	return &remoteRef{cl: cl, id: id, name: name, typeName: typeName, kill: kill}
}

type remoteRef struct {
	cl                 *Client
	id, name, typeName string
	kill               func(ctx context.Context, reason string) error
}

func (r *remoteRef) ID() string                    { return r.id }
func (r *remoteRef) Name() string                  { return r.name }
func (r *remoteRef) TypeName() string              { return r.typeName }
func (r *remoteRef) Invoke(inv *actors.Invocation) { r.cl.Invoke(r.id, inv) }
func (r *remoteRef) Kill(ctx context.Context, reason string) error {
	if r.kill == nil {
		return fmt.Errorf("kill %s: not supported on this connection", r.id)
	}
	return r.kill(ctx, reason)
}
