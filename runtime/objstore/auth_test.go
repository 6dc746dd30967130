package objstore

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"troupe/runtime/transport"
)

// TestServerRefusesUnauthenticated: an object store, on TCP and on its
// Unix socket, serves nothing to a peer without the token or with a wrong
// one: raw fetch and release requests for a real object's ID and key get
// no byte back and free nothing, and clients without the token or with a
// wrong one fail with ErrUnauthenticated; the object is then still there
// for a client with the token.
func TestServerRefusesUnauthenticated(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	o := startOwner(t)
	secret := []byte("the secret object bytes")
	ref := o.store.Put(secret)
	path, err := transport.LocalPath(localKind, ref.Owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no local socket: %v", err)
	}
	before := ProcessStats()
	it := []item{{ref.ID, ref.Key}}
	raw := append([]byte(preface), appendRequest(nil, opFetch, it)...)
	raw = append(raw, appendRequest(nil, opRelease, it)...)
	ctx := context.Background()
	for _, network := range []string{"tcp", "unix"} {
		target := ref.Owner
		if network == "unix" {
			target = path
		}
		nc, err := net.Dial(network, target)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(raw)
		if b, err := io.ReadAll(nc); len(b) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: raw requests got %q, %v; want the connection closed with nothing sent", network, b, err)
		}
		nc.Close()
		for _, sec := range []transport.Security{{}, {Token: "wrong"}} {
			if _, err := sec.Dial(ctx, nil, network, target); !errors.Is(err, transport.ErrUnauthenticated) {
				t.Errorf("%s with token %q: %v, want ErrUnauthenticated", network, sec.Token, err)
			}
		}
	}
	for _, sec := range []transport.Security{{}, {Token: "wrong"}} {
		c := NewClient(nil, sec)
		if _, err := c.Fetch(ctx, ref); !errors.Is(err, transport.ErrUnauthenticated) {
			t.Errorf("Fetch with token %q: %v, want ErrUnauthenticated", sec.Token, err)
		}
		c.Release(ref)
		c.Close() // sends the queued release, which is refused
	}
	after := ProcessStats()
	if after.Served != before.Served || after.ServedBytes != before.ServedBytes || after.Freed != before.Freed {
		t.Errorf("unauthenticated peers changed the store: %+v -> %+v", before, after)
	}
	if got, err := newClient(t, nil).Fetch(ctx, ref); err != nil || string(got) != string(secret) {
		t.Errorf("authenticated fetch after the refusals: %q, %v", got, err)
	}
}
