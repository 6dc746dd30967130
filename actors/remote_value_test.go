package actors_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
)

// fakeRemote is a RemoteValue whose fetch blocks until released by gate
// (when set) and counts calls.
type fakeRemote struct {
	val      []byte
	gate     chan struct{}
	fetches  atomic.Int32
	fail     atomic.Bool
	released atomic.Int32
}

func (f *fakeRemote) Ref() []byte { return []byte{0xc1, 'r'} }
func (f *fakeRemote) Fetch(ctx context.Context) ([]byte, error) {
	f.fetches.Add(1)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.fail.Load() {
		return nil, errors.New("owner unreachable")
	}
	return f.val, nil
}
func (f *fakeRemote) Release() { f.released.Add(1) }

// TestPromiseRemoteValue: a promise resolved with a remote value reports
// the reference through Result, fetches once for all waiters on Wait, and
// forwards Release.
func TestPromiseRemoteValue(t *testing.T) {
	val, _ := msgpack.Marshal(42)
	rv := &fakeRemote{val: val, gate: make(chan struct{})}
	p := actors.NewPromise()
	if p.Remote() != nil {
		t.Fatal("Remote before resolution")
	}
	if !p.ResolveRemote(rv) || p.ResolveRemote(rv) || p.Resolve(nil, nil) {
		t.Fatal("a promise resolves once")
	}
	if data, err, ok := p.Result(); !ok || err != nil || string(data) != string(rv.Ref()) {
		t.Fatalf("Result = %x, %v, %v; want the reference", data, err, ok)
	}
	if p.Remote() != actors.RemoteValue(rv) {
		t.Fatal("Remote() is not the value")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if data, err := p.Wait(context.Background()); err != nil || string(data) != string(val) {
				t.Errorf("Wait = %x, %v", data, err)
			}
		}()
	}
	close(rv.gate)
	wg.Wait()
	f := actors.FutureOf[int](p)
	if v, err := f.Get(context.Background()); err != nil || v != 42 {
		t.Fatalf("Get = %v, %v", v, err)
	}
	if n := rv.fetches.Load(); n != 1 {
		t.Errorf("%d fetches, want 1 shared", n)
	}
	f.Release()
	if rv.released.Load() != 1 {
		t.Error("Release not forwarded")
	}
}

// TestFutureGetRemoteRetries: a failed or cancelled fetch is not the
// call's outcome: a later Get tries again.
func TestFutureGetRemoteRetries(t *testing.T) {
	val, _ := msgpack.Marshal("v")
	rv := &fakeRemote{val: val}
	rv.fail.Store(true)
	p := actors.NewPromise()
	p.ResolveRemote(rv)
	f := actors.FutureOf[string](p)
	if _, err := f.Get(context.Background()); err == nil {
		t.Fatal("failing fetch: no error")
	}
	rv.fail.Store(false)
	if v, err := f.Get(context.Background()); err != nil || v != "v" {
		t.Fatalf("Get after the owner came back = %q, %v", v, err)
	}
}

// TestInstanceHooks: Arg maps the argument before decoding and Result maps
// the encoded result before the reply.
func TestInstanceHooks(t *testing.T) {
	cfg, _ := msgpack.Marshal(AccConfig{Start: 1})
	hooks := actors.InstanceHooks{
		Arg: func(ctx context.Context, data []byte) ([]byte, bool, error) {
			if len(data) > 0 && data[0] == 0xc1 {
				b, err := msgpack.Marshal(10) // a reference stands for 10
				return b, true, err
			}
			if len(data) > 0 && data[0] == 0xc0 {
				return nil, false, errors.New("fetch failed")
			}
			return data, false, nil
		},
		Result: func(data []byte) ([]byte, error) { return append([]byte{0xc1}, data...), nil },
	}
	in, err := actors.NewInstance(context.Background(), actors.Spec{Type: "Acc", Config: cfg}, actors.ActorInfo{ID: "a"}, hooks)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Kill("done")
	p := actors.NewPromise()
	in.Invoke(&actors.Invocation{Method: "Add", Arg: []byte{0xc1, 1}, Reply: p})
	data, err := p.Wait(context.Background())
	var v int
	if err != nil || data[0] != 0xc1 || msgpack.Unmarshal(data[1:], &v) != nil || v != 11 {
		t.Fatalf("hooked call = %x, %v; want 0xc1 + 11", data, err)
	}
	p = actors.NewPromise()
	in.Invoke(&actors.Invocation{Method: "Add", Arg: []byte{0xc0}, Reply: p})
	if _, err := p.Wait(context.Background()); err == nil || !strings.Contains(err.Error(), "argument: fetch failed") {
		t.Fatalf("failed argument hook: %v", err)
	}
}

// ByteSink's Poke writes into its []byte argument, so a test can see
// whether the method got the caller's bytes or a copy.
type ByteSink struct{}

func NewByteSink(context.Context, struct{}) (*ByteSink, error) { return &ByteSink{}, nil }

func (*ByteSink) Poke(ctx context.Context, b []byte) (int, error) {
	for i := range b {
		b[i] = 99
	}
	return len(b), nil
}

func init() { actors.MustRegister("ByteSink", NewByteSink) }

// TestOwnedBytesArgument: a []byte argument in bytes the Arg hook says
// the call owns is a slice of them (no copy); in bytes it does not own,
// or of another type, it is decoded as before, into a copy.
func TestOwnedBytesArgument(t *testing.T) {
	for _, size := range []int{3, 300, 70000} { // bin 8, bin 16, bin 32
		for _, owned := range []bool{true, false} {
			var given []byte
			hooks := actors.InstanceHooks{Arg: func(ctx context.Context, data []byte) ([]byte, bool, error) {
				given = data
				return data, owned, nil
			}}
			cfg, _ := msgpack.Marshal(struct{}{})
			in, err := actors.NewInstance(context.Background(), actors.Spec{Type: "ByteSink", Config: cfg}, actors.ActorInfo{ID: "b"}, hooks)
			if err != nil {
				t.Fatal(err)
			}
			arg, _ := msgpack.Marshal(make([]byte, size))
			p := actors.NewPromise()
			in.Invoke(&actors.Invocation{Method: "Poke", Arg: arg, Reply: p})
			data, err := p.Wait(context.Background())
			var n int
			if err != nil || msgpack.Unmarshal(data, &n) != nil || n != size {
				t.Fatalf("size %d: Poke = %x, %v", size, data, err)
			}
			poked := given[len(given)-1] == 99
			if poked != owned {
				t.Fatalf("size %d, owned %v: the method wrote into the hook's bytes: %v", size, owned, poked)
			}
			in.Kill("done")
		}
	}
}
