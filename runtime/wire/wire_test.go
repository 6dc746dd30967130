package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"troupe/runtime/transport"

	"troupe/actors"
)

// echo is the test actor.
type echo struct{ n int }

func newEcho(ctx context.Context, start int) (*echo, error) { return &echo{n: start}, nil }

func (e *echo) Add(ctx context.Context, d int) (int, error)         { e.n += d; return e.n, nil }
func (e *echo) Bytes(ctx context.Context, b []byte) ([]byte, error) { return b, nil }
func (e *echo) Fail(ctx context.Context, s string) (int, error)     { return 0, errors.New(s) }
func (e *echo) Panic(ctx context.Context, s string) (int, error)    { panic(s) }
func (e *echo) Crash(ctx context.Context, s string) (int, error)    { panic(actors.Crash(s)) }
func (e *echo) Block(ctx context.Context, _ int) (string, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

func init() { actors.MustRegister("wire.echo", newEcho) }

// host is an in-memory Host of actors.Instances.
type host struct {
	mu   sync.Mutex
	byID map[string]*actors.Instance
}

func (h *host) Lookup(id string) (Target, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	in, ok := h.byID[id]
	return in, ok
}

func (h *host) spawn(t testing.TB, id string, spec actors.Spec) {
	t.Helper()
	in, err := actors.NewInstance(context.Background(), spec, actors.ActorInfo{ID: id, Node: "n1"}, actors.InstanceHooks{})
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.byID[id] = in
	h.mu.Unlock()
}

// pair starts a server and a client joined by a loopback TCP connection.
func pair(t testing.TB, maxFrame int) (*host, *Client) {
	t.Helper()
	h := &host{byID: map[string]*actors.Instance{}}
	srv := NewServer(h, maxFrame, testSec)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	cl, err := Dial(context.Background(), testSec, "tcp", l.Addr().String(), maxFrame)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); srv.Close() })
	return h, cl
}

func spec(start int, opts ...actors.Option) actors.Spec {
	s := actors.Spec{Type: "wire.echo", Config: []byte{byte(start)}}
	for _, o := range opts {
		o(&s)
	}
	return s
}

func handle(cl *Client, id string) actors.Handle[echo] {
	return actors.HandleOf[echo](cl.Ref(id, "", "wire.echo", nil))
}

func TestCallsAndOrderOverTheWire(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	h.spawn(t, "a", spec(5))
	a := handle(cl, "a")
	if v, err := actors.Call(ctx, a, (*echo).Add, 1).Get(ctx); err != nil || v != 6 {
		t.Fatalf("Add = %d, %v", v, err)
	}
	var futs []*actors.Future[int]
	for i := 0; i < 2000; i++ {
		futs = append(futs, actors.Call(ctx, a, (*echo).Add, 1))
	}
	for i, f := range futs {
		if v, err := f.Get(ctx); err != nil || v != 7+i {
			t.Fatalf("call %d = %d, %v; want %d in order", i, v, err, 7+i)
		}
	}
}

func TestErrorsKeepTheirTypes(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	h.spawn(t, "a", spec(0, actors.MaxRestarts(1)))
	a := handle(cl, "a")
	if _, err := actors.Call(ctx, a, (*echo).Fail, "plain failure").Get(ctx); err == nil || err.Error() != "plain failure" {
		t.Errorf("method error: %v", err)
	}
	var ce *actors.CallError
	if _, err := actors.Call(ctx, a, (*echo).Panic, "bang").Get(ctx); !errors.As(err, &ce) || ce.Panic != "bang" || ce.Stack == "" {
		t.Errorf("panic: %v", err)
	}
	if _, err := actors.Call(ctx, a, (*echo).Crash, "fault").Get(ctx); !errors.Is(err, actors.ErrActorRestarted) {
		t.Errorf("crash with a restart left: %v", err)
	}
	var died *actors.ActorDiedError
	if _, err := actors.Call(ctx, a, (*echo).Crash, "fault 2").Get(ctx); !errors.As(err, &died) || died.Cause != "fault 2" || died.Node != "n1" {
		t.Errorf("crash without restarts: %v", err)
	}
	if _, err := actors.Call(ctx, handle(cl, "nobody"), (*echo).Add, 1).Get(ctx); !errors.Is(err, actors.ErrNotFound) {
		t.Errorf("unknown actor: %v", err)
	}
	h.spawn(t, "b", spec(0))
	p := actors.NewPromise()
	cl.Invoke("b", &actors.Invocation{Method: "Nope", Arg: []byte{1}, Reply: p})
	if _, err := p.Wait(ctx); !errors.Is(err, actors.ErrNoSuchMethod) {
		t.Errorf("unknown method: %v", err)
	}
	p = actors.NewPromise()
	cl.Invoke("b", &actors.Invocation{Method: "Add", Arg: []byte{0xc1}, Reply: p})
	if _, err := p.Wait(ctx); !errors.Is(err, actors.ErrDecode) {
		t.Errorf("malformed argument: %v", err)
	}
}

