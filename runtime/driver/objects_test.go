package driver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime/cluster"
	"troupe/runtime/objstore"
	"troupe/scheduler"
)

// oblob is the actor of the object reference tests: it makes large
// results, sums them, and reports its process's object counters.
type oblob struct{}

func (oblob) Make(ctx context.Context, n int) ([]byte, error) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b, nil
}

func (oblob) Sum(ctx context.Context, b []byte) (uint64, error) {
	var s uint64
	for _, c := range b {
		s += uint64(c)
	}
	return s, nil
}

func (oblob) Len(ctx context.Context, b []byte) (int, error) { return len(b), nil }

func (oblob) Pid(ctx context.Context, _ int) (int, error) { return os.Getpid(), nil }

func (oblob) Stats(ctx context.Context, _ int) (objstore.Stats, error) {
	return objstore.ProcessStats(), nil
}

func init() {
	actors.MustRegister[oblob]("OBlob", func(ctx context.Context, _ int) (*oblob, error) { return &oblob{}, nil })
}

func blobSum(n int) uint64 {
	var s uint64
	for i := range n {
		s += uint64(byte(i*7 + 3))
	}
	return s
}

// startObjCluster starts a head node with the custom resource "left" and a
// worker node with "right", both in this process; each runs the job's
// actors in a worker process of its own.
func startObjCluster(t testing.TB, tok string) (head, w *cluster.Node) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(discard{}, nil))
	head, err := cluster.Start(context.Background(), cluster.Config{NodeID: "head", Role: cluster.RoleHead, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), RaftPort: freeTCPPort(t), Token: tok,
		Timing: cluster.FastTiming(), Logger: logger,
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 1 << 30, Custom: scheduler.CustomResources{"left": 4}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { head.Shutdown() })
	w, err = cluster.Start(context.Background(), cluster.Config{NodeID: "w1", Role: cluster.RoleWorker, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), Token: tok, Join: []string{head.Addr()},
		Timing: cluster.FastTiming(), Logger: logger,
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 1 << 30, Custom: scheduler.CustomResources{"right": 4}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Shutdown() })
	return head, w
}

