package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
)

// conn is one framed connection: a writer goroutine that sends whatever
// frames have queued since its last write in one write, and a reader loop.
// Queuing a frame costs no system call, so a caller that pipelines many
// calls, or many actors replying at once, share writes.
type conn struct {
	nc       net.Conn
	maxFrame int

	mu      sync.Mutex
	drained *sync.Cond // signalled when the writer takes the buffer
	buf     []byte     // frames waiting to be written
	spare   []byte
	woken   bool  // the writer has been signalled and not yet taken buf
	err     error // first write or read error; the connection is dead

	wake      chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

// maxQueued bounds the bytes queued for writing: a sender past it waits, so
// a slow peer pushes back instead of growing memory without end.
const maxQueued = 16 << 20

func newConn(nc net.Conn, maxFrame int) *conn {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	c := &conn{nc: nc, maxFrame: maxFrame, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	c.drained = sync.NewCond(&c.mu)
	go c.writeLoop()
	return c
}

// send queues f for the writer goroutine.
func (c *conn) send(f *frame) error {
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
	wake := !c.woken
	c.woken = true
	c.mu.Unlock()
	if wake {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	return nil
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
		out := c.buf
		c.buf = c.spare[:0]
		c.woken = false
		c.drained.Broadcast()
		c.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		if _, err := c.nc.Write(out); err != nil {
			c.fail(fmt.Errorf("%w: write: %v", ErrClosed, err))
			return
		}
		c.mu.Lock()
		if cap(out) <= 1<<20 { // keep ordinary buffers, drop huge ones
			c.spare = out[:0]
		}
		c.mu.Unlock()
	}
}

// readLoop decodes frames until the connection fails, handing each to
// handle. It returns the error that ended it.
func (c *conn) readLoop(handle func(*frame) error) error {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return c.fail(fmt.Errorf("%w: read: %v", ErrClosed, err))
		}
		n := int(binary.LittleEndian.Uint32(hdr[:]))
		if n > c.maxFrame {
			return c.fail(fmt.Errorf("%w: incoming frame of %d bytes, limit %d", ErrFrameTooLarge, n, c.maxFrame))
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return c.fail(fmt.Errorf("%w: read: %v", ErrClosed, err))
		}
		f, err := decodeFrame(body)
		if err != nil {
			return c.fail(err)
		}
		if err := handle(&f); err != nil {
			return c.fail(err)
		}
	}
}

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
