package objstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"troupe/runtime/transport"
)

// maxIdlePerOwner bounds the idle connections a Client keeps per owner.
const maxIdlePerOwner = 4

// DialTimeout bounds connecting to an owner.
const DialTimeout = 10 * time.Second

// Client fetches objects from their owners and gives references up. One
// Client serves a whole process; it is safe for concurrent use. It reaches
// an owner on the same host through its Unix socket (see ListenLocal).
type Client struct {
	local  *Store // this process's store, if any: its objects are not fetched over TCP
	sec    transport.Security
	noUnix bool // fetch over TCP from owners on this host too (NoUnix)

	mu      sync.Mutex
	idle    map[string][]*clientConn
	closing bool // Close began
	closed  bool // no more connections

	relMu   sync.Mutex
	relQ    []Ref
	relWake chan struct{}
	done    chan struct{}
	relDone chan struct{}
}

// clientConn is one connection to an owner.
type clientConn struct {
	nc   net.Conn
	br   *bufio.Reader
	bulk *transport.Bulk // on TLS: objects come in sealed bulk frames
}

// A ClientOption changes how a Client connects.
type ClientOption func(*Client)

// NoUnix makes the client fetch over TCP from owners on this host too
// (LocalEnv=0): for measuring and troubleshooting.
func NoUnix() ClientOption { return func(c *Client) { c.noUnix = true } }

// NewClient returns a client that authenticates to owners with sec.
// local, when not nil, is this process's own store: fetches and releases
// of its objects skip the network.
func NewClient(local *Store, sec transport.Security, opts ...ClientOption) *Client {
	c := &Client{local: local, sec: sec, idle: map[string][]*clientConn{}, relWake: make(chan struct{}, 1),
		done: make(chan struct{}), relDone: make(chan struct{})}
	for _, o := range opts {
		o(c)
	}
	go c.releaseLoop()
	return c
}

// Close closes idle connections and stops the release loop after a last
// attempt (bounded by a few seconds) to send the releases queued.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return nil
	}
	c.closing = true
	c.mu.Unlock()
	close(c.done)
	<-c.relDone // its last flush may still dial
	c.mu.Lock()
	c.closed = true
	idle := c.idle
	c.idle = map[string][]*clientConn{}
	c.mu.Unlock()
	for _, cs := range idle {
		for _, cc := range cs {
			cc.nc.Close()
		}
	}
	return nil
}

// IsLocal reports whether ref's owner is the store this client reads in
// place: Fetch then returns the store's own slice, which is read only and
// shared, rather than a fresh buffer.
func (c *Client) IsLocal(ref Ref) bool { return c.local != nil && ref.Owner == c.local.Owner() }

// Fetch returns the object's bytes: the owner streams them in chunks into
// one buffer of the object's size. Errors wrap ErrFreed, ErrUnknown,
// ErrUnreachable, ErrProtocol or ctx's error, and name the object and owner.
func (c *Client) Fetch(ctx context.Context, ref Ref) ([]byte, error) {
	if ref.Size < 0 || ref.Size > MaxObjectSize {
		return nil, fmt.Errorf("object %s: %w: size %d", ref.ID, ErrBadRef, ref.Size)
	}
	if c.IsLocal(ref) {
		data, err := c.local.Get(ref.ID, ref.Key)
		if err == nil {
			global.localFetches.Add(1)
		}
		return data, err
	}
	for attempt := 0; ; attempt++ {
		cc, reused, err := c.conn(ctx, ref.Owner)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("object %s from %s: connect: %w", ref.ID, ref.Owner, ctx.Err())
			}
			return nil, fmt.Errorf("object %s: %w: %s: %w", ref.ID, ErrUnreachable, ref.Owner, err)
		}
		data, keep, stale, err := c.fetchOn(ctx, cc, ref)
		if keep {
			c.putIdle(ref.Owner, cc)
		} else {
			cc.nc.Close()
		}
		// A pooled connection the owner closed while idle fails before any
		// response: dial once more.
		if stale && reused && attempt == 0 && ctx.Err() == nil {
			continue
		}
		return data, err
	}
}