// TestRemoteObjectRefs: actor A's large result, passed with CallRef to
// actor B in another worker process, goes from A's process to B's without
// the driver ever holding it (counted, not timed); the object is freed at
// its owner after Release or once the future is garbage collected, never
// while a call using it is in flight; using a freed object fails saying so.
func TestRemoteObjectRefs(t *testing.T) {
	const tok = "objrefs-token"
	head, _ := startObjCluster(t, tok)
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 2, 60*time.Second)
	defer done()
	a, err := actors.Spawn[oblob](ctx, rt, "OBlob", 0, actors.Resources(map[string]float64{"left": 1}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := actors.Spawn[oblob](ctx, rt, "OBlob", 0, actors.Resources(map[string]float64{"right": 1}))
	if err != nil {
		t.Fatal(err)
	}
	stats := func(h actors.Handle[oblob]) objstore.Stats {
		t.Helper()
		s, err := actors.Call(ctx, h, (*oblob).Stats, 0).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// waitHeld waits (generously: releases are sent in the background,
	// and cleanups run after a garbage collection) until A holds n objects.
	waitHeld := func(n int64, gc bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if gc {
				goruntime.GC()
			}
			s := stats(a)
			if s.Held == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("A's process holds %d objects, want %d", s.Held, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	const size = 8 << 20
	driver0 := objstore.ProcessStats()
	fa := actors.Call(ctx, a, (*oblob).Make, size)
	fb := actors.CallRef(ctx, b, (*oblob).Sum, fa)
	if s, err := fb.Get(ctx); err != nil || s != blobSum(size) {
		t.Fatalf("B's sum of A's result = %d, %v; want %d", s, err, blobSum(size))
	}
	if fa.Ref().(*actors.Promise).Remote() == nil {
		t.Fatal("A's large result reached the driver as bytes, not as a reference")
	}
	if d := objstore.ProcessStats(); d.Fetched != driver0.Fetched || d.FetchedBytes != driver0.FetchedBytes {
		t.Fatalf("the driver fetched %d bytes of the object", d.FetchedBytes-driver0.FetchedBytes)
	}
	sa, sb := stats(a), stats(b)
	if sb.Fetched != 1 || sb.FetchedBytes < size || sb.FetchedBytes > size+16 || sa.Served != 1 || sa.Held != 1 {
		t.Fatalf("A served %d (%d B), holds %d; B fetched %d (%d B); want one fetch of the %d-byte object from A to B",
			sa.Served, sa.ServedBytes, sa.Held, sb.Fetched, sb.FetchedBytes, size)
	}

	// Released with a call using it in flight: the call still gets it,
	// then the owner frees it.
	fc := actors.CallRef(ctx, b, (*oblob).Sum, fa)
	fa.Release()
	if s, err := fc.Get(ctx); err != nil || s != blobSum(size) {
		t.Fatalf("call in flight across Release = %d, %v", s, err)
	}
	waitHeld(0, false)
	_, err = actors.CallRef(ctx, b, (*oblob).Sum, fa).Get(ctx)
	if err == nil || !strings.Contains(err.Error(), "freed") {
		t.Fatalf("CallRef with a released future: %v, want an error saying the object was freed", err)
	}

	// Get on the driver fetches from the owner.
	fd := actors.Call(ctx, a, (*oblob).Make, 1<<20)
	if v, err := fd.Get(ctx); err != nil || len(v) != 1<<20 || v[9] != byte(9*7+3) {
		t.Fatalf("driver Get of a large result: %d bytes, %v", len(v), err)
	}
	if d := objstore.ProcessStats(); d.FetchedBytes-driver0.FetchedBytes < 1<<20 {
		t.Errorf("driver Get fetched %d bytes", d.FetchedBytes-driver0.FetchedBytes)
	}
	// A small result is inline: nothing stored.
	if v, err := actors.Call(ctx, a, (*oblob).Make, 100).Get(ctx); err != nil || len(v) != 100 {
		t.Fatalf("small result: %d bytes, %v", len(v), err)
	}
	// Dropped futures are freed once garbage collected.
	func() {
		fe := actors.Call(ctx, a, (*oblob).Make, 2<<20)
		if s, err := actors.CallRef(ctx, b, (*oblob).Sum, fe).Get(ctx); err != nil || s != blobSum(2<<20) {
			t.Fatalf("second transfer: %d, %v", s, err)
		}
	}()
	fd = nil
	waitHeld(0, true)

	// A compiled graph's large intermediate goes from A to B the same way,
	// and is freed once the run's promises are collected.
	g, in := actors.NewGraph[int]()
	made := actors.Node(g, "make", a, (*oblob).Make, in)
	step, err := actors.Compile[int](g, actors.Node(g, "sum", b, (*oblob).Sum, made))
	if err != nil {
		t.Fatal(err)
	}
	before := objstore.ProcessStats()
	for i := range 3 {
		n := 1<<20 + i
		if s, err := step.Run(ctx, n); err != nil || s != blobSum(n) {
			t.Fatalf("graph run %d = %d, %v; want %d", i, s, err, blobSum(n))
		}
	}
	if d := objstore.ProcessStats(); d.FetchedBytes != before.FetchedBytes {
		t.Errorf("the driver fetched %d bytes of the graph's intermediates", d.FetchedBytes-before.FetchedBytes)
	}
	waitHeld(0, true)

	// The owner's process gone: using its object fails saying so, at once.
	ff := actors.Call(ctx, a, (*oblob).Make, 1<<20)
	if err := actors.WaitAll(ctx, ff); err != nil {
		t.Fatal(err)
	}
	pid, err := actors.Call(ctx, a, (*oblob).Pid, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // reaped by its node
	}
	if _, err := ff.Get(ctx); err == nil || !strings.Contains(err.Error(), "owner unreachable") {
		t.Errorf("Get of an object whose owner died: %v, want owner unreachable", err)
	}
	if _, err := actors.CallRef(ctx, b, (*oblob).Sum, ff).Get(ctx); err == nil || !strings.Contains(err.Error(), "owner unreachable") {
		t.Errorf("CallRef with an object whose owner died: %v, want owner unreachable", err)
	}
}

// TestObjRefsPins: the driver's reference is given up on Release only once
// the calls using the future as argument have ended, and by the garbage
// collector for a dropped future; many referenced bytes start a
// collection.
func TestObjRefsPins(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := objstore.NewStore(l.Addr().String())
	srv := objstore.NewServer(st, testSec)
	served := make(chan struct{})
	go func() { srv.Serve(l); close(served) }()
	defer func() { srv.Close(); <-served }()
	o := newObjRefs(nil, testSec)
	defer o.close()
	waitLen := func(n int, gc bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); st.Len() != n; {
			if time.Now().After(deadline) {
				t.Fatalf("owner holds %d objects, want %d", st.Len(), n)
			}
			if gc {
				goruntime.GC()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	p := actors.NewPromise()
	o.resolve(p, st.Put(make([]byte, 1000)).Encode(), nil)
	if p.Remote() == nil {
		t.Fatal("a reference did not resolve the promise as a remote value")
	}
	o.pin(p)
	o.pin(p)
	p.Release()
	o.unpin(p)
	if st.Len() != 1 {
		t.Fatal("freed with a call still using it")
	}
	o.unpin(p)
	waitLen(0, false)

	// Dropped without Release: the garbage collector's cleanup frees it.
	func() {
		q := actors.NewPromise()
		o.resolve(q, st.Put(make([]byte, 1000)).Encode(), nil)
	}()
	waitLen(0, true)

	// A reply refused as an older incarnation's: its object is released.
	o.discard(st.Put(make([]byte, 1000)).Encode())
	waitLen(0, false)
	o.discard([]byte{0x01}) // a plain result holds nothing
	o.discard([]byte("\xc1TOBJREF1short"))

	// Plain results and errors are resolved as they are.
	q := actors.NewPromise()
	o.resolve(q, []byte{0x01}, nil)
	if d, err, _ := q.Result(); q.Remote() != nil || err != nil || len(d) != 1 {
		t.Fatalf("plain result: %x %v", d, err)
	}
	// A malformed reference is an error, not a value.
	q = actors.NewPromise()
	o.resolve(q, []byte("\xc1TOBJREF1short"), nil)
	if _, err, _ := q.Result(); err == nil || !strings.Contains(err.Error(), "malformed object reference") {
		t.Fatalf("malformed reference: %v", err)
	}
	// A gigabyte referenced starts a collection.
	big := objstore.Ref{Owner: l.Addr().String(), Size: gcEvery}
	o.resolve(actors.NewPromise(), big.Encode(), nil)
	o.mu.Lock()
	runs := o.gcRuns
	o.mu.Unlock()
	if runs != 1 {
		t.Errorf("%d collections started after %d bytes referenced, want 1", runs, int64(gcEvery))
	}
}
