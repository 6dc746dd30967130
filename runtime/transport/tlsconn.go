package transport

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// crypto/tls writes each record of at most 16 KiB to the socket by itself
// and reads the socket about a record at a time, so a bulk transfer (an
// object fetch) costs two system calls per 16 KiB, most of its CPU on a
// fast link. A TLS connection of this package therefore sits on a
// batchConn: the records of one Write are gathered and written to the
// socket together, and reads take what the socket has, up to
// tlsReadBuffer (64 KiB: four full records), in one call.
//
// Those socket reads go through a spinReader (spin.go): a connection
// waiting for a reply polls the socket briefly before it parks, as a
// plaintext one of runtime/wire does; without it a synchronous call over
// TLS paid a thread wake-up on every reply.

// tlsReadBuffer is how much one read of a TLS connection's socket takes.
const tlsReadBuffer = 64 << 10

// tlsWriteBatch is how many bytes of records a Write gathers before it
// writes them.
const tlsWriteBatch = 1 << 20

// batchConn is the socket beneath a TLS connection.
type batchConn struct {
	net.Conn
	r    *bufio.Reader
	spin *spinReader // beneath r
	left int         // bytes of the current TLS record Read has yet to return

	mu       sync.Mutex // guards the following
	batching bool       // inside tlsConn.Write: gather records
	buf      []byte
}

// tlsBatching turns batchConn's gathering and buffering on (benchmarks
// compare).
var tlsBatching = true

// newBatchConn wraps nc; its reads poll for at most spin (0: not at all).
func newBatchConn(nc net.Conn, spin time.Duration) *batchConn {
	b := &batchConn{Conn: nc}
	if tlsBatching {
		b.spin = newSpinReader(nc, spin)
		b.r = bufio.NewReaderSize(b.spin, tlsReadBuffer)
	}
	return b
}

// Read returns bytes of one TLS record at most, so crypto/tls never takes
// what follows a record into its own buffer: sealed bulk frames (bulk.go)
// after it stay in r.
func (b *batchConn) Read(p []byte) (int, error) {
	if b.r == nil {
		return b.Conn.Read(p)
	}
	if b.left == 0 {
		h, err := b.r.Peek(recordHeaderLen)
		if len(h) < recordHeaderLen {
			if err == io.EOF && len(h) > 0 {
				// The peer closed inside a header (a plaintext peer's
				// short answer): crypto/tls names what it got.
				return b.r.Read(p[:min(len(p), len(h))])
			}
			// A deadline: the partial header stays for the next Read.
			return 0, err
		}
		b.left = recordHeaderLen + int(binary.BigEndian.Uint16(h[3:5]))
	}
	n, err := b.r.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

// recordHeaderLen is a TLS record header's size: type, version, length.
const recordHeaderLen = 5

// Write gathers records while a tlsConn.Write is in progress, and writes
// anything else (handshake messages, alerts, key updates) at once.
func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.batching {
		return b.Conn.Write(p)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= tlsWriteBatch {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (b *batchConn) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
	if cap(b.buf) > tlsWriteBatch+64<<10 {
		b.buf = nil
	}
	return err
}

// tlsConn is a TLS connection over a batchConn.
type tlsConn struct {
	*tls.Conn
	raw    *batchConn
	client bool       // the dialling side (bulk frame keys)
	wmu    sync.Mutex // one Write at a time gathers
	// pending is input a Probe read, returned first by Read.
	pending []byte
}

// Write encrypts p into records and writes them to the socket together.
func (c *tlsConn) Write(p []byte) (int, error) {
	if len(p) <= 16<<10 || c.raw.r == nil {
		return c.Conn.Write(p) // one record: nothing to gather
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.raw.mu.Lock()
	c.raw.batching = true
	c.raw.mu.Unlock()
	n, err := c.Conn.Write(p)
	c.raw.mu.Lock()
	c.raw.batching = false
	ferr := c.raw.flushLocked()
	c.raw.mu.Unlock()
	if err == nil && ferr != nil {
		return 0, ferr
	}
	return n, err
}

// NetConn returns the socket beneath, for callers that probe it.
func (c *tlsConn) NetConn() net.Conn { return c.raw.Conn }

// ConnectionState is the TLS state of the connection.
func (c *tlsConn) ConnectionState() tls.ConnectionState { return c.Conn.ConnectionState() }

// Read returns input a Probe took first, then reads the connection.
func (c *tlsConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// probeWait bounds how long Probe waits for the rest of a record whose
// start is already there.
const probeWait = time.Millisecond

// Probe reports, without blocking and without losing input, whether the
// peer has closed a connection nobody is reading: nil means it looks open.
// On TLS a closing peer's last record (close_notify) sits before the end
// of the stream, and TLS 1.3 servers send tickets after the handshake, so
// a look at the socket cannot tell; when input is there, Probe reads it
// through TLS (for at most probeWait) and keeps any data for Read. It
// must not run concurrently with Read.
func (c *tlsConn) Probe() error {
	if len(c.pending) > 0 {
		return nil
	}
	if c.raw.r == nil || c.raw.r.Buffered() == 0 {
		n, err := peekSocket(c.raw.Conn)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // nothing there: open
		}
	}
	c.Conn.SetReadDeadline(time.Now().Add(probeWait))
	var b [512]byte
	n, err := c.Conn.Read(b[:])
	c.Conn.SetReadDeadline(time.Time{})
	c.pending = append(c.pending, b[:n]...)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil
	}
	return err
}

// peekSocket reports how many bytes (0 or 1) wait in nc's socket, without
// taking them or waiting; io.EOF when the peer closed it.
func peekSocket(nc net.Conn) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, nil
	}
	var n int
	var perr error
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		n, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait
	}); err != nil {
		return 0, err
	}
	switch {
	case perr == syscall.EAGAIN || perr == syscall.EINTR:
		return 0, nil
	case perr != nil:
		return 0, perr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
