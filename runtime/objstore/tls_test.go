package objstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"troupe/runtime/transport"
	"troupe/runtime/transport/transporttest"
)

// tlsOwner is an owner serving over TCP with TLS, and a client of it.
func tlsOwner(t *testing.T) (*owner, transport.Security) {
	t.Helper()
	pki, err := transporttest.New()
	if err != nil {
		t.Fatal(err)
	}
	o := startOwnerWith(t, transport.Security{Token: testSec.Token, Server: pki.Server()})
	return o, transport.Security{Token: testSec.Token, Client: pki.Client()}
}

// Over TLS, objects come in sealed bulk frames: every size against the
// chunk (none, a byte, exact multiples, a byte over) arrives intact, one
// after another on pooled connections, with releases between.
func TestFetchTLS(t *testing.T) {
	o, sec := tlsOwner(t)
	c := NewClient(nil, sec, NoUnix())
	defer c.Close()
	ctx := context.Background()
	for i, n := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 3*ChunkSize + 5, 100} {
		want := pattern(n, uint64(i))
		ref := o.store.Put(want)
		for range 2 {
			got, err := c.Fetch(ctx, ref)
			if err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%d bytes: the object differs", n)
			}
		}
		c.Release(ref)
	}
}

// flipProxy forwards TCP connections to target, flipping one bit of the
// byte at offset at of what the target sends back.
func flipProxy(t *testing.T, target string, at int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				return
			}
			wg.Go(func() { io.Copy(out, in); out.Close() })
			wg.Go(func() {
				buf := make([]byte, 32<<10)
				var off int64
				for {
					n, err := out.Read(buf)
					if at >= off && at < off+int64(n) {
						buf[at-off] ^= 0x04
					}
					off += int64(n)
					if _, werr := in.Write(buf[:n]); werr != nil || err != nil {
						in.Close()
						return
					}
				}
			})
		}
	})
	return l.Addr().String()
}

// A sealed frame altered on the way fails the fetch with ErrProtocol; the
// altered bytes are never returned.
func TestFetchTLSAltered(t *testing.T) {
	o, sec := tlsOwner(t)
	want := pattern(4*ChunkSize, 9)
	ref := o.store.Put(want)
	ref.Owner = flipProxy(t, ref.Owner, 2*ChunkSize+12345) // past the handshake, inside the frames
	c := NewClient(nil, sec, NoUnix())
	defer c.Close()
	got, err := c.Fetch(context.Background(), ref)
	if !errors.Is(err, ErrProtocol) || !errors.Is(err, transport.ErrBulkFrame) || got != nil {
		t.Fatalf("Fetch through a corrupting proxy = %d bytes, %v; want ErrProtocol and transport.ErrBulkFrame", len(got), err)
	}
}
