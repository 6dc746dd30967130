package wire

import (
	"context"
	"errors"
	"net"
	"testing"

	"troupe/actors"
	"troupe/runtime/api"
)

// fencedHost runs one incarnation of each actor and checks the incarnation
// a call names, as a worker does: an older one is refused, a newer one
// ends the one here.
type fencedHost struct {
	host
	inc map[string]uint64
}

func (h *fencedHost) LookupIncarnation(id string, inc uint64) (Target, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	in, ok := h.byID[id]
	switch {
	case !ok:
		return nil, &api.NotHostedError{Actor: id}
	case h.inc[id] == inc:
		return in, nil
	case h.inc[id] > inc:
		return nil, &api.StaleIncarnationError{Actor: id, Called: int(inc), Running: int(h.inc[id])}
	}
	delete(h.byID, id)
	in.Kill("replaced")
	return nil, &api.StaleIncarnationError{Actor: id, Called: int(inc), Running: int(h.inc[id])}
}

// TestCallNamesItsIncarnation: a call naming the incarnation that runs is
// served; one naming an older incarnation is refused with
// ErrStaleIncarnation (as a typed *api.StaleIncarnationError); one naming
// a newer incarnation is refused and the replaced incarnation is gone;
// a call naming none is served by Lookup as before.
func TestCallNamesItsIncarnation(t *testing.T) {
	ctx := context.Background()
	h := &fencedHost{host: host{byID: map[string]*actors.Instance{}}, inc: map[string]uint64{"a": 2}}
	srv := NewServer(h, 0, testSec)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	cl, err := Dial(ctx, testSec, "tcp", l.Addr().String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); srv.Close() })
	h.spawn(t, "a", spec(5))
	call := func(inc int) ([]byte, error) {
		p := actors.NewPromise()
		cl.InvokeIncarnation("a", inc, &actors.Invocation{Method: "Add", Arg: []byte{1}, Reply: p}) // msgpack 1
		return p.Wait(ctx)
	}
	if _, err := call(2); err != nil {
		t.Fatalf("call for the running incarnation: %v", err)
	}
	if _, err := call(-1); err != nil {
		t.Fatalf("call naming no incarnation: %v", err)
	}
	var se *api.StaleIncarnationError
	if _, err := call(1); !errors.Is(err, actors.ErrStaleIncarnation) || !errors.As(err, &se) || se.Called != 1 || se.Running != 2 || se.Actor != "a" {
		t.Fatalf("call for an older incarnation: %v, want ErrStaleIncarnation (called 1, running 2)", err)
	}
	if _, err := call(3); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("call for a newer incarnation: %v, want ErrStaleIncarnation", err)
	}
	if _, err := call(2); !errors.Is(err, actors.ErrNotFound) {
		t.Fatalf("call for the replaced incarnation after a newer one was named: %v, want it gone (ErrNotFound)", err)
	}
}
