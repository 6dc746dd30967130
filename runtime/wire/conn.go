package wire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
)

// conn is one framed connection: a coalescing writer and a reader loop.
type conn struct {
	nc       net.Conn
	maxFrame int

	mu       sync.Mutex
	buf      []byte // frames waiting to be written
	spare    []byte
	flushing bool
	err      error // first write or read error; the connection is dead

	closeOnce sync.Once
	closed    chan struct{}
}

func newConn(nc net.Conn, maxFrame int) *conn {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return &conn{nc: nc, maxFrame: maxFrame, closed: make(chan struct{})}
}

// send queues f and writes it, together with whatever other goroutines
// queue meanwhile: the goroutine that finds no write in progress becomes
// the flusher and writes until the buffer is empty, so pipelined frames
// leave in large writes and a lone frame leaves at once.
func (c *conn) send(f *frame) error {
	if n := len(f.data) + len(f.actor) + len(f.method) + 32; n > c.maxFrame {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, c.maxFrame)
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.buf = appendFrame(c.buf, f)
	if c.flushing {
		c.mu.Unlock()
		return nil
	}
	c.flushing = true
	var err error
	for len(c.buf) > 0 {
		out := c.buf
		c.buf = c.spare[:0]
		c.mu.Unlock()
		_, err = c.nc.Write(out)
		c.mu.Lock()
		if cap(out) <= 1<<20 { // keep ordinary buffers, drop huge ones
			c.spare = out[:0]
		} else {
			c.spare = nil
		}
		if err != nil {
			if c.err == nil {
				c.err = fmt.Errorf("%w: write: %v", ErrClosed, err)
			}
			c.buf = nil
			break
		}
	}
	c.flushing = false
	c.mu.Unlock()
	if err != nil {
		c.close(err)
	}
	return nil
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
