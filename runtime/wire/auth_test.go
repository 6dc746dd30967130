package wire

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime/transport"
)

// countingHost counts lookups: every call frame a server handles looks its
// actor up first.
type countingHost struct {
	*host
	lookups atomic.Int64
}

func (h *countingHost) Lookup(id string) (Target, bool) {
	h.lookups.Add(1)
	return h.host.Lookup(id)
}

// TestPortsRefuseUnauthenticated: a worker's call port, on TCP and on its
// Unix socket, runs nothing for a peer without the token or with a wrong
// one: raw call frames, a client without a token and a client with a
// wrong one are all refused, no actor is looked up or called, and the
// actor's state is what it was.
func TestPortsRefuseUnauthenticated(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	h := &countingHost{host: &host{byID: map[string]*actors.Instance{}}}
	h.spawn(t, "a", spec(5))
	srv := NewServer(h, 0, testSec)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ul, err := ListenLocal(l)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	go srv.Serve(ul)
	defer srv.Close()
	addr := l.Addr().String()
	path, err := transport.LocalPath(localKind, addr)
	if err != nil {
		t.Fatal(err)
	}
	call := appendFrame(nil, &frame{kind: kindCall, callID: 1, actor: "a", method: "Add", data: []byte{1}})
	ctx := context.Background()
	for _, network := range []string{"tcp", "unix"} {
		target := addr
		if network == "unix" {
			target = path
		}
		// Raw frames, as an attacker with a plain socket sends them.
		nc, err := net.Dial(network, target)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(call)
		// Closed (reset, as the frames were not read) with nothing sent.
		if b, err := io.ReadAll(nc); len(b) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: raw call frames got %q, %v; want the connection closed with nothing sent", network, b, err)
		}
		nc.Close()
		// A client without a token, and one with a wrong token.
		for _, sec := range []transport.Security{{}, {Token: "wrong"}} {
			if _, err := sec.Dial(ctx, nil, network, target); !errors.Is(err, transport.ErrUnauthenticated) {
				t.Errorf("%s with token %q: %v, want ErrUnauthenticated", network, sec.Token, err)
			}
		}
	}
	// Dial falls back to nothing else when the local socket refuses.
	if _, err := Dial(ctx, transport.Security{Token: "wrong"}, "tcp", addr, 0); !errors.Is(err, transport.ErrUnauthenticated) {
		t.Errorf("wire.Dial with a wrong token: %v, want ErrUnauthenticated", err)
	}
	if n := h.lookups.Load(); n != 0 {
		t.Fatalf("unauthenticated peers reached %d actor lookups", n)
	}
	// The actor was never called: its first authenticated call sees the
	// initial state.
	for _, network := range []string{"tcp"} {
		cl, err := Dial(ctx, testSec, network, addr, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if v, err := actors.Call(ctx, handle(cl, "a"), (*echo).Add, 1).Get(ctx); err != nil || v != 6 {
			t.Fatalf("authenticated Add = %d, %v; want 6 (the state untouched before)", v, err)
		}
	}
	if n := h.lookups.Load(); n != 1 {
		t.Errorf("%d lookups after one authenticated call", n)
	}
}
