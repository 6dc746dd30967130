package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
)

// Tests of who reads a client's replies: the waiting caller, the background
// reader, or nobody while the connection is idle.

// fakeServer is the far end of a client on a net.Pipe, driven by the test.
type fakeServer struct {
	nc net.Conn
	fr *frameReader
}

func pipeClient(t *testing.T) (*Client, *fakeServer) {
	t.Helper()
	a, b := net.Pipe()
	cl := NewClient(a, 0)
	t.Cleanup(func() { cl.Close(); b.Close() })
	return cl, &fakeServer{nc: b, fr: newConn(b, 0, DefaultSpin).newFrameReader()}
}

// call reads the next call frame.
func (s *fakeServer) call(t *testing.T) *frame {
	t.Helper()
	f, _, err := s.fr.next()
	if err != nil || f.kind != kindCall {
		t.Errorf("fake server: reading a call: %v, %+v", err, f)
		return &frame{}
	}
	return &f
}

func reply(id uint64, v any) []byte {
	data, _ := msgpack.Marshal(v)
	return appendFrame(nil, &frame{kind: kindReply, callID: id, data: data})
}

func invoke(cl *Client, arg int) *actors.Invocation {
	data, _ := msgpack.Marshal(arg)
	inv := &actors.Invocation{Method: "Add", Arg: data, Reply: actors.NewPromise()}
	cl.Invoke("a", inv)
	return inv
}

func decodeInt(t *testing.T, data []byte) int {
	t.Helper()
	var v int
	if err := msgpack.Unmarshal(data, &v); err != nil {
		t.Fatalf("result: %v", err)
	}
	return v
}

// A waiter whose context ends while a reply is half read returns the
// context's error; the next waiter goes on reading where it stopped and
// gets the whole reply.
func TestWaitInterruptedInTheMiddleOfAFrame(t *testing.T) {
	cl, srv := pipeClient(t)
	calls := make(chan *frame, 1)
	go func() { calls <- srv.call(t) }()
	inv := invoke(cl, 7)
	f := <-calls

	r := reply(f.callID, "a result long enough to be cut in two")
	ctx, cancel := context.WithCancel(context.Background())
	wrote := make(chan error, 1)
	go func() {
		_, err := srv.nc.Write(r[:9]) // returns once the waiter has read it
		cancel()
		wrote <- err
	}()
	if _, err := inv.Reply.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted wait: %v", err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	go srv.nc.Write(r[9:])
	data, err := inv.Reply.Wait(context.Background())
	if err != nil {
		t.Fatalf("wait after interruption: %v", err)
	}
	var s string
	msgpack.Unmarshal(data, &s)
	if s != "a result long enough to be cut in two" {
		t.Fatalf("result %q", s)
	}
	if err := cl.Err(); err != nil {
		t.Fatalf("connection after interruption: %v", err)
	}
}

// A waiter reads the replies of other calls before its own and hands them
// over; the call left in flight when it leaves is read by the background
// reader for a goroutine that waits on Done.
func TestWaiterHandsOtherRepliesOver(t *testing.T) {
	cl, srv := pipeClient(t)
	calls := make(chan *frame, 3)
	go func() {
		for range 3 {
			calls <- srv.call(t)
		}
	}()
	first, second, third := invoke(cl, 1), invoke(cl, 2), invoke(cl, 3)
	f1, f2, f3 := <-calls, <-calls, <-calls
	go srv.nc.Write(append(reply(f1.callID, 10), reply(f2.callID, 20)...))
	data, err := second.Reply.Wait(context.Background())
	if err != nil || decodeInt(t, data) != 20 {
		t.Fatalf("second: %v", err)
	}
	if data, err, ok := first.Reply.Result(); !ok || err != nil || decodeInt(t, data) != 10 {
		t.Fatalf("first was not handed over by the waiter of the second: %v %v", ok, err)
	}
	go srv.nc.Write(reply(f3.callID, 30))
	<-third.Reply.Done() // no Wait: the background reader must read it
	if data, err, _ := third.Reply.Result(); err != nil || decodeInt(t, data) != 30 {
		t.Fatalf("third: %v", err)
	}
}