// fetchOn runs one fetch on cc. keep says cc is still in step for reuse;
// stale says it failed before any response byte arrived.
func (c *Client) fetchOn(ctx context.Context, cc *clientConn, ref Ref) (data []byte, keep, stale bool, err error) {
	// Cancellation closes the connection: sticky, unlike a deadline that
	// the next chunk's deadline would overwrite.
	stop := context.AfterFunc(ctx, func() { cc.nc.Close() })
	defer stop()
	fail := func(what string, e error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("object %s from %s: %s: %w", ref.ID, ref.Owner, what, ctx.Err())
		}
		if errors.Is(e, ErrProtocol) {
			return fmt.Errorf("object %s from %s: %s: %w", ref.ID, ref.Owner, what, e)
		}
		return fmt.Errorf("object %s: %w: %s: %s: %v", ref.ID, ErrUnreachable, ref.Owner, what, e)
	}
	cc.nc.SetWriteDeadline(time.Now().Add(IOTimeout))
	if _, err := cc.nc.Write(appendRequest(nil, opFetch, []item{{ref.ID, ref.Key}})); err != nil {
		return nil, false, true, fail("request", err)
	}
	cc.nc.SetReadDeadline(time.Now().Add(IOTimeout))
	resp, err := readResponse(cc.br)
	if err != nil {
		// Only a failure on the first byte can be a pooled connection the
		// owner closed while idle.
		return nil, false, !errors.Is(err, ErrProtocol), fail("response", err)
	}
	if resp.status != statusOK {
		return nil, true, false, errOf(ref, resp)
	}
	if int64(resp.size) != ref.Size {
		return nil, false, false, fail("response", fmt.Errorf("%w: %d bytes, the reference says %d", ErrProtocol, resp.size, ref.Size))
	}
	data = make([]byte, resp.size)
	for off := 0; off < len(data); {
		end := min(off+ChunkSize, len(data))
		cc.nc.SetReadDeadline(time.Now().Add(IOTimeout))
		var err error
		if cc.bulk != nil {
			if err = cc.bulk.ReadFull(data[off:end]); errors.Is(err, transport.ErrBulkFrame) {
				err = fmt.Errorf("%w: %w", ErrProtocol, err)
			}
		} else {
			_, err = io.ReadFull(cc.br, data[off:end])
		}
		if err != nil {
			return nil, false, false, fail(fmt.Sprintf("at byte %d of %d", off, len(data)), err)
		}
		off = end
	}
	global.fetched.Add(1)
	global.fetchedBytes.Add(int64(len(data)))
	return data, true, false, nil
}

// conn returns an idle connection to owner or dials one; reused reports
// which.
func (c *Client) conn(ctx context.Context, owner string) (cc *clientConn, reused bool, err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, errors.New("client closed")
	}
	if cs := c.idle[owner]; len(cs) > 0 {
		cc = cs[len(cs)-1]
		c.idle[owner] = cs[:len(cs)-1]
		c.mu.Unlock()
		return cc, true, nil
	}
	c.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	nc, err := dial(dctx, c.sec, c.noUnix, owner)
	if err != nil {
		return nil, false, err
	}
	bulk, err := transport.NewBulk(nc)
	if err != nil {
		nc.Close()
		return nil, false, err
	}
	pre := preface
	if bulk != nil {
		pre = prefaceSealed
	}
	nc.SetWriteDeadline(time.Now().Add(IOTimeout))
	if _, err := nc.Write([]byte(pre)); err != nil {
		nc.Close()
		return nil, false, err
	}
	// Reads of whole chunks bypass the buffer; it only serves headers.
	return &clientConn{nc: nc, br: bufio.NewReaderSize(nc, 4096), bulk: bulk}, false, nil
}

// putIdle keeps cc for reuse, or closes it.
func (c *Client) putIdle(owner string, cc *clientConn) {
	c.mu.Lock()
	if !c.closed && len(c.idle[owner]) < maxIdlePerOwner {
		c.idle[owner] = append(c.idle[owner], cc)
		cc = nil
	}
	c.mu.Unlock()
	if cc != nil {
		cc.nc.Close()
	}
}

// Release gives up one reference to an object. It never blocks: a release
// to another process is queued and sent in a batch by a background loop
// (a lost owner has freed everything anyway).
func (c *Client) Release(ref Ref) {
	if c.local != nil && ref.Owner == c.local.Owner() {
		c.local.Release(ref.ID, ref.Key)
		return
	}
	c.relMu.Lock()
	c.relQ = append(c.relQ, ref)
	c.relMu.Unlock()
	select {
	case c.relWake <- struct{}{}:
	default:
	}
}

// releaseLoop sends queued releases, grouped per owner.
func (c *Client) releaseLoop() {
	defer close(c.relDone)
	for {
		select {
		case <-c.relWake:
			c.sendReleases(context.Background())
		case <-c.done:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c.sendReleases(ctx)
			cancel()
			return
		}
	}
}

func (c *Client) sendReleases(ctx context.Context) {
	c.relMu.Lock()
	q := c.relQ
	c.relQ = nil
	c.relMu.Unlock()
	byOwner := map[string][]item{}
	for _, r := range q {
		byOwner[r.Owner] = append(byOwner[r.Owner], item{r.ID, r.Key})
	}
	for owner, items := range byOwner {
		for len(items) > 0 {
			n := min(len(items), maxReleaseBatch)
			if err := c.releaseOn(ctx, owner, items[:n]); err != nil {
				break // the owner is gone, and its objects with it
			}
			global.releases.Add(int64(n))
			items = items[n:]
		}
	}
}

// releaseOn sends one release request to owner and waits for its answer.
func (c *Client) releaseOn(ctx context.Context, owner string, items []item) error {
	for attempt := 0; ; attempt++ {
		cc, reused, err := c.conn(ctx, owner)
		if err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() { cc.nc.Close() })
		cc.nc.SetWriteDeadline(time.Now().Add(IOTimeout))
		_, err = cc.nc.Write(appendRequest(nil, opRelease, items))
		var resp response
		if err == nil {
			cc.nc.SetReadDeadline(time.Now().Add(IOTimeout))
			resp, err = readResponse(cc.br)
		}
		stop()
		if err == nil && resp.status == statusOK {
			c.putIdle(owner, cc)
			return nil
		}
		cc.nc.Close()
		if err == nil {
			return fmt.Errorf("release at %s: %s", owner, resp.msg)
		}
		if !(reused && attempt == 0 && ctx.Err() == nil) {
			return err
		}
	}
}
