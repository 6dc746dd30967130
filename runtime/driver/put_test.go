package driver

import (
	"context"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
	"troupe/runtime/transport"

	"troupe/actors"
	"troupe/runtime/objstore"
	"troupe/runtime/wire"
)

// TestRemotePut: a value larger than the wire's frame limit, put once by
// the driver, is passed to actors in two worker processes on two nodes
// several times; each worker fetches it from the driver's store (the
// driver fetches nothing), and the object is freed after Release (not
// while a call using it is in flight) or once its future is garbage
// collected; a call given a released future fails saying it was freed.
func TestRemotePut(t *testing.T) {
	const tok = "put-token"
	head, _ := startObjCluster(t, tok)
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 2, 120*time.Second)
	defer done()
	r := rt
	if r.objs.store == nil {
		t.Fatalf("the driver's object store did not start: %v", r.objs.ownErr)
	}
	st := r.objs.store
	a, err := actors.Spawn[oblob](ctx, rt, "OBlob", 0, actors.Resources(map[string]float64{"left": 1}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := actors.Spawn[oblob](ctx, rt, "OBlob", 0, actors.Resources(map[string]float64{"right": 1}))
	if err != nil {
		t.Fatal(err)
	}
	pa, err1 := actors.Call(ctx, a, (*oblob).Pid, 0).Get(ctx)
	pb, err2 := actors.Call(ctx, b, (*oblob).Pid, 0).Get(ctx)
	if err1 != nil || err2 != nil || pa == pb || pa == os.Getpid() || pb == os.Getpid() {
		t.Fatalf("actors' processes: %d, %d (driver %d): %v %v; want two worker processes", pa, pb, os.Getpid(), err1, err2)
	}
	stats := func(h actors.Handle[oblob]) objstore.Stats {
		t.Helper()
		s, err := actors.Call(ctx, h, (*oblob).Stats, 0).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// waitLen waits until the driver's store holds n objects: the driver
	// gives its reference up after the reply that ends a call (or, for a
	// dropped future, once a collection ran its cleanup).
	waitLen := func(n int, gc bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); st.Len() != n; {
			if time.Now().After(deadline) {
				t.Fatalf("the driver's store holds %d objects, want %d", st.Len(), n)
			}
			if gc {
				goruntime.GC()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	size := wire.DefaultMaxFrame + 1<<20
	v := make([]byte, size)
	for i := range v {
		v[i] = byte(i*7 + 3)
	}
	// As a plain argument it does not fit in a frame.
	if _, err := actors.Call(ctx, a, (*oblob).Len, v).Get(ctx); err == nil || !strings.Contains(err.Error(), "frame") {
		t.Fatalf("a %d-byte plain argument: %v, want the frame limit's error", size, err)
	}
	f, err := actors.Put(ctx, rt, v)
	if err != nil {
		t.Fatal(err)
	}
	v = nil
	if f.Ref().(*actors.Promise).Remote() == nil || st.Len() != 1 || st.Bytes() < int64(size) {
		t.Fatalf("Put: remote %v, the driver's store holds %d objects, %d bytes", f.Ref().(*actors.Promise).Remote(), st.Len(), st.Bytes())
	}
	driver0, sa0, sb0 := objstore.ProcessStats(), stats(a), stats(b)
	const rounds = 2
	var futs []*actors.Future[uint64]
	for range rounds {
		futs = append(futs, actors.CallRef(ctx, a, (*oblob).Sum, f), actors.CallRef(ctx, b, (*oblob).Sum, f))
	}
	for i, fu := range futs {
		if s, err := fu.Get(ctx); err != nil || s != blobSum(size) {
			t.Fatalf("call %d with the put value: sum %d, %v; want %d", i, s, err, blobSum(size))
		}
	}
	sa, sb := stats(a), stats(b)
	for _, w := range []struct {
		name   string
		s0, s1 objstore.Stats
	}{{"A", sa0, sa}, {"B", sb0, sb}} {
		if n, by := w.s1.Fetched-w.s0.Fetched, w.s1.FetchedBytes-w.s0.FetchedBytes; n != rounds || by < int64(rounds*size) || by > int64(rounds*(size+16)) {
			t.Errorf("worker %s fetched %d objects (%d bytes), want %d fetches of the %d-byte value", w.name, n, by, rounds, size)
		}
	}
	if d := objstore.ProcessStats(); d.Fetched != driver0.Fetched {
		t.Errorf("the driver fetched %d objects", d.Fetched-driver0.Fetched)
	}
	// Get on the driver reads its own store, no transfer.
	if got, err := f.Get(ctx); err != nil || len(got) != size || got[size-1] != byte((size-1)*7+3) {
		t.Fatalf("driver Get of its put value: %d bytes, %v", len(got), err)
	}
	if d := objstore.ProcessStats(); d.Fetched != driver0.Fetched || d.LocalFetches != driver0.LocalFetches+1 {
		t.Errorf("driver Get: %d fetches, %d local; want one local read", d.Fetched-driver0.Fetched, d.LocalFetches-driver0.LocalFetches)
	}

	// Released with a call using it in flight: the call still gets it,
	// then the driver frees it.
	fc := actors.CallRef(ctx, b, (*oblob).Len, f)
	f.Release()
	if n, err := fc.Get(ctx); err != nil || n != size {
		t.Fatalf("call in flight across Release: %d, %v", n, err)
	}
	waitLen(0, false)
	if st.Bytes() != 0 {
		t.Fatalf("the driver's store holds %d bytes after the release", st.Bytes())
	}
	_, err = actors.CallRef(ctx, a, (*oblob).Len, f).Get(ctx)
	if err == nil || !strings.Contains(err.Error(), "freed") {
		t.Fatalf("CallRef with a released put future: %v, want an error saying the object was freed", err)
	}

	// A dropped future is freed once garbage collected.
	func() {
		g, err := actors.Put(ctx, rt, make([]byte, 1<<20))
		if err != nil {
			t.Fatal(err)
		}
		if n, err := actors.CallRef(ctx, a, (*oblob).Len, g).Get(ctx); err != nil || n != 1<<20 {
			t.Fatalf("second put: %d, %v", n, err)
		}
	}()
	waitLen(0, true)

	// A small value travels inline: nothing is stored.
	g, err := actors.Put(ctx, rt, []byte("small"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := actors.CallRef(ctx, b, (*oblob).Len, g).Get(ctx); err != nil || n != 5 || st.Len() != 0 || g.Ref().(*actors.Promise).Remote() != nil {
		t.Fatalf("small put: %d, %v; store holds %d objects", n, err, st.Len())
	}

	rt.Shutdown(context.Background())
	if _, err := actors.Put(ctx, rt, 1); err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Fatalf("Put after Shutdown: %v", err)
	}
}

// TestDriverObjectServer: the driver's store is served over TCP at the
// address towards the cluster (and over the local socket), releases from
// other processes free its objects, and a driver that could not start its
// server fails a large Put with the reason.
func TestDriverObjectServer(t *testing.T) {
	o := newDriverObjRefs("127.0.0.1:1, 10.0.0.1:2", testSec)
	if o.store == nil {
		t.Fatal(o.ownErr)
	}
	if owner := o.store.Owner(); !strings.HasPrefix(owner, "127.0.0.1:") {
		t.Fatalf("the driver's objects are served at %s, want the local address towards 127.0.0.1", owner)
	}
	data := make([]byte, 3<<20+5)
	data[len(data)-1] = 42
	p, err := o.put(data)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := objstore.DecodeRef(p.Remote().Ref())
	if err != nil {
		t.Fatal(err)
	}
	for _, unix := range []string{"0", "1"} {
		t.Run("unix="+unix, func(t *testing.T) {
			var opts []objstore.ClientOption
			if unix == "0" {
				opts = append(opts, objstore.NoUnix())
			}
			c := objstore.NewClient(nil, testSec, opts...) // another process's client
			defer c.Close()
			got, err := c.Fetch(context.Background(), ref)
			if err != nil || len(got) != len(data) || got[len(got)-1] != 42 {
				t.Fatalf("fetch from the driver: %d bytes, %v", len(got), err)
			}
		})
	}
	// A worker's retained reference keeps it past the driver's release.
	if err := o.store.Retain(ref.ID, ref.Key); err != nil {
		t.Fatal(err)
	}
	p.Release()
	if o.store.Len() != 1 {
		t.Fatal("freed while another reference remains")
	}
	c := objstore.NewClient(nil, testSec)
	c.Release(ref)
	c.Close() // sends the queued release
	if o.store.Len() != 0 {
		t.Fatalf("the driver's store holds %d objects after every release", o.store.Len())
	}
	o.close()
	c = objstore.NewClient(nil, testSec)
	defer c.Close()
	if _, err := c.Fetch(context.Background(), ref); err == nil || !strings.Contains(err.Error(), "owner unreachable") {
		t.Fatalf("fetch after the driver closed its server: %v", err)
	}

	bad := newDriverObjRefs("no-port", testSec)
	defer bad.close()
	if _, err := bad.put(data); err == nil || !strings.Contains(err.Error(), "the driver's object store") {
		t.Fatalf("put without a server: %v", err)
	}
}

// testSec is what the tests' object servers and clients authenticate with.
var testSec = transport.Security{Token: "runtime-test-token"}