func TestFutureArgumentIsAwaitedByTheCallee(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	h.spawn(t, "a", spec(0))
	a := handle(cl, "a")
	// The argument is a future nobody has resolved yet; calls behind it
	// must still run after it.
	p := actors.NewPromise()
	dependent := actors.CallRef(ctx, a, (*echo).Add, actors.FutureOf[int](p))
	after := actors.Call(ctx, a, (*echo).Add, 1)
	p.Resolve([]byte{10}, nil)
	if v, err := dependent.Get(ctx); err != nil || v != 10 {
		t.Fatalf("dependent = %d, %v", v, err)
	}
	if v, err := after.Get(ctx); err != nil || v != 11 {
		t.Fatalf("after = %d, %v; want 11 (order kept)", v, err)
	}
	bad := actors.NewPromise()
	failing := actors.CallRef(ctx, a, (*echo).Add, actors.FutureOf[int](bad))
	bad.Resolve(nil, errors.New("upstream broke"))
	if _, err := failing.Get(ctx); err == nil || !strings.Contains(err.Error(), "upstream broke") {
		t.Fatalf("failed dependency: %v", err)
	}
}

func TestResultOfACallOnTheConnectionIsForwardedAsAnArgument(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	h.spawn(t, "a", spec(5))
	h.spawn(t, "b", spec(100))
	a, b := handle(cl, "a"), handle(cl, "b")
	block := actors.Call(ctx, a, (*echo).Add, 0) // keeps a busy briefly
	first := actors.Call(ctx, a, (*echo).Add, 1)
	second := actors.CallRef(ctx, b, (*echo).Add, first)
	if v, err := second.Get(ctx); err != nil || v != 106 {
		t.Fatalf("chained call = %d, %v; want 106", v, err)
	}
	if _, err := block.Get(ctx); err != nil {
		t.Fatal(err)
	}
	failed := actors.Call(ctx, a, (*echo).Fail, "upstream broke")
	after := actors.CallRef(ctx, b, (*echo).Add, failed)
	if _, err := after.Get(ctx); err == nil || !strings.Contains(err.Error(), "upstream broke") {
		t.Fatalf("call after a failed call on the connection: %v", err)
	}
	// A compiled chain across the connection, run many times.
	g, in := actors.NewGraph[int]()
	out := actors.Node(g, "second", b, (*echo).Add, actors.Node(g, "first", a, (*echo).Add, in))
	run, err := actors.Compile[int](g, out)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		before, _ := actors.Call(ctx, b, (*echo).Add, 0).Get(ctx)
		if _, err := run.Run(ctx, 1); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if now, _ := actors.Call(ctx, b, (*echo).Add, 0).Get(ctx); now <= before {
			t.Fatalf("run %d did not reach b: %d then %d", i, before, now)
		}
	}
}

func TestLongInlineCallDoesNotHoldUpTheConnection(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	h.spawn(t, "a", spec(0))
	h.spawn(t, "b", spec(0))
	// A lone call with nothing to track runs on the server's reading
	// goroutine; this one never returns by itself.
	blocked := actors.Call(ctx, handle(cl, "a"), (*echo).Block, 0)
	for i := 1; i <= 3; i++ {
		if v, err := actors.Call(ctx, handle(cl, "b"), (*echo).Add, 1).Get(ctx); err != nil || v != i {
			t.Fatalf("call %d behind a long inline call: %d, %v", i, v, err)
		}
	}
	h.mu.Lock()
	a := h.byID["a"]
	h.mu.Unlock()
	a.Kill("test over")
	if _, err := blocked.Get(ctx); err == nil {
		t.Fatal("the blocked call returned no error after its actor was killed")
	}
	// Calls keep running inline and in order afterwards.
	for i := 4; i <= 50; i++ {
		if v, err := actors.Call(ctx, handle(cl, "b"), (*echo).Add, 1).Get(ctx); err != nil || v != i {
			t.Fatalf("call %d: %d, %v", i, v, err)
		}
	}
}

