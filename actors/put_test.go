package actors_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"troupe/actors"
)

// Sink is the Put tests' actor: it reports what it was given.
type Sink struct{}

type Payload struct {
	Name string
	Data []byte
}

func (Sink) Len(ctx context.Context, p Payload) (int, error) { return len(p.Data), nil }
func (Sink) Name(ctx context.Context, p Payload) (string, error) {
	return p.Name, nil
}

func init() {
	actors.MustRegister("Sink", func(ctx context.Context, _ int) (*Sink, error) { return &Sink{}, nil })
}

// noPut is a runtime without actors.ObjectPutter.
type noPut struct{ actors.Runtime }

// TestPutEmbedded: a value put once is passed to many calls on several
// actors of the embedded runtime, and Get returns it; runtimes without
// ObjectPutter get an in-memory future; errors name what failed.
func TestPutEmbedded(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	a, err := actors.Spawn[Sink](ctx, rt, "Sink", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := actors.Spawn[Sink](ctx, rt, "Sink", 0)
	if err != nil {
		t.Fatal(err)
	}
	v := Payload{Name: "weights", Data: make([]byte, 1<<20)}
	f, err := actors.Put(ctx, rt, v)
	if err != nil {
		t.Fatal(err)
	}
	var futs []*actors.Future[int]
	for i := range 20 {
		h := a
		if i%2 == 1 {
			h = b
		}
		futs = append(futs, actors.CallRef(ctx, h, (*Sink).Len, f))
	}
	for i, fu := range futs {
		if n, err := fu.Get(ctx); err != nil || n != 1<<20 {
			t.Fatalf("call %d with the put value: %d, %v; want %d", i, n, err, 1<<20)
		}
	}
	if name, err := actors.CallRef(ctx, b, (*Sink).Name, f).Get(ctx); err != nil || name != "weights" {
		t.Fatalf("Name = %q, %v", name, err)
	}
	if got, err := f.Get(ctx); err != nil || got.Name != "weights" || len(got.Data) != 1<<20 {
		t.Fatalf("Get of the put future: %q %d bytes, %v", got.Name, len(got.Data), err)
	}
	f.Release() // nothing to free in one process; the future stays usable
	if n, err := actors.CallRef(ctx, a, (*Sink).Len, f).Get(ctx); err != nil || n != 1<<20 {
		t.Fatalf("after Release in the embedded runtime: %d, %v", n, err)
	}

	// A runtime that cannot put still gets a future holding the value.
	g, err := actors.Put(ctx, noPut{rt}, Payload{Name: "fallback"})
	if err != nil {
		t.Fatal(err)
	}
	if name, err := actors.CallRef(ctx, a, (*Sink).Name, g).Get(ctx); err != nil || name != "fallback" {
		t.Fatalf("fallback put: %q, %v", name, err)
	}

	if _, err := actors.Put(ctx, rt, make(chan int)); !errors.Is(err, actors.ErrEncode) || !strings.Contains(err.Error(), "put chan int") {
		t.Fatalf("Put of an unencodable value: %v, want ErrEncode naming the type", err)
	}
	if _, err := actors.Put[int](ctx, nil, 1); err == nil || !strings.Contains(err.Error(), "nil runtime") {
		t.Fatalf("Put with a nil runtime: %v", err)
	}
	rt.Shutdown(ctx)
	if _, err := actors.Put(ctx, rt, 1); err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Fatalf("Put after Shutdown: %v, want an error saying the runtime is shut down", err)
	}
}
