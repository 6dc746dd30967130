package driver

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"troupe/runtime/cluster"
	"troupe/runtime/wire"
	"troupe/scheduler"
)

// TestCallWatchLoop runs the watcher's own loop in bubble time: with
// nothing in flight it sleeps and asks the cluster nothing however long
// it waits; a call whose incarnation the cluster no longer runs is failed
// after exactly two looks (2 × interval) by closing its connection; close
// stops the loop, and nothing of it outlives the bubble.
func TestCallWatchLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var asked atomic.Int32
		w := newCallWatchOf(func(_ context.Context, id string) (*cluster.ActorView, error) {
			asked.Add(1)
			return &cluster.ActorView{State: scheduler.ActorAlive.String(), Restarts: 1}, nil
		}, func(context.Context) (*cluster.ClusterStatus, error) { return nil, errors.New("no status here") }, time.Second)
		go w.run()
		a, b := net.Pipe()
		cl := wire.NewClient(a, 0)

		time.Sleep(time.Hour)
		synctest.Wait()
		if n := asked.Load(); n != 0 {
			t.Fatalf("idle watcher asked the cluster %d times", n)
		}

		in := &incarnation{ref: &actorRef{id: "a1"}, cl: cl, inc: 0, node: "n1"}
		start := time.Now()
		in.begin(w)
		<-cl.Done()
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("stalled call failed after %v, want two intervals (2s)", d)
		}
		if n := asked.Load(); n != 1 {
			t.Errorf("asked the cluster %d times, want once", n)
		}
		if !errors.Is(cl.Err(), wire.ErrClosed) {
			t.Errorf("connection ended with %v, want wire.ErrClosed", cl.Err())
		}
		w.close()
		b.Close()
	})
}

// TestCallWatchAnswering: a connection whose calls keep getting replies is
// never closed, however long they take in bubble time.
func TestCallWatchAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var asked atomic.Int32
		w := newCallWatchOf(func(_ context.Context, id string) (*cluster.ActorView, error) {
			asked.Add(1)
			return &cluster.ActorView{State: scheduler.ActorDead.String()}, nil
		}, func(context.Context) (*cluster.ClusterStatus, error) { return nil, errors.New("no status here") }, time.Second)
		go w.run()
		a, b := net.Pipe()
		cl := wire.NewClient(a, 0)
		in := &incarnation{ref: &actorRef{id: "a1"}, cl: cl, node: "n1"}
		in.begin(w)
		for range 100 { // one reply every half interval, one call always pending
			time.Sleep(500 * time.Millisecond)
			in.begin(w)
			in.end()
		}
		synctest.Wait()
		if cl.Err() != nil || asked.Load() != 0 {
			t.Errorf("answering connection: err %v, cluster asked %d times", cl.Err(), asked.Load())
		}
		in.end()
		w.close()
		cl.Close()
		b.Close()
	})
}