func TestCancellationReachesTheCallee(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	h.spawn(t, "a", spec(0))
	a := handle(cl, "a")
	cctx, cancel := context.WithCancel(ctx)
	f := actors.Call(cctx, a, (*echo).Block, 0)
	cancel()
	if _, err := f.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if v, err := actors.Call(ctx, a, (*echo).Add, 2).Get(ctx); err != nil || v != 2 {
		t.Fatalf("actor after cancel: %d, %v", v, err)
	}
}

func TestFrameLimits(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 4096)
	h.spawn(t, "a", spec(0))
	a := handle(cl, "a")
	if _, err := actors.Call(ctx, a, (*echo).Bytes, make([]byte, 8192)).Get(ctx); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized argument: %v", err)
	}
	if v, err := actors.Call(ctx, a, (*echo).Bytes, []byte("fits")).Get(ctx); err != nil || string(v) != "fits" {
		t.Fatalf("small call after refusal: %q, %v", v, err)
	}
}

func TestConnectionLossFailsPendingCalls(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	h.spawn(t, "a", spec(0))
	a := handle(cl, "a")
	f := actors.Call(ctx, a, (*echo).Block, 0) // never returns by itself
	cl.c.nc.Close()                            // the worker vanished
	if _, err := f.Get(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("pending call after loss: %v", err)
	}
	if _, err := actors.Call(ctx, a, (*echo).Add, 1).Get(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after loss: %v", err)
	}
}

func TestServerRejectsGarbage(t *testing.T) {
	h := &host{byID: map[string]*actors.Instance{}}
	srv := NewServer(h, 1024, testSec)
	for _, junk := range [][]byte{
		{0xff, 0xff, 0xff, 0x7f},                 // length beyond the limit
		{2, 0, 0, 0, 9, 1},                       // unknown kind
		{3, 0, 0, 0, kindCall, 1, 200},           // truncated call
		{2, 0, 0, 0, kindReply, 1},               // a reply sent to a server
		{7, 0, 0, 0, kindCall, 1, 0, 0, 0, 0, 9}, // trailing bytes
	} {
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() { srv.ServeConn(a); close(done) }()
		go io.Copy(io.Discard, b)
		b.Write(junk)
		<-done // the server hung up instead of crashing
		b.Close()
	}
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add(appendFrame(nil, &frame{kind: kindCall, callID: 7, actor: "a", method: "Add", flags: flagCancel, data: []byte{1}})[4:])
	f.Add(appendFrame(nil, &frame{kind: kindReply, callID: 1 << 40, status: statusErr, data: encodeError(errors.New("x"))})[4:])
	f.Add(appendFrame(nil, &frame{kind: kindCancel, callID: 3})[4:])
	f.Add([]byte{kindArg, 0x80})
	f.Add(appendFrame(nil, &frame{kind: kindNeedArg, callID: 9})[4:])
	f.Add(appendFrame(nil, &frame{kind: kindCall, callID: 8, actor: "b", method: "M", flags: flagArgLater | flagArgOfCall, data: []byte{7}})[4:])
	f.Add(appendFrame(nil, &frame{kind: kindCall, callID: 9, actor: "c", method: "M", flags: flagEpoch | flagArgLater | flagArgOfCall, epoch: 3, data: []byte{8}})[4:])
	f.Fuzz(func(t *testing.T, body []byte) {
		src := argSource(body) // never panics, whatever the bytes
		fr, err := decodeFrame(body, nil)
		if err != nil {
			return
		}
		if want, n := binary.Uvarint(fr.data); fr.kind != kindCall || fr.flags&flagArgOfCall == 0 || n <= 0 || n != len(fr.data) {
			if src != 0 {
				t.Fatalf("argSource %d of a frame naming no call: %+v", src, fr)
			}
		} else if src != want {
			t.Fatalf("argSource %d, the frame names call %d", src, want)
		}
		// What decodes re-encodes to a frame that decodes the same (the
		// bytes may differ: varints have non-canonical forms).
		again, err := decodeFrame(appendFrame(nil, &fr)[4:], &interner{})
		if err != nil || again.kind != fr.kind || again.callID != fr.callID || again.actor != fr.actor ||
			again.method != fr.method || again.flags != fr.flags || again.epoch != fr.epoch || again.status != fr.status || string(again.data) != string(fr.data) {
			t.Fatalf("round trip changed the frame: %+v -> %+v (%v)", fr, again, err)
		}
		if fr.kind == kindReply && fr.status == statusErr {
			decodeError(fr.data)
		}
	})
}

