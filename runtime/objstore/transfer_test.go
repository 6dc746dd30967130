package objstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"troupe/runtime/transport"
)

// owner is a Store served on loopback (TCP and the local Unix socket).
type owner struct {
	store  *Store
	srv    *Server
	served sync.WaitGroup
}

func startOwner(t testing.TB) *owner {
	t.Helper()
	return startOwnerWith(t, testSec)
}

// startOwnerWith is startOwner with the Security sec.
func startOwnerWith(t testing.TB, sec transport.Security) *owner {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{store: NewStore(l.Addr().String())}
	o.srv = NewServer(o.store, sec)
	o.served.Go(func() { o.srv.Serve(l) })
	if ul, err := ListenLocal(l); err == nil {
		o.served.Go(func() { o.srv.Serve(ul) })
	}
	t.Cleanup(o.close)
	return o
}

func (o *owner) close() { o.srv.Close(); o.served.Wait() }

func newClient(t testing.TB, local *Store) *Client {
	c := NewClient(local, testSec)
	t.Cleanup(func() { c.Close() })
	return c
}

func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(i)
	}
	return b
}

// checkGoroutines waits (generously) for the goroutine count to drop back.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left (had %d):\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

func TestTransferLoopback(t *testing.T) { testTransferLoopback(t, "unix") }

// TestTransferLoopbackTCP: the same without the Unix shortcut.
func TestTransferLoopbackTCP(t *testing.T) { testTransferLoopback(t, "tcp", NoUnix()) }

func testTransferLoopback(t *testing.T, network string, opts ...ClientOption) {
	base := runtime.NumGoroutine()
	o := startOwner(t)
	c := NewClient(nil, testSec, opts...)
	ctx := context.Background()
	for i, n := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 5<<20 + 3} {
		want := pattern(n, uint64(i))
		ref := o.store.Put(want)
		got, err := c.Fetch(ctx, ref)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("fetch of %d bytes: %d bytes, %v", n, len(got), err)
		}
		// Fetched twice over the pooled connection.
		if got, err := c.Fetch(ctx, ref); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("second fetch of %d bytes: %v", n, err)
		}
		c.Release(ref)
	}
	c.mu.Lock()
	if cs := c.idle[o.store.Owner()]; len(cs) == 0 || cs[0].nc.LocalAddr().Network() != network {
		t.Errorf("pooled connections %v, want %s", cs, network)
	}
	c.mu.Unlock()
	c.Close() // sends the queued releases
	if o.store.Len() != 0 {
		t.Errorf("after the releases the owner holds %d objects", o.store.Len())
	}
	o.close()
	checkGoroutines(t, base)
}

func TestTransferConcurrent(t *testing.T) {
	o := startOwner(t)
	c := newClient(t, nil)
	refs := make([]Ref, 6)
	for i := range refs {
		refs[i] = o.store.Put(pattern(300<<10+i, uint64(i)))
	}
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 4 {
				i := (g + k) % len(refs)
				got, err := c.Fetch(context.Background(), refs[i])
				if err != nil || !bytes.Equal(got, pattern(300<<10+i, uint64(i))) {
					t.Errorf("fetch %d: %d bytes, %v", i, len(got), err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestTransferErrors(t *testing.T) {
	o := startOwner(t)
	c := newClient(t, nil)
	ctx := context.Background()
	ref := o.store.Put([]byte("abc"))
	o.store.Release(ref.ID, ref.Key)
	_, err := c.Fetch(ctx, ref)
	if !errors.Is(err, ErrFreed) || !strings.Contains(err.Error(), ref.ID.String()) || !strings.Contains(err.Error(), ref.Owner) {
		t.Errorf("fetch of a freed object: %v, want ErrFreed naming object and owner", err)
	}
	unknown := ref
	unknown.ID[0] ^= 0xff
	if _, err := c.Fetch(ctx, unknown); !errors.Is(err, ErrUnknown) {
		t.Errorf("fetch of an unknown object: %v, want ErrUnknown", err)
	}
	// The connection stays usable after error responses.
	live := o.store.Put([]byte("live"))
	if got, err := c.Fetch(ctx, live); err != nil || string(got) != "live" {
		t.Errorf("fetch after errors: %q, %v", got, err)
	}
	// No owner listens there any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := live
	gone.Owner = l.Addr().String()
	l.Close()
	_, err = c.Fetch(ctx, gone)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), gone.Owner) {
		t.Errorf("fetch from a gone owner: %v, want ErrUnreachable naming it", err)
	}
	// A size that disagrees with the owner's is refused.
	wrong := live
	wrong.Size = 99
	if _, err := c.Fetch(ctx, wrong); !errors.Is(err, ErrProtocol) {
		t.Errorf("size mismatch: %v, want ErrProtocol", err)
	}
}

// fakeOwner accepts one connection, authenticated, and runs fn on it.
func fakeOwner(t *testing.T, fn func(nc net.Conn)) string {
	l, err := testSec.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		io.ReadFull(nc, make([]byte, len(preface)+33))
		fn(nc)
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

// TestTransferOwnerDiesMidway: an owner that goes away mid-transfer gives
// an error saying so, at once.
func TestTransferOwnerDiesMidway(t *testing.T) {
	addr := fakeOwner(t, func(nc net.Conn) {
		nc.Write(appendResponse(nil, statusOK, 4<<20, ""))
		nc.Write(make([]byte, 1<<20))
	})
	c := newClient(t, nil)
	_, err := c.Fetch(context.Background(), Ref{Owner: addr, Size: 4 << 20})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "of 4194304") {
		t.Errorf("owner gone midway: %v, want ErrUnreachable with the position", err)
	}
}

// TestTransferCancel: a stalled owner does not hold a fetch past its
// context.
func TestTransferCancel(t *testing.T) {
	release, sent := make(chan struct{}), make(chan struct{})
	addr := fakeOwner(t, func(nc net.Conn) {
		nc.Write(appendResponse(nil, statusOK, 4<<20, ""))
		nc.Write(make([]byte, 1000))
		close(sent)
		<-release
	})
	defer close(release)
	c := newClient(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, Ref{Owner: addr, Size: 4 << 20})
		errc <- err
	}()
	<-sent
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled fetch: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cancelled fetch did not return")
	}
}

