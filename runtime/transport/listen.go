package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Listen listens on network and addr and returns a listener whose Accept
// yields only connections that passed the handshake (see Wrap).
func (s Security) Listen(network, addr string) (net.Listener, error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	return s.Wrap(l), nil
}

// Wrap returns a listener that runs the handshake (TLS when s.Server is
// set and l is not a Unix socket, then the token) on every connection l
// accepts, at most MaxPendingHandshakes at a time and each within
// HandshakeTimeout, and yields only those that passed. The others are
// closed, counted in ProcessAuthStats and logged at a rate limit. On a
// Unix socket a peer of another user (SO_PEERCRED, where the system has
// it) is refused before the handshake. Close closes l and the connections
// still in their handshake, and waits for the handshake goroutines. A
// listener Wrap or Listen returned is returned as it is (its connections
// are authenticated already).
func (s Security) Wrap(l net.Listener) net.Listener {
	if al, ok := l.(*authListener); ok {
		return al
	}
	return s.wrap(l, HandshakeTimeout)
}

func (s Security) wrap(l net.Listener, timeout time.Duration) *authListener {
	al := &authListener{Listener: l, token: s.Token, spin: s.ReadSpin(), timeout: timeout,
		conns: make(chan net.Conn), closed: make(chan struct{}), ended: make(chan struct{}),
		pending: map[net.Conn]struct{}{}}
	if l.Addr().Network() == "unix" {
		al.unix = true
	} else {
		al.tlsConf = s.Server
	}
	al.wg.Go(al.acceptLoop)
	return al
}

// authListener is a listener that yields authenticated connections.
type authListener struct {
	net.Listener
	token   string
	tlsConf *tls.Config // nil: no TLS (a Unix socket, or plaintext)
	unix    bool
	spin    time.Duration // TLS connections' longest poll (Security.ReadSpin)
	timeout time.Duration

	conns  chan net.Conn // authenticated, to Accept
	closed chan struct{} // Close was called
	ended  chan struct{} // the accept loop ended; err says why
	err    error         // set before ended closes
	once   sync.Once
	wg     sync.WaitGroup // the accept loop and the handshakes

	mu      sync.Mutex // guards the following
	pending map[net.Conn]struct{}
}

// Accept implements net.Listener.
func (l *authListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-l.ended:
		return nil, l.err
	}
}

// Close implements net.Listener.
func (l *authListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.Listener.Close()
		l.mu.Lock()
		for c := range l.pending {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return err
}

func (l *authListener) acceptLoop() {
	var delay time.Duration
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // EMFILE and the like: back off as net/http does
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.closed:
				}
			}
			select {
			case <-l.closed:
				l.err = net.ErrClosed
			default:
				l.err = err
			}
			close(l.ended)
			return
		}
		delay = 0
		l.mu.Lock()
		select {
		case <-l.closed:
			l.mu.Unlock()
			nc.Close()
			continue
		default:
		}
		if len(l.pending) >= MaxPendingHandshakes {
			l.mu.Unlock()
			nc.Close()
			refused(refusedOverload, nc.RemoteAddr(), errors.New("too many handshakes in progress"))
			continue
		}
		l.pending[nc] = struct{}{}
		l.mu.Unlock()
		l.wg.Go(func() { l.handshake(nc) })
	}
}

// handshake authenticates one connection and hands it to Accept.
func (l *authListener) handshake(nc net.Conn) {
	c, why, err := l.authenticate(nc)
	l.mu.Lock()
	delete(l.pending, nc)
	l.mu.Unlock()
	if err != nil {
		nc.Close()
		select {
		case <-l.closed: // closed by Close, not refused
		default:
			refused(why, nc.RemoteAddr(), err)
		}
		return
	}
	auth.accepted.Add(1)
	select {
	case l.conns <- c:
	case <-l.closed:
		c.Close()
	}
}

func (l *authListener) authenticate(nc net.Conn) (net.Conn, refusal, error) {
	if l.unix {
		if err := checkPeer(nc); err != nil {
			return nil, refusedPeer, err
		}
	} else if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return serverHandshake(nc, l.token, l.tlsConf, l.spin, l.timeout)
}

