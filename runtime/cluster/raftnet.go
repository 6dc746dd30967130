package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"troupe/runtime/transport"
)

// The raft transport is raft's own TCP transport (raft.NetworkTransport)
// over a stream layer that authenticates every connection with the cluster
// token before raft sees it: the accepting side sends a random 16-byte
// challenge, the dialing side answers with HMAC-SHA256(key, challenge),
// where key is derived from the token. A peer without the token is
// disconnected before it can send a single raft RPC.
//
// With TLS (the default), the connection is TLS first, with certificates
// required and verified against the cluster CA on both sides (only nodes
// speak raft), and the token handshake runs inside it.

const (
	challengeLen     = 16
	handshakeTimeout = 3 * time.Second
)

// errHandshake: a raft peer failed the token handshake.
var errHandshake = errors.New("raft handshake: peer does not hold the cluster token")

// raftKey derives the raft handshake key from the cluster token.
func raftKey(token string) []byte {
	k := sha256.Sum256([]byte("troupe-raft-handshake:" + token))
	return k[:]
}

// authStreamLayer is a raft.StreamLayer over TCP with the token handshake.
type authStreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	key       []byte
	log       *slog.Logger
	serverTLS *tls.Config // nil: plaintext
	clientTLS *tls.Config

	conns     chan net.Conn
	closeOnce sync.Once
	closed    chan struct{}
}

func newAuthStreamLayer(ln net.Listener, advertise net.Addr, sec transport.Security, log *slog.Logger) *authStreamLayer {
	s := &authStreamLayer{ln: ln, advertise: advertise, key: raftKey(sec.Token), log: log,
		conns: make(chan net.Conn), closed: make(chan struct{}), clientTLS: sec.Client}
	if sec.Server != nil {
		s.serverTLS = sec.Server.Clone()
		s.serverTLS.ClientAuth = tls.RequireAndVerifyClientCert
	}
	go s.acceptLoop()
	return s
}

func (s *authStreamLayer) acceptLoop() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.Close()
			return
		}
		go s.handshake(c)
	}
}

// handshake checks a new incoming connection; only good ones reach Accept.
func (s *authStreamLayer) handshake(c net.Conn) {
	var nonce [challengeLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		c.Close()
		return
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	if s.serverTLS != nil {
		tc := tls.Server(c, s.serverTLS)
		if err := tc.Handshake(); err != nil {
			s.log.Warn("raft connection refused: TLS handshake", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
		c = tc
	}
	if _, err := c.Write(nonce[:]); err != nil {
		c.Close()
		return
	}
	var got [sha256.Size]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		s.log.Warn("raft connection refused: no handshake", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	if !hmac.Equal(got[:], mac(s.key, nonce[:])) {
		s.log.Warn("raft connection refused: wrong cluster token", "remote", c.RemoteAddr().String())
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	select {
	case s.conns <- c:
	case <-s.closed:
		c.Close()
	}
}

func mac(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// Dial implements raft.StreamLayer: it connects and answers the challenge.
func (s *authStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	if s.clientTLS != nil {
		tc := tls.Client(c, s.clientTLS)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("raft dial: %w", transport.HandshakeError(string(address), err))
		}
		c = tc
	}
	var nonce [challengeLen]byte
	if _, err := io.ReadFull(c, nonce[:]); err != nil {
		c.Close()
		if s.clientTLS == nil {
			return nil, fmt.Errorf("raft dial %s: %w (%v; if the cluster uses TLS, the default, drop --insecure)", address, errHandshake, err)
		}
		return nil, fmt.Errorf("raft dial %s: %w (%v)", address, errHandshake, err)
	}
	if _, err := c.Write(mac(s.key, nonce[:])); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft dial %s: %w", address, err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// Accept implements net.Listener: it returns authenticated connections.
func (s *authStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (s *authStreamLayer) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closed)
		err = s.ln.Close()
	})
	return err
}

// Addr implements net.Listener: the advertised address.
func (s *authStreamLayer) Addr() net.Addr { return s.advertise }
