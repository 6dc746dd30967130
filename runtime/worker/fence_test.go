package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
	"troupe/runtime/api"
	"troupe/runtime/objstore"
	"troupe/runtime/wire"
)

// TestWorkerFencesByIncarnation: a worker process runs a call only on the
// incarnation it names. A call for an older incarnation is refused
// (ErrStaleIncarnation) and the running one keeps serving; a call for a
// newer incarnation is refused too and ends the replaced one here at once
// (reported as its death), so later calls find no actor.
func TestWorkerFencesByIncarnation(t *testing.T) {
	ctx := context.Background()
	died := make(chan string, 4)
	p := startProc(t, Events{Died: func(id string, inc int, cause string) { died <- fmt.Sprintf("%s/%d", id, inc) }})
	if err := p.StartActor(ctx, spec(t, 10), actors.ActorInfo{ID: "a1", Restarts: 1}); err != nil {
		t.Fatal(err)
	}
	cl, err := wire.Dial(ctx, testSec, "tcp", p.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	add := func(inc int) (int, error) {
		pr := actors.NewPromise()
		cl.InvokeIncarnation("a1", inc, &actors.Invocation{Method: "Add", Arg: []byte{1}, Reply: pr})
		b, err := pr.Wait(ctx)
		if err != nil {
			return 0, err
		}
		var v int
		err = msgpack.Unmarshal(b, &v)
		return v, err
	}
	if v, err := add(1); err != nil || v != 11 {
		t.Fatalf("call for the running incarnation 1: %v, %v; want 11", v, err)
	}
	var se *api.StaleIncarnationError
	if _, err := add(0); !errors.As(err, &se) || !errors.Is(err, actors.ErrStaleIncarnation) || se.Called != 0 || se.Running != 1 {
		t.Fatalf("call for incarnation 0: %v, want a StaleIncarnationError (called 0, running 1)", err)
	}
	if v, err := add(1); err != nil || v != 12 {
		t.Fatalf("incarnation 1 after a stale call: %v, %v; want 12", v, err)
	}
	if _, err := add(2); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("call for incarnation 2: %v, want ErrStaleIncarnation", err)
	}
	select {
	case d := <-died:
		if d != "a1/1" {
			t.Fatalf("died = %q, want a1/1", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the replaced incarnation's end was not reported")
	}
	if _, err := add(1); !errors.Is(err, actors.ErrNotFound) {
		t.Fatalf("call for the replaced incarnation: %v, want ErrNotFound", err)
	}
}

// TestResultOfReplacedIncarnationRefused: a worker's store refuses the
// large result of an incarnation once it has seen a newer one of the same
// actor, and takes the newer one's.
func TestResultOfReplacedIncarnationRefused(t *testing.T) {
	o, err := startObjects("127.0.0.1", testSec)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	big := make([]byte, objstore.InlineMax)
	if _, err := o.result("a1", 0, big); err != nil {
		t.Fatalf("result of incarnation 0: %v", err)
	}
	o.store.Fence("a1", 1)
	if _, err := o.result("a1", 0, big); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("result of incarnation 0 after 1 was seen: %v, want ErrStaleIncarnation", err)
	}
	if b, err := o.result("a1", 0, []byte("small")); err != nil || string(b) != "small" {
		t.Fatalf("a small result travels inline (the caller's check applies): %q, %v", b, err)
	}
	if b, err := o.result("a1", 1, big); err != nil || !objstore.IsRef(b) {
		t.Fatalf("result of incarnation 1: %v", err)
	}
}

// TestEpochsRetiredWhenActorsEnd: the worker's store keeps the epoch of
// each actor running here and retires it when the actor's last
// incarnation here ends (killed, replaced by a call naming a newer one,
// or a failed start), so the store's bounded memory of ended actors
// applies (objstore.Store.Retire); a restart here makes it live again,
// and a retired epoch still refuses an older incarnation's late result.
func TestEpochsRetiredWhenActorsEnd(t *testing.T) {
	o, err := startObjects("127.0.0.1", testSec)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	node, worker := net.Pipe()
	defer node.Close()
	died := make(chan string, 64) // the node's side: the actors the worker reports dead
	go func() {
		nc := newCtrl(node)
		for {
			m, err := nc.recv()
			if err != nil {
				return
			}
			if m.Op == opDied {
				died <- m.ID
			}
		}
	}()
	c := newCtrl(worker)
	defer worker.Close()
	h := &host_{insts: map[string]running{}, objs: o}
	ctx := context.Background()
	start := func(id string, inc, from int) {
		sp := spec(t, from)
		h.start(ctx, c, &msg{Op: opStart, ID: id, Inc: inc, Spec: &sp, Info: &actors.ActorInfo{ID: id, Restarts: inc}})
	}
	const n = 50
	for i := range n {
		start(fmt.Sprintf("a%d", i), 0, 1)
	}
	start("failed", 0, -1) // its constructor fails
	if held, retired := o.store.Epochs(); held != n+1 || retired != 1 {
		t.Fatalf("after %d starts and a failed one: %d epochs, %d retired; want %d, 1", n, held, retired, n+1)
	}
	for i := range n - 1 {
		h.kill(&msg{Op: opKill, ID: fmt.Sprintf("a%d", i)})
	}
	// A call naming a newer incarnation ends the last one.
	last := fmt.Sprintf("a%d", n-1)
	if _, err := h.LookupIncarnation(last, 1); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("call naming incarnation 1: %v, want ErrStaleIncarnation", err)
	}
	for id := range died { // its end runs on a goroutine of its own, and retires before it is reported
		if id == last {
			break
		}
	}
	if _, r := o.store.Epochs(); r != n+1 {
		t.Fatalf("after every actor ended: %d retired, want %d", r, n+1)
	}
	big := make([]byte, objstore.InlineMax)
	if _, err := o.result(last, 0, big); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("late result of the replaced incarnation: %v, want ErrStaleIncarnation", err)
	}
	start("a0", 1, 1) // restarted here
	if _, r := o.store.Epochs(); r != n {
		t.Fatalf("after a restart here: %d retired, want %d", r, n)
	}
	if _, err := o.result("a0", 0, big); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("late result of a0's incarnation 0 after its restart: %v, want ErrStaleIncarnation", err)
	}
	h.killAll("done")
}