// Replies to a burst of calls nobody waits for yet are read in the
// background, so the server is never stuck writing them.
func TestBurstIsReadInTheBackground(t *testing.T) {
	cl, srv := pipeClient(t)
	const n = 3 * directPending
	calls := make(chan *frame, n)
	go func() {
		for range n {
			calls <- srv.call(t)
		}
	}()
	invs := make([]*actors.Invocation, n)
	for i := range invs {
		invs[i] = invoke(cl, i)
	}
	var out []byte
	for range n {
		f := <-calls
		out = append(out, reply(f.callID, int(f.callID))...)
	}
	// net.Pipe's Write returns only once everything was read: by the
	// background reader, as nobody waits.
	if _, err := srv.nc.Write(out); err != nil {
		t.Fatal(err)
	}
	for i, inv := range invs {
		data, err := inv.Reply.Wait(context.Background())
		if err != nil || decodeInt(t, data) != i+1 {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// A connection nobody reads is probed by Err, so a peer that went away is
// noticed before the next call is sent to it.
func TestErrNoticesAnIdlePeerThatLeft(t *testing.T) {
	ctx := context.Background()
	h := &host{byID: map[string]*actors.Instance{}}
	h.spawn(t, "a", spec(0))
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
	defer cl.Close()
	cl.probeAfter = 0
	if _, err := actors.Call(ctx, handle(cl, "a"), (*echo).Add, 1).Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Err(); err != nil {
		t.Fatalf("open connection: %v", err)
	}
	srv.Close() // the worker goes away while the client is idle
	// The peer's close reaches this socket asynchronously.
	deadline := time.Now().Add(10 * time.Second)
	for err = cl.Err(); err == nil && time.Now().Before(deadline); err = cl.Err() {
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Err after the peer closed: %v", err)
	}
	select {
	case <-cl.Done():
	default:
		t.Fatal("Done not closed once the loss was noticed")
	}
}

// Many goroutines calling at once over one connection each get their own
// results, whoever reads them.
func TestConcurrentCallersGetTheirResults(t *testing.T) {
	ctx := context.Background()
	h, cl := pair(t, 0)
	const callers, calls = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		id := fmt.Sprint("c", c)
		h.spawn(t, id, spec(0))
		a := handle(cl, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= calls; i++ {
				v, err := actors.Call(ctx, a, (*echo).Add, 1).Get(ctx)
				if err != nil || v != i {
					errs <- fmt.Errorf("%s call %d: %d, %v", id, i, v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Frames cut into arbitrary pieces and reads interrupted at arbitrary
// points (seeded) still come out whole and in order.
func TestFrameReaderResumesAfterInterruptions(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var want []frame
	var stream []byte
	for i := range 300 {
		data := make([]byte, rng.IntN(3*maxSlabbed))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		f := frame{kind: kindReply, callID: uint64(i + 1), data: data}
		want = append(want, f)
		stream = appendFrame(stream, &f)
	}
	go func() {
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(300))
			if _, err := b.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
	}()
	fr := newConn(a, 0, DefaultSpin).newFrameReader()
	interrupts := 0
	for i := 0; i < len(want); {
		interrupt := i%3 == 0 && interrupts < 200
		if interrupt {
			a.SetReadDeadline(aLongTimeAgo)
		}
		f, _, err := fr.next()
		if interrupt {
			a.SetReadDeadline(time.Time{})
		}
		if err == errInterrupted {
			interrupts++
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.callID != want[i].callID || string(f.data) != string(want[i].data) {
			t.Fatalf("frame %d: got call %d with %d bytes, want call %d with %d", i, f.callID, len(f.data), want[i].callID, len(want[i].data))
		}
		i++
	}
	if interrupts == 0 {
		t.Fatal("no read was interrupted: the test tests nothing")
	}
}

// A call whose argument is the result of an earlier call on the connection
// names that call and carries no argument; the client sends the argument
// only when the server asks for it (needarg), and a failed producer's
// error goes the same way.
func TestArgumentOfCallIsSentOnlyWhenAsked(t *testing.T) {
	cl, srv := pipeClient(t)
	// One goroutine reads every frame the client sends (net.Pipe: the
	// client's writes wait for it); the test takes them in order.
	frames := make(chan frame, 8)
	go func() {
		defer close(frames)
		for {
			f, _, err := srv.fr.next()
			if err != nil {
				return
			}
			frames <- f
		}
	}()
	next := func(what string) frame {
		t.Helper()
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("%s: the connection ended", what)
			}
			return f
		case <-time.After(time.Minute):
			t.Fatalf("%s: no frame in a minute", what)
		}
		return frame{}
	}
	ctx := context.Background()
	producer := invoke(cl, 1)
	dependent := &actors.Invocation{Method: "Add", ArgRef: producer.Reply, Reply: actors.NewPromise()}
	cl.Invoke("a", dependent)
	fp, fd := next("producer call"), next("dependent call")
	if fd.flags&flagArgOfCall == 0 || fd.flags&flagArgLater == 0 {
		t.Fatalf("dependent call flags %#x: want arg-later and arg-of-call", fd.flags)
	}
	if src, _ := binary.Uvarint(fd.data); src != fp.callID {
		t.Fatalf("dependent names call %d, want %d", src, fp.callID)
	}
	// The producer's reply is not followed by an argument frame: the next
	// frame the server reads is the one it asks for.
	needArg := appendFrame(nil, &frame{kind: kindNeedArg, callID: fd.callID})
	go srv.nc.Write(append(reply(fp.callID, 11), needArg...))
	if data, err := producer.Reply.Wait(ctx); err != nil || decodeInt(t, data) != 11 {
		t.Fatalf("producer: %v", err)
	}
	if f := next("argument"); f.kind != kindArg || f.callID != fd.callID || decodeInt(t, f.data) != 11 {
		t.Fatalf("after needarg the server read %+v; want the producer's result as the argument", f)
	}

	failing := invoke(cl, 2)
	after := &actors.Invocation{Method: "Add", ArgRef: failing.Reply, Reply: actors.NewPromise()}
	cl.Invoke("a", after)
	ff, fa := next("failing call"), next("call after it")
	failed := appendFrame(nil, &frame{kind: kindReply, callID: ff.callID, status: statusErr, data: encodeError(errors.New("upstream broke"))})
	go srv.nc.Write(append(failed, appendFrame(nil, &frame{kind: kindNeedArg, callID: fa.callID})...))
	if _, err := failing.Reply.Wait(ctx); err == nil {
		t.Fatal("the failed producer returned no error")
	}
	f := next("argument error")
	if f.kind != kindArgErr || f.callID != fa.callID {
		t.Fatalf("after needarg for a failed producer the server read %+v; want an argerr frame", f)
	}
	if e := decodeError(f.data); e == nil || !strings.Contains(e.Error(), "upstream broke") {
		t.Fatalf("argerr carries %v", e)
	}
}