// Dial connects to addr on network with d (nil: a default dialer) and runs
// the client side of the handshake: TLS when s.Client is set and network
// is not "unix", then the token proof. TCP connections get TCP_NODELAY.
func (s Security) Dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	if d == nil {
		d = &net.Dialer{}
	}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c, err := s.Handshake(ctx, nc, network, addr)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s %s: %w", network, addr, err)
	}
	return c, nil
}

// Handshake runs the client side of the handshake on nc, dialled to addr
// on network, and returns the connection to use (the TLS one, or nc).
func (s Security) Handshake(ctx context.Context, nc net.Conn, network, addr string) (net.Conn, error) {
	tlsConf := s.Client
	if network == "unix" {
		tlsConf = nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return clientHandshake(ctx, nc, s.Token, tlsConf, host, s.ReadSpin())
}

// AuthStats counts this process's connections accepted and refused by
// Security listeners since it started; the node exports them as metrics.
type AuthStats struct {
	Accepted   uint64 // passed the handshake
	Refused    uint64 // all refused, the sum of the following
	BadToken   uint64 // proved a token other than the cluster's
	NoToken    uint64 // presented no token
	Junk       uint64 // not a troupe handshake: malformed, silent past the deadline, or closed
	TLS        uint64 // failed the TLS handshake
	Peer       uint64 // a Unix socket peer of another user
	Overloaded uint64 // dropped: too many handshakes in progress
}

var auth struct {
	accepted                                     atomic.Uint64
	badToken, noToken, junk, tls, peer, overload atomic.Uint64
}

// Add returns the sum of s and o.
func (s AuthStats) Add(o AuthStats) AuthStats {
	return AuthStats{Accepted: s.Accepted + o.Accepted, Refused: s.Refused + o.Refused, BadToken: s.BadToken + o.BadToken,
		NoToken: s.NoToken + o.NoToken, Junk: s.Junk + o.Junk, TLS: s.TLS + o.TLS, Peer: s.Peer + o.Peer, Overloaded: s.Overloaded + o.Overloaded}
}

// ProcessAuthStats returns this process's handshake counters.
func ProcessAuthStats() AuthStats {
	s := AuthStats{Accepted: auth.accepted.Load(), BadToken: auth.badToken.Load(), NoToken: auth.noToken.Load(),
		Junk: auth.junk.Load(), TLS: auth.tls.Load(), Peer: auth.peer.Load(), Overloaded: auth.overload.Load()}
	s.Refused = s.BadToken + s.NoToken + s.Junk + s.TLS + s.Peer + s.Overloaded
	return s
}

// refusalLogEvery is how often refusals are logged at most: a flood of
// junk connections costs one line per interval, with the count.
const refusalLogEvery = 30 * time.Second

var refusalLog struct {
	mu         sync.Mutex // guards the following
	last       time.Time
	suppressed int
}

// refused counts a refused connection and logs it, at most once per
// refusalLogEvery (with the number refused since the last line).
func refused(why refusal, remote net.Addr, err error) {
	switch why {
	case refusedBadToken:
		auth.badToken.Add(1)
	case refusedNoToken:
		auth.noToken.Add(1)
	case refusedTLS:
		auth.tls.Add(1)
	case refusedPeer:
		auth.peer.Add(1)
	case refusedOverload:
		auth.overload.Add(1)
	default:
		auth.junk.Add(1)
	}
	refusalLog.mu.Lock()
	now := time.Now()
	if !refusalLog.last.IsZero() && now.Sub(refusalLog.last) < refusalLogEvery {
		refusalLog.suppressed++
		refusalLog.mu.Unlock()
		return
	}
	n := refusalLog.suppressed
	refusalLog.last, refusalLog.suppressed = now, 0
	refusalLog.mu.Unlock()
	from := "unknown"
	if remote != nil {
		from = remote.String()
	}
	slog.Default().Warn("connection refused: peer not authenticated", "remote", from, "err", err,
		"refused_since_last_report", n, "report_every", refusalLogEvery)
}
