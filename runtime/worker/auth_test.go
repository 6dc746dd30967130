package worker

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
	"troupe/runtime/objstore"
	"troupe/runtime/transport"
	"troupe/runtime/wire"
)

// TestWorkerPortsRefuseUnauthenticated: a worker process started with the
// token (sent by its node over the control channel) runs no method and
// serves no object to a peer without it or with a wrong one, on its call
// port and its object port; the worker counts the refusals in its stats.
func TestWorkerPortsRefuseUnauthenticated(t *testing.T) {
	ctx := context.Background()
	p := startProc(t, Events{})
	if err := p.StartActor(ctx, spec(t, 10), actors.ActorInfo{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	cfg, _ := msgpack.Marshal(0)
	if err := p.StartActor(ctx, actors.Spec{Type: "WBlob", Config: cfg}, actors.ActorInfo{ID: "b1"}); err != nil {
		t.Fatal(err)
	}
	// An object to try to steal, made by an authenticated call.
	cl, err := wire.Dial(ctx, testSec, "tcp", p.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	arg, _ := msgpack.Marshal(objstore.InlineMax + 1)
	reply := actors.NewPromise()
	cl.Invoke("b1", &actors.Invocation{Method: "Make", Arg: arg, Reply: reply})
	enc, err := reply.Wait(ctx)
	if err != nil || !objstore.IsRef(enc) {
		t.Fatalf("Make: %v (a reference: %v)", err, objstore.IsRef(enc))
	}
	ref, err := objstore.DecodeRef(enc)
	if err != nil {
		t.Fatal(err)
	}
	before, err := p.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for _, sec := range []transport.Security{{}, {Token: "wrong"}} {
		if _, err := wire.Dial(ctx, sec, "tcp", p.Addr(), 0); !errors.Is(err, transport.ErrUnauthenticated) {
			t.Errorf("call port with token %q: %v, want ErrUnauthenticated", sec.Token, err)
		}
		c := objstore.NewClient(nil, sec)
		if _, err := c.Fetch(ctx, ref); !errors.Is(err, transport.ErrUnauthenticated) {
			t.Errorf("object port with token %q: %v, want ErrUnauthenticated", sec.Token, err)
		}
		c.Release(ref)
		c.Close()
	}
	// Raw bytes on both ports: closed, nothing sent back.
	for _, addr := range []string{p.Addr(), ref.Owner} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write([]byte("\x20\x00\x00\x00\x01\x01\x02a1\x03Add\x00\x01\x01"))
		if b, err := io.ReadAll(nc); len(b) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: raw bytes got %q, %v; want the connection closed", addr, b, err)
		}
		nc.Close()
	}

	after, err := p.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls := func(s *Stats) (n uint64) {
		for _, c := range s.Calls {
			n += c.OK + c.Errors
		}
		return n
	}
	if calls(after) != calls(before) {
		t.Errorf("calls went from %d to %d with no authenticated call", calls(before), calls(after))
	}
	if after.ObjectsTotal != before.ObjectsTotal {
		t.Errorf("objects went from %d to %d: an unauthenticated release freed one", before.ObjectsTotal, after.ObjectsTotal)
	}
	if after.Auth == nil || after.Auth.Refused < before.Auth.Refused+6 {
		t.Errorf("refusals counted: %+v -> %+v, want 6 more", before.Auth, after.Auth)
	}
	// The actor's state is untouched, and the object is still there.
	h := actors.HandleOf[counter](cl.Ref("a1", "", "WCounter", nil))
	if v, err := actors.Call(ctx, h, (*counter).Add, 1).Get(ctx); err != nil || v != 11 {
		t.Fatalf("Add = %v, %v; want 11", v, err)
	}
	oc := objstore.NewClient(nil, testSec)
	defer oc.Close()
	if b, err := oc.Fetch(ctx, ref); err != nil || len(b) != int(ref.Size) {
		t.Fatalf("authenticated fetch: %d bytes, %v", len(b), err)
	}
}
