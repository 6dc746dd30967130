package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"troupe/runtime/transport"
)

// conn is one framed connection with a reader loop and flush-combining
// writes.
//
// A frame is appended to a buffer under a lock, and whoever writes takes the
// whole buffer, so frames queued during a write go out together in the next
// one. Who writes depends on the sender's hint: a sender that expects no
// other frames soon (a lone synchronous call, the reply to the only call in
// flight) writes itself when no write is in progress, saving the wake-up of
// the writer goroutine (on a loaded machine a goroutine hand-off costs a
// futex wake of another thread, more than the write); a sender in a burst
// (pipelined calls, replies to a batch of calls) only queues, and the
// writer goroutine sends everything queued in one write while the sender
// goes on. A sender that writes itself hands what was queued meanwhile to
// the writer goroutine rather than writing again, so it never waits for
// other senders' frames.
type conn struct {
	nc       net.Conn
	maxFrame int
	spin     time.Duration // the longest poll of a read (transport.Security.ReadSpin)

	mu      sync.Mutex
	drained *sync.Cond // signalled when a writer takes the buffer
	buf     []byte     // frames waiting to be written
	spare   []byte     // a written buffer kept for reuse
	writing bool       // a write is in progress (inline or the writer goroutine's)
	woken   bool       // the writer goroutine is signalled or running
	err     error      // first write or read error; the connection is dead

	wake      chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

// maxQueued bounds the bytes queued for writing: a sender past it waits, so
// a slow peer pushes back instead of growing memory without end.
const maxQueued = 16 << 20

// maxSpare is the largest buffer kept for reuse after a write.
const maxSpare = 1 << 20

func newConn(nc net.Conn, maxFrame int, spin time.Duration) *conn {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	c := &conn{nc: nc, maxFrame: maxFrame, spin: spin, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	c.drained = sync.NewCond(&c.mu)
	go c.writeLoop()
	return c
}

// send queues f. With direct set and no write in progress, the caller writes
// the queue itself before returning; otherwise the writer goroutine does.
func (c *conn) send(f *frame, direct bool) error {
	if n := len(f.data) + len(f.actor) + len(f.method) + 32; n > c.maxFrame {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, c.maxFrame)
	}
	c.mu.Lock()
	for len(c.buf) > maxQueued && c.err == nil {
		c.drained.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.buf = appendFrame(c.buf, f)
	if c.writing {
		// The writer in progress looks at the queue when it is done.
		c.mu.Unlock()
		return nil
	}
	if direct {
		c.flushInline() // unlocks
		return nil
	}
	c.signalLocked()
	c.mu.Unlock()
	return nil
}

// signalLocked makes sure the writer goroutine will look at the queue.
func (c *conn) signalLocked() {
	if c.woken {
		return
	}
	c.woken = true
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take hands the queue to a writer. c.mu is held.
func (c *conn) take() []byte {
	out := c.buf
	c.buf, c.spare = c.spare[:0], nil
	c.writing = true
	c.drained.Broadcast()
	return out
}

// written ends a write of out. c.mu is held.
func (c *conn) written(out []byte) {
	c.writing = false
	if cap(out) <= maxSpare && c.spare == nil {
		c.spare = out[:0]
	}
}

// flushInline writes the queue on the calling goroutine. c.mu is held on
// entry and released on return. Frames queued during the write go to the
// writer goroutine.
func (c *conn) flushInline() {
	out := c.take()
	c.mu.Unlock()
	_, err := c.nc.Write(out)
	c.mu.Lock()
	c.written(out)
	if err != nil {
		c.mu.Unlock()
		c.fail(fmt.Errorf("%w: write: %v", ErrClosed, err))
		return
	}
	if len(c.buf) > 0 {
		c.signalLocked()
	}
	c.mu.Unlock()
}

// writeLoop writes queued frames until the connection closes.
func (c *conn) writeLoop() {
	for {
		select {
		case <-c.wake:
		case <-c.closed:
			return
		}
		c.mu.Lock()
		for len(c.buf) > 0 && !c.writing && c.err == nil {
			out := c.take()
			c.mu.Unlock()
			_, err := c.nc.Write(out)
			c.mu.Lock()
			c.written(out)
			if err != nil {
				c.mu.Unlock()
				c.fail(fmt.Errorf("%w: write: %v", ErrClosed, err))
				return
			}
		}
		// Nothing queued, or an inline writer is busy and signals again
		// if frames are left when it is done.
		c.woken = false
		c.mu.Unlock()
	}
}

// frameReader reads a connection's frames. One goroutine at a time uses it;
// a server passes it on to another goroutine when the reading one is kept
// by a long call (see serverConn), a client to whichever goroutine reads
// replies (see Client).
//
// A frame's byte slices alias its body, which outlives the call (a reply's
// payload becomes the caller's result), so each body is fresh memory: small
// bodies are cut from a shared slab, one allocation for many frames.
//
// A read interrupted by a read deadline (errInterrupted) leaves the frame
// half read; the next call of next goes on where it stopped.
type frameReader struct {
	c     *conn
	br    *bufio.Reader
	slab  []byte
	names interner
	hdr   [4]byte
	hdrN  int    // header bytes read of the frame in progress
	body  []byte // its body, allocated once the header is complete
	bodyN int    // body bytes read
}

// errInterrupted is returned by frameReader.next when a read deadline
// interrupted it; the connection is fine.
var errInterrupted = errors.New("wire: read interrupted")

func (c *conn) newFrameReader() *frameReader {
	return &frameReader{c: c, br: bufio.NewReaderSize(transport.NewSpinReader(c.nc, c.spin), 64<<10)}
}

// next reads one frame, and reports whether more input is already
// buffered. An error other than errInterrupted ends the connection.
func (r *frameReader) next() (frame, bool, error) {
	c := r.c
	if r.hdrN < len(r.hdr) {
		for r.hdrN < len(r.hdr) {
			n, err := r.br.Read(r.hdr[r.hdrN:])
			r.hdrN += n
			if err != nil && r.hdrN < len(r.hdr) {
				return frame{}, false, r.readErr(err)
			}
		}
		n := int(binary.LittleEndian.Uint32(r.hdr[:]))
		if n > c.maxFrame {
			return frame{}, false, c.fail(fmt.Errorf("%w: incoming frame of %d bytes, limit %d", ErrFrameTooLarge, n, c.maxFrame))
		}
		if n <= maxSlabbed {
			if len(r.slab) < n {
				r.slab = make([]byte, slabSize)
			}
			r.body, r.slab = r.slab[:n:n], r.slab[n:]
		} else {
			r.body = make([]byte, n)
		}
		r.bodyN = 0
	}
	for r.bodyN < len(r.body) {
		n, err := r.br.Read(r.body[r.bodyN:])
		r.bodyN += n
		if err != nil && r.bodyN < len(r.body) {
			return frame{}, false, r.readErr(err)
		}
	}
	body := r.body
	r.body, r.hdrN, r.bodyN = nil, 0, 0
	f, err := decodeFrame(body, &r.names)
	if err != nil {
		return frame{}, false, c.fail(err)
	}
	return f, r.br.Buffered() > 0, nil
}

// peekArgSource looks at the next frame without reading it: when it is
// buffered whole and is a call whose argument is the result of an earlier
// call, it returns that call's ID, else 0. It never waits for input.
func (r *frameReader) peekArgSource() uint64 {
	if r.hdrN != 0 || r.br.Buffered() < 4 {
		return 0
	}
	hdr, _ := r.br.Peek(4)
	n := int(binary.LittleEndian.Uint32(hdr))
	if n > r.c.maxFrame || r.br.Buffered() < 4+n {
		return 0
	}
	b, err := r.br.Peek(4 + n)
	if err != nil {
		return 0
	}
	return argSource(b[4:])
}

// readErr turns a read error into errInterrupted (a deadline passed) or
// the connection's end.
func (r *frameReader) readErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errInterrupted
	}
	if err == io.EOF && r.hdrN > 0 {
		err = io.ErrUnexpectedEOF
	}
	return r.c.fail(fmt.Errorf("%w: read: %v", ErrClosed, err))
}

// Frame bodies up to maxSlabbed bytes share slabs of slabSize bytes. A
// slab stays alive while any frame cut from it does, so both are small.
const (
	maxSlabbed = 512
	slabSize   = 8 << 10
)

// fail records err as the connection's end and closes it.
func (c *conn) fail(err error) error {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	err = c.err
	c.mu.Unlock()
	c.close(err)
	return err
}

func (c *conn) close(err error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.buf = nil
		c.drained.Broadcast()
		c.mu.Unlock()
		c.nc.Close()
		close(c.closed)
	})
}

// Err returns why the connection ended, or nil while it is open.
func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// probe checks, without blocking or consuming input, whether the peer has
// closed a connection nobody reads: nil means it looks open (or cannot be
// probed), an error says how it ended.
func (c *conn) probe() error {
	if p, ok := c.nc.(interface{ Probe() error }); ok {
		// TLS (transport): it reads what is there through TLS.
		if err := p.Probe(); err != nil {
			return fmt.Errorf("%w: probe: %v", ErrClosed, err)
		}
		return nil
	}
	nc := c.nc
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var n int
	var perr error
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		n, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // never wait
	}); err != nil {
		return fmt.Errorf("%w: probe: %v", ErrClosed, err)
	}
	switch {
	case perr == syscall.EAGAIN || perr == syscall.EINTR:
		return nil
	case perr != nil:
		return fmt.Errorf("%w: probe: %v", ErrClosed, perr)
	case n == 0:
		return fmt.Errorf("%w: peer closed the connection", ErrClosed)
	}
	return nil
}
