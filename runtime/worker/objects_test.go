package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
	"troupe/runtime/objstore"
	"troupe/runtime/wire"
)

// blob makes and checks large results.
type blob struct{}

func (blob) Make(ctx context.Context, n int) ([]byte, error) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b, nil
}

func (blob) Sum(ctx context.Context, b []byte) (uint64, error) {
	var s uint64
	for _, c := range b {
		s += uint64(c)
	}
	return s, nil
}

func init() {
	actors.MustRegister[blob]("WBlob", func(ctx context.Context, _ int) (*blob, error) { return &blob{}, nil })
}

// TestWorkerObjects: a large result stays in the worker and the reply is a
// reference; the reference passed back as an argument is resolved from the
// worker's own store; another process fetches it over TCP; after the last
// release it is freed and using it fails saying so.
func TestWorkerObjects(t *testing.T) {
	ctx := context.Background()
	p := startProc(t, Events{})
	cfg, _ := msgpack.Marshal(0)
	if err := p.StartActor(ctx, actors.Spec{Type: "WBlob", Config: cfg}, actors.ActorInfo{ID: "b1"}); err != nil {
		t.Fatal(err)
	}
	cl, err := wire.Dial(ctx, testSec, "tcp", p.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	call := func(method string, arg []byte) ([]byte, error) {
		reply := actors.NewPromise()
		cl.Invoke("b1", &actors.Invocation{Method: method, Arg: arg, Reply: reply})
		return reply.Wait(ctx)
	}
	const n = 3 << 20
	arg, _ := msgpack.Marshal(n)
	small, _ := msgpack.Marshal(10)
	if data, err := call("Make", small); err != nil || objstore.IsRef(data) {
		t.Fatalf("small result: %x, %v; want inline bytes", data, err)
	}
	enc, err := call("Make", arg)
	if err != nil || !objstore.IsRef(enc) {
		t.Fatalf("large result: %d bytes, %v; want a reference", len(enc), err)
	}
	ref, err := objstore.DecodeRef(enc)
	if err != nil || ref.Size < n {
		t.Fatalf("reference %+v, %v", ref, err)
	}
	var want uint64
	for i := range n {
		want += uint64(byte(i * 7))
	}
	// The owner itself resolves the reference given as an argument.
	data, err := call("Sum", enc)
	var sum uint64
	if err != nil || msgpack.Unmarshal(data, &sum) != nil || sum != want {
		t.Fatalf("Sum(reference) = %x, %v; want %d", data, err, want)
	}
	// Another process fetches it from the owner.
	oc := objstore.NewClient(nil, testSec)
	defer oc.Close()
	got, err := oc.Fetch(ctx, ref)
	var b []byte
	if err != nil || msgpack.Unmarshal(got, &b) != nil || len(b) != n || b[5] != byte(35) {
		t.Fatalf("fetch from the worker: %d bytes, %v", len(got), err)
	}
	oc.Release(ref)
	oc.Close() // sends the release
	_, err = call("Sum", enc)
	if err == nil || !strings.Contains(err.Error(), "freed") || !strings.Contains(err.Error(), ref.ID.String()) {
		t.Fatalf("Sum of a freed object: %v, want an error naming it freed", err)
	}
}

// TestWorkerStats: asked by its node, a worker reports the calls its
// actors served per type and method (with their latency histogram) and
// the objects it holds, each tagged with the actor that made it.
func TestWorkerStats(t *testing.T) {
	ctx := context.Background()
	p := startProc(t, Events{})
	cfg, _ := msgpack.Marshal(0)
	if err := p.StartActor(ctx, actors.Spec{Type: "WBlob", Config: cfg}, actors.ActorInfo{ID: "b1"}); err != nil {
		t.Fatal(err)
	}
	cl, err := wire.Dial(ctx, testSec, "tcp", p.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	call := func(method string, arg []byte) ([]byte, error) {
		reply := actors.NewPromise()
		cl.Invoke("b1", &actors.Invocation{Method: method, Arg: arg, Reply: reply})
		return reply.Wait(ctx)
	}
	big, _ := msgpack.Marshal(1 << 20)
	small, _ := msgpack.Marshal(10)
	for _, a := range [][]byte{big, small, small} {
		if _, err := call("Make", a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := call("Sum", []byte{0xc1}); err == nil { // 0xc1 is never valid msgpack
		t.Fatal("Sum of a malformed argument succeeded")
	}
	st, err := p.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PID != p.PID() {
		t.Errorf("stats from pid %d, worker is %d", st.PID, p.PID())
	}
	calls := map[string]CallStats{}
	for _, c := range st.Calls {
		calls[c.Class+"."+c.Method] = c
	}
	mk, sum := calls["WBlob.Make"], calls["WBlob.Sum"]
	if mk.OK != 3 || mk.Errors != 0 || len(mk.Buckets) != len(CallBuckets) || mk.Buckets[len(CallBuckets)-1] != 3 || mk.Seconds <= 0 {
		t.Errorf("Make stats %+v, want 3 ok calls in the histogram", mk)
	}
	if sum.OK != 0 || sum.Errors != 1 {
		t.Errorf("Sum stats %+v, want 1 error", sum)
	}
	if st.ObjectsTotal != 1 || len(st.Objects) != 1 || st.Objects[0].Tag != "b1" || st.Objects[0].Size < 1<<20 || st.ObjectAddr == "" {
		t.Errorf("objects %+v (total %d, at %q), want the 1 MiB result of b1", st.Objects, st.ObjectsTotal, st.ObjectAddr)
	}
}

// BenchmarkCallRecorder is what counting costs a call in a worker: the
// hook's map lookup, atomic adds and histogram bucket, plus the two
// time.Now calls actors.Instance makes around the method.
func BenchmarkCallRecorder(b *testing.B) {
	hook := newCallRecorder().hook("Policy")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t0 := time.Now()
			hook("Generate", time.Since(t0), nil)
		}
	})
}