// TestTransferStalePooledConn: a pooled connection the owner closed is
// replaced transparently.
func TestTransferStalePooledConn(t *testing.T) {
	o := startOwner(t)
	c := newClient(t, nil)
	ref := o.store.Put([]byte("hello"))
	if _, err := c.Fetch(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	o.srv.mu.Lock()
	for nc := range o.srv.conns {
		nc.Close() // as the idle timeout does
	}
	o.srv.mu.Unlock()
	if got, err := c.Fetch(context.Background(), ref); err != nil || string(got) != "hello" {
		t.Fatalf("fetch over a stale pooled connection: %q, %v", got, err)
	}
}

// TestLocalFetch: a process fetching its own object gets the store's bytes
// without a copy or a connection.
func TestLocalFetch(t *testing.T) {
	o := startOwner(t)
	c := newClient(t, o.store)
	data := pattern(1<<20, 9)
	ref := o.store.Put(data)
	before := ProcessStats()
	got, err := c.Fetch(context.Background(), ref)
	if err != nil || &got[0] != &data[0] {
		t.Fatalf("local fetch: %v (copied: %v)", err, err == nil && &got[0] != &data[0])
	}
	after := ProcessStats()
	if after.LocalFetches != before.LocalFetches+1 || after.FetchedBytes != before.FetchedBytes {
		t.Errorf("stats %+v -> %+v", before, after)
	}
	c.Release(ref)
	if o.store.Len() != 0 {
		t.Errorf("local release did not free")
	}
}

// TestBoundedCopies: fetching a 256 MiB object allocates one buffer of its
// size and nothing else of note: the transfer never holds more than the
// owner's copy and the fetcher's.
func TestBoundedCopies(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("256 MiB transfer (not under -short or the race detector)")
	}
	const size = 256 << 20
	o := startOwner(t)
	c := newClient(t, nil)
	ref := o.store.Put(make([]byte, size))
	// Warm the connection so the measurement holds the transfer only.
	small := o.store.Put([]byte("warm"))
	if _, err := c.Fetch(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	got, err := c.Fetch(context.Background(), ref)
	runtime.ReadMemStats(&m1)
	if err != nil || len(got) != size {
		t.Fatalf("fetch: %d bytes, %v", len(got), err)
	}
	alloc := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("256 MiB fetch allocated %.1f MiB; heap in use %.0f MiB (owner's copy + fetched buffer)", float64(alloc)/(1<<20), float64(m1.HeapInuse)/(1<<20))
	if alloc > size+2*ChunkSize {
		t.Errorf("fetch of %d bytes allocated %d bytes: more than one copy plus two chunks", size, alloc)
	}
	if m1.HeapInuse > 2*size+16<<20 {
		t.Errorf("heap in use %d bytes for a %d-byte object: more than two copies", m1.HeapInuse, size)
	}
}

// testSec is what the tests' servers and clients authenticate with.
var testSec = transport.Security{Token: "objstore-test-token"}
