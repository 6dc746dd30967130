package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"troupe/actors"
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

// HostFunc adapts a function to Host.
type HostFunc func(actorID string) (Target, bool)

// Lookup implements Host.
func (f HostFunc) Lookup(id string) (Target, bool) { return f(id) }

// Server serves calls to the actors of one process.
type Server struct {
	host     Host
	maxFrame int

	mu    sync.Mutex
	lis   []net.Listener
	conns map[*conn]struct{}
	done  bool
}

// NewServer returns a server for host's actors. maxFrame ≤ 0 means
// DefaultMaxFrame.
func NewServer(host Host, maxFrame int) *Server {
	return &Server{host: host, maxFrame: maxFrame, conns: map[*conn]struct{}{}}
}

// Serve accepts connections on l until Close; it returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
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
	s.lis, s.conns = nil, map[*conn]struct{}{}
	s.mu.Unlock()
	for _, l := range lis {
		l.Close()
	}
	for c := range conns {
		c.close(ErrClosed)
	}
	return nil
}

// serverCall is a call in flight on a server connection.
type serverCall struct {
	argLater *actors.Promise    // resolved by the arg frame
	cancel   context.CancelFunc // set when the caller may cancel
}

// ServeConn serves one connection until it fails or the server closes.
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(nc, s.maxFrame)
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	ctx, cancelAll := context.WithCancel(context.Background())
	var mu sync.Mutex
	calls := map[uint64]*serverCall{}
	track := func(id uint64) *serverCall {
		mu.Lock()
		defer mu.Unlock()
		sc := calls[id]
		if sc == nil {
			sc = &serverCall{}
			calls[id] = sc
		}
		return sc
	}
	take := func(id uint64) *serverCall {
		mu.Lock()
		defer mu.Unlock()
		sc := calls[id]
		delete(calls, id)
		return sc
	}
	c.readLoop(func(f *frame) error {
		switch f.kind {
		case kindCall:
			id := f.callID
			tracked := f.flags&(flagArgLater|flagCancel) != 0
			reply := actors.NewPromiseFunc(func(data []byte, err error) {
				if tracked {
					if sc := take(id); sc != nil && sc.cancel != nil {
						sc.cancel()
					}
				}
				out := frame{kind: kindReply, callID: id, data: data}
				if err != nil {
					out.status, out.data = statusErr, encodeError(err)
				}
				if serr := c.send(&out); serr != nil && !errors.Is(serr, ErrClosed) {
					// The result is too large for a frame: say so instead.
					out.status, out.data = statusErr, encodeError(serr)
					c.send(&out)
				}
			})
			t, ok := s.host.Lookup(f.actor)
			if !ok {
				reply.Resolve(nil, fmt.Errorf("actor %s: %w on this worker", f.actor, actors.ErrNotFound))
				return nil
			}
			inv := &actors.Invocation{Method: f.method, Arg: f.data, Reply: reply}
			if tracked {
				sc := track(id)
				if f.flags&flagArgLater != 0 {
					sc.argLater = actors.NewPromise()
					inv.ArgRef, inv.Arg = sc.argLater, nil
				}
				if f.flags&flagCancel != 0 {
					inv.Ctx, sc.cancel = context.WithCancel(ctx)
				}
			}
			t.Invoke(inv)
		case kindArg, kindArgErr:
			mu.Lock()
			sc := calls[f.callID]
			mu.Unlock()
			if sc == nil || sc.argLater == nil {
				return nil // the call already ended (cancelled)
			}
			if f.kind == kindArg {
				sc.argLater.Resolve(f.data, nil)
			} else {
				sc.argLater.Resolve(nil, decodeError(f.data))
			}
		case kindCancel:
			mu.Lock()
			sc := calls[f.callID]
			mu.Unlock()
			if sc != nil && sc.cancel != nil {
				sc.cancel()
			}
		default:
			return fmt.Errorf("%w: kind %d from a client", ErrMalformed, f.kind)
		}
		return nil
	})
	cancelAll()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}