// Chains on one connection pass results larger than the server keeps.
func TestChainedLargeResults(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	h.spawn(t, "a", spec(0))
	h.spawn(t, "b", spec(0))
	a, b := handle(cl, "a"), handle(cl, "b")
	big := make([]byte, 3*maxForwarded)
	for i := range big {
		big[i] = byte(i)
	}
	for i := range 20 {
		// Larger than the server keeps: passed on the producer's reply.
		got, err := actors.CallRef(ctx, b, (*echo).Bytes, actors.Call(ctx, a, (*echo).Bytes, big)).Get(ctx)
		if err != nil || string(got) != string(big) {
			t.Fatalf("run %d: large chained result: %d bytes, %v", i, len(got), err)
		}
	}
}

// A server asks for an argument named by call ID (needarg) when it does not
// have that call's result: the call ran before the connection chained
// calls, or its result left the recent ones; it takes a recent or running
// call's result itself.
func TestServerAsksForResultsItDoesNotHave(t *testing.T) {
	h := &host{byID: map[string]*actors.Instance{}}
	h.spawn(t, "a", spec(0))
	srv := NewServer(h, 0, testSec)
	defer srv.Close()
	a, b := net.Pipe()
	defer b.Close()
	b.SetReadDeadline(time.Now().Add(time.Minute)) // a frame that never comes fails, not hangs
	go srv.ServeConn(a)
	fr := newConn(b, 0, DefaultSpin).newFrameReader()
	send := func(frames ...*frame) {
		var out []byte
		for _, f := range frames {
			out = appendFrame(out, f)
		}
		go b.Write(out) // net.Pipe: returns once the server has read it all
	}
	add := func(id uint64) *frame {
		return &frame{kind: kindCall, callID: id, actor: "a", method: "Add", data: []byte{1}}
	}
	addOf := func(id, src uint64) *frame {
		return &frame{kind: kindCall, callID: id, actor: "a", method: "Add", flags: flagArgLater | flagArgOfCall, data: binary.AppendUvarint(nil, src)}
	}
	// expect reads frames until one of the given kind for call id, and
	// fails on a needarg for another call or one not wanted.
	expect := func(kind byte, id uint64) *frame {
		t.Helper()
		for {
			f, _, err := fr.next()
			if err != nil {
				t.Fatalf("waiting for kind %d of call %d: %v", kind, id, err)
			}
			if f.kind == kind && f.callID == id {
				return &f
			}
			if f.kind == kindNeedArg {
				t.Fatalf("needarg for call %d while waiting for kind %d of call %d", f.callID, kind, id)
			}
		}
	}
	// Call 1 ran before any call named another's result: asked for.
	send(add(1))
	expect(kindReply, 1)
	send(addOf(2, 1))
	expect(kindNeedArg, 2)
	send(&frame{kind: kindArg, callID: 2, data: []byte{5}})
	if f := expect(kindReply, 2); f.status != statusOK {
		t.Fatalf("call 2: status %d", f.status)
	}
	// Now chained: a recent result is taken without asking.
	send(add(3))
	expect(kindReply, 3)
	send(addOf(4, 3))
	expect(kindReply, 4)
	// Pushed out of the recent results by newer ones: asked for.
	var burst []*frame
	for id := uint64(5); id < 5+recentResults; id++ {
		burst = append(burst, add(id))
	}
	send(burst...)
	expect(kindReply, 4+recentResults)
	send(addOf(100, 3))
	expect(kindNeedArg, 100)
	send(&frame{kind: kindArgErr, callID: 100, data: encodeError(errors.New("upstream broke"))})
	if f := expect(kindReply, 100); f.status != statusErr || !strings.Contains(decodeError(f.data).Error(), "upstream broke") {
		t.Fatalf("call on a failed argument: status %d, %q", f.status, f.data)
	}
}

// testSec is what the tests' servers and clients authenticate with.
var testSec = transport.Security{Token: "wire-test-token"}
