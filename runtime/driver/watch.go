package driver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"troupe/runtime/client"
	"troupe/runtime/wire"
	"troupe/scheduler"
)

// A worker whose whole node vanishes (killed container, cut network)
// sends no TCP reset: the driver's connection to it stays open and the
// calls in flight there would wait forever, even after the cluster has
// declared the node dead and restarted its actors elsewhere. The call
// watcher closes such connections: a connection whose calls in flight
// have all gone unanswered for a whole watch interval, each to an
// incarnation the committed cluster state no longer runs (the actor died
// or restarted), is closed, which fails those calls through the lost-
// incarnation path (ErrActorRestarted, a retry with MaxTaskRetries, or the
// actor's *ActorDiedError naming its node and cause).
//
// The watcher costs nothing while no call is in flight, and asks the
// cluster only about actors whose calls got no reply for a whole interval
// (one GetActor each, or one Status when there are many).

// watchInterval is how often the watcher looks at the calls in flight; a
// call is stalled when its incarnation answered nothing for that long.
const watchInterval = time.Second

// watchStatusOver is how many stalled actors make the watcher read one
// cluster Status instead of asking for each actor.
const watchStatusOver = 32

// incarnation is where one incarnation of an actor serves calls, with the
// calls sent to it that are still waiting for a reply.
type incarnation struct {
	ref  *actorRef
	cl   *wire.Client
	inc  int    // the actor's restart count when resolved
	node string // the node it runs on

	pending atomic.Int64  // calls sent and not answered
	replies atomic.Uint64 // answers received so far
	watched atomic.Bool   // registered with the watcher

	// The watcher's view, under callWatch.mu.
	busy        bool   // had calls pending at the last look
	lastReplies uint64 // replies then
}

// begin counts a call sent to the incarnation and makes sure the watcher
// follows it.
func (in *incarnation) begin(w *callWatch) {
	in.pending.Add(1)
	if !in.watched.Load() && in.watched.CompareAndSwap(false, true) {
		w.add(in)
	}
}

// end counts a reply (or a local failure) of a call begun on it.
func (in *incarnation) end() {
	in.replies.Add(1)
	in.pending.Add(-1)
}

// callWatch follows the incarnations that have calls in flight (see the
// comment at the top of this file).
type callWatch struct {
	// actor and status read the committed cluster state.
	actor    func(ctx context.Context, id string) (*client.ActorView, error)
	status   func(ctx context.Context) (*client.ClusterStatus, error)
	interval time.Duration
	clock    Clock

	mu   sync.Mutex // after actorRef.mu, before wire.Client's lock (lock order: driver.go)
	incs map[*incarnation]struct{}
	wake chan struct{} // the first incarnation was added
	stop chan struct{}
	done chan struct{}
	// ctx ends with close, ending the watcher's RPCs; closes owns the
	// goroutines closing connections, which close waits for.
	ctx    context.Context
	cancel context.CancelFunc
	closes group
}

func newCallWatch(c Control, clock Clock, interval time.Duration) *callWatch {
	w := newCallWatchOf(c.GetActorByID, c.Status, interval)
	w.clock = clock
	go w.run()
	return w
}

// newCallWatchOf returns a watcher reading the cluster state through actor
// and status, not yet running.
func newCallWatchOf(actor func(context.Context, string) (*client.ActorView, error),
	status func(context.Context) (*client.ClusterStatus, error), interval time.Duration) *callWatch {
	ctx, cancel := context.WithCancel(context.Background())
	return &callWatch{actor: actor, status: status, interval: interval, clock: realClock{}, incs: map[*incarnation]struct{}{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// close stops the watcher and waits for it.
func (w *callWatch) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.cancel()
	<-w.done
	w.closes.Wait()
}

func (w *callWatch) add(in *incarnation) {
	w.mu.Lock()
	w.incs[in] = struct{}{}
	first := len(w.incs) == 1
	w.mu.Unlock()
	if first {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *callWatch) run() {
	defer close(w.done)
	for {
		w.mu.Lock()
		idle := len(w.incs) == 0
		w.mu.Unlock()
		if idle {
			// Nothing in flight: sleep until a call is sent.
			select {
			case <-w.stop:
				return
			case <-w.wake:
			}
		}
		select {
		case <-w.stop:
			return
		case <-w.clock.After(w.interval):
		}
		w.check()
	}
}

// check looks at every watched incarnation once and closes the
// connections whose calls are all stalled on incarnations the cluster
// no longer runs; it returns them.
func (w *callWatch) check() []*wire.Client {
	stalled := w.scan()
	if len(stalled) == 0 {
		return nil
	}
	gone := w.gone(stalled)
	// A connection is closed only when every incarnation with calls
	// pending on it is stalled and gone: one that still answers, or that
	// the cluster still runs there, means the worker is alive.
	verdict := map[*wire.Client]bool{}
	w.mu.Lock()
	for in := range w.incs {
		if in.pending.Load() == 0 {
			continue
		}
		ok, seen := verdict[in.cl]
		if seen && !ok {
			continue
		}
		verdict[in.cl] = gone[in]
	}
	w.mu.Unlock()
	var closed []*wire.Client
	for cl, dead := range verdict {
		if dead && cl.Err() == nil {
			// Close waits for the reader; the pending calls fail with
			// wire.ErrClosed, which their actorRef turns into a restart,
			// a retry or the actor's death.
			w.closes.Go(func() { cl.Close() })
			closed = append(closed, cl)
		}
	}
	return closed
}

// scan updates the watcher's view, drops incarnations with nothing in
// flight, and returns the stalled ones: calls pending now and at the last
// look, with no reply in between.
func (w *callWatch) scan() []*incarnation {
	w.mu.Lock()
	defer w.mu.Unlock()
	var stalled []*incarnation
	for in := range w.incs {
		if in.pending.Load() == 0 {
			delete(w.incs, in)
			in.busy = false
			in.watched.Store(false)
			// A call begun meanwhile may have seen watched still set:
			// keep following it then.
			if in.pending.Load() > 0 && in.watched.CompareAndSwap(false, true) {
				w.incs[in] = struct{}{}
			}
			continue
		}
		rep := in.replies.Load()
		if in.busy && rep == in.lastReplies && in.cl.Err() == nil {
			stalled = append(stalled, in)
		}
		in.busy, in.lastReplies = true, rep
	}
	return stalled
}

// gone asks the cluster which of the stalled incarnations it no longer
// runs: the actor is dead, or restarted since. An actor the cluster cannot
// report on now counts as still running.
func (w *callWatch) gone(stalled []*incarnation) map[*incarnation]bool {
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second) // close does not wait for a slow cluster
	defer cancel()
	out := make(map[*incarnation]bool, len(stalled))
	judge := func(in *incarnation, v *client.ActorView) {
		out[in] = v.State == scheduler.ActorDead.String() || v.Restarts > in.inc
	}
	byID := map[string][]*incarnation{}
	for _, in := range stalled {
		byID[in.ref.id] = append(byID[in.ref.id], in)
	}
	if len(byID) > watchStatusOver {
		if st, err := w.status(ctx); err == nil && st.ActorsOmitted == 0 {
			for i := range st.Actors {
				for _, in := range byID[st.Actors[i].ID] {
					judge(in, &st.Actors[i])
				}
			}
			return out
		}
	}
	for id, ins := range byID {
		v, err := w.actor(ctx, id)
		if err != nil {
			continue
		}
		for _, in := range ins {
			judge(in, v)
		}
	}
	return out
}
