package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// Errors of a connection whose two sides disagree about TLS, matched with
// errors.Is: the common mistakes are a plaintext (--insecure) node and a
// plaintext client of a TLS cluster.
var (
	// ErrNotTLS: a TLS handshake met a peer that does not speak TLS.
	ErrNotTLS = errors.New("the node does not speak TLS")
	// ErrTLSRequired: the peer closed a plaintext connection before it
	// sent a byte, which is what a TLS node does with a plaintext client.
	ErrTLSRequired = errors.New("the cluster uses TLS (the default)")
)

// HandshakeError explains a failed TLS handshake with the node at addr. It
// wraps err, and ErrNotTLS when the peer answered in plaintext.
func HandshakeError(addr string, err error) error {
	var rec tls.RecordHeaderError
	if errors.As(err, &rec) {
		return fmt.Errorf("TLS handshake with %s: %w (started with --insecure?): connect with --insecure, or restart the cluster without it: %w", addr, ErrNotTLS, err)
	}
	var inv x509.CertificateInvalidError
	if errors.As(err, &inv) && inv.Reason == x509.Expired {
		return fmt.Errorf("TLS handshake with %s: a certificate has expired: renew it (troupe tls cert create, or delete the node's <data-dir>/tls/node.pem to get a new one from the cluster): %w", addr, err)
	}
	return fmt.Errorf("TLS handshake with %s: %w", addr, err)
}

// connCause holds why the latest connection attempt of one ClientConn
// failed, when its handshake says: gRPC fails the calls waiting on such a
// connection with an Unavailable status that keeps only the text, and
// causeInterceptor puts the cause back.
type connCause struct {
	mu  sync.Mutex
	err error
}

func (c *connCause) set(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

func (c *connCause) get() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// tlsCreds is gRPC's TLS credentials with handshake errors that say what
// to do (HandshakeError), kept for causeInterceptor.
type tlsCreds struct {
	credentials.TransportCredentials
	cause *connCause
}

func (c tlsCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		err = HandshakeError(raw.RemoteAddr().String(), err)
		c.cause.set(err)
		return nil, nil, err
	}
	c.cause.set(nil)
	return conn, info, nil
}

func (c tlsCreds) Clone() credentials.TransportCredentials {
	return tlsCreds{c.TransportCredentials.Clone(), c.cause}
}

// plainCreds is gRPC's plaintext credentials; its connections note a peer
// that closes them without a word (silentConn).
type plainCreds struct {
	credentials.TransportCredentials
	cause *connCause
}

func (c plainCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, err
	}
	c.cause.set(nil)
	return &silentConn{Conn: conn, cause: c.cause}, info, nil
}

func (c plainCreds) Clone() credentials.TransportCredentials {
	return plainCreds{c.TransportCredentials.Clone(), c.cause}
}

// silentConn is a plaintext client connection that records ErrTLSRequired
// when the peer ends it before sending anything: a gRPC server speaks
// first (its settings frame), a TLS server reading a plaintext client
// closes.
type silentConn struct {
	net.Conn
	cause *connCause
	heard atomic.Bool
}

func (c *silentConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	switch {
	case n > 0:
		c.heard.Store(true)
	case err != nil && !c.heard.Load() && !errors.Is(err, net.ErrClosed):
		c.cause.set(fmt.Errorf("%s closed a plaintext connection: %w; drop --insecure", c.RemoteAddr(), ErrTLSRequired))
	}
	return n, err
}

// causeInterceptor returns the calls that fail Unavailable while the
// connection's latest attempt failed in its handshake as a *ConnError
// with that cause.
func causeInterceptor(cause *connCause) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || status.Code(err) != codes.Unavailable {
			return err
		}
		c := cause.get()
		if c == nil {
			return err
		}
		st := status.Convert(err)
		if errors.Is(c, ErrTLSRequired) { // gRPC's text names no reason
			st = status.New(codes.Unavailable, c.Error()+": "+st.Message())
		}
		return &ConnError{st: st, Cause: c}
	}
}

// ConnError is a call that failed because its connection could not be
// made: an Unavailable gRPC status (status.Code sees it) that unwraps to
// the connection's error, so errors.Is and errors.As see ErrNotTLS,
// ErrTLSRequired and the TLS and certificate errors beneath.
type ConnError struct {
	st    *status.Status
	Cause error
}

func (e *ConnError) Error() string { return e.st.Err().Error() }

// GRPCStatus lets status.Code and status.FromError see the status.
func (e *ConnError) GRPCStatus() *status.Status { return e.st }

func (e *ConnError) Unwrap() error { return e.Cause }
