package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/actors"
	"troupe/runtime/api"
	"troupe/runtime/client"
	"troupe/runtime/wire"
	"troupe/scheduler"
)

// actorRef is a driver's reference to an actor of a remote cluster. It
// caches where the actor's current incarnation serves calls; when that
// connection is lost or the incarnation is gone, the calls in flight fail
// (at-most-once) with an error saying whether the actor restarted or died,
// and later calls look the actor up again.
type actorRef struct {
	r             *Driver
	id, name, typ string
	maxRetries    int // MaxTaskRetries: resends of a call lost to a restart (-1: always)

	// newest is the driver's newest incarnation seen of the actor
	// (epochs.of; nil: looked up in the driver's table). A reply is
	// checked against it, so the reference keeps it though the driver's
	// table drops it (epochs.go).
	newest *epoch

	mu        sync.Mutex   // before callWatch.mu, wire.Client's lock and leaves (lock order: driver.go)
	cur       *incarnation // nil until resolved, or after the incarnation was lost
	resolving bool
	queue     []queued // calls waiting for a resolution, in order
}

// queued is a call waiting for the actor's address; attempt counts the
// times it was already sent and lost to a restart.
type queued struct {
	inv     *actors.Invocation
	attempt int
}

func (a *actorRef) ID() string       { return a.id }
func (a *actorRef) Name() string     { return a.name }
func (a *actorRef) TypeName() string { return a.typ }

func (a *actorRef) label() string {
	if a.name != "" {
		return a.typ + "(" + a.name + ")"
	}
	return a.typ + "(" + a.id + ")"
}

// resolveTimeout bounds how long a call waits for a restarting actor.
const resolveTimeout = 60 * time.Second

// resolve waits until the actor is alive and connects to its worker.
func (a *actorRef) resolve(ctx context.Context) error {
	cl, inc, node, err := a.r.waitAlive(ctx, a.id, a.label(), a.newest)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.cur = &incarnation{ref: a, cl: cl, inc: inc, node: node}
	a.mu.Unlock()
	return nil
}

// Invoke implements actors.Ref. It never blocks on a lookup: while the
// actor is being looked up, calls queue in order.
// A future given as the argument is pinned until the call ends, so the
// object it refers to outlives the callee's fetch.
func (a *actorRef) Invoke(inv *actors.Invocation) {
	a.r.objs.pin(inv.ArgRef)
	a.invoke(inv, 0)
}

// newestInc is the newest incarnation of the actor the driver has seen.
func (a *actorRef) newestInc() int {
	if a.newest != nil {
		return a.newest.load()
	}
	return a.r.epochs.newest(a.id)
}

// finish delivers a call's final outcome (a large result as a reference
// to the object its worker keeps) and unpins its argument.
func (a *actorRef) finish(inv *actors.Invocation, data []byte, err error) {
	a.r.objs.resolve(inv.Reply, data, err)
	a.r.objs.unpin(inv.ArgRef)
}

func (a *actorRef) invoke(inv *actors.Invocation, attempt int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur != nil && a.cur.cl.Err() == nil && !a.resolving {
		newest := a.newestInc()
		if newest <= a.cur.inc {
			// A first attempt is sent by the caller's Invoke: nobody waits
			// for its promise yet.
			a.send(a.cur, inv, attempt, attempt == 0)
			return
		}
		// The driver has seen a newer incarnation (through another
		// reference): tell the old one's worker, which ends it, and look
		// the actor up again.
		a.fenceOld(a.cur.cl, newest)
	}
	a.cur = nil
	a.queue = append(a.queue, queued{inv, attempt})
	if !a.resolving {
		a.resolving = true
		a.r.goroutines.Go(a.resolveQueued)
	}
}

func (a *actorRef) resolveQueued() {
	ctx, cancel := context.WithTimeout(a.r.ctx, resolveTimeout)
	cl, inc, node, err := a.r.waitAlive(ctx, a.id, a.label(), a.newest)
	cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.queue
	a.queue, a.resolving = nil, false
	if err == nil {
		a.cur = &incarnation{ref: a, cl: cl, inc: inc, node: node}
	}
	// Sent under the lock so later calls cannot overtake queued ones.
	for _, c := range q {
		if err != nil {
			a.finish(c.inv, nil, fmt.Errorf("call %s.%s: %w", a.label(), c.inv.Method, err))
		} else {
			a.send(a.cur, c.inv, c.attempt, false)
		}
	}
}

// send delivers inv to the incarnation in; a reply saying the incarnation
// is gone is turned into ErrActorRestarted (or, with MaxTaskRetries left,
// the call is sent again to the next incarnation) or the actor's
// *ActorDiedError. The call watcher follows the call until its reply
// (watch.go), so a call to a node that vanished fails once the
// cluster has declared the node dead.
//
// fresh says the caller's promise is not yet shared, so the connection's
// driver can be set on it: the caller's Wait then reads the reply itself.
// Otherwise somebody may already wait for it, and the connection is told
// to read in the background.
func (a *actorRef) send(in *incarnation, inv *actors.Invocation, attempt int, fresh bool) {
	cl, inc, node := in.cl, in.inc, in.node
	out := *inv
	wireArg(&out) // a future argument's reference, not its bytes
	in.begin(a.r.watch)
	out.Reply = actors.NewPromiseFunc(func(data []byte, err error) {
		in.end()
		// notRun: the worker refused the call before running it, as it
		// runs a newer incarnation than the call named (the worker's
		// *StaleIncarnationError).
		var se *api.StaleIncarnationError
		notRun := errors.As(err, &se) && se.Actor == a.id && se.Called < se.Running
		if newest := a.newestInc(); err == nil && newest > inc {
			// A newer incarnation exists: this one's answer is not the
			// actor's (it may have run on a node the cluster lost). A
			// large result it left in its worker's store is released.
			a.r.objs.discard(data)
			data, err = nil, &api.StaleIncarnationError{Actor: a.id, Called: newest, Running: inc}
		}
		if err == nil || !a.incarnationGone(cl, err) {
			a.finish(inv, data, err)
			return
		}
		// Not inline: cl.Invoke may resolve on the caller's goroutine,
		// which holds a.mu.
		a.r.goroutines.Go(func() {
			a.forget(cl, inc)
			lerr := a.lostErr(inv.Method, inc, node, err)
			if errors.Is(lerr, actors.ErrActorRestarted) && (inv.Ctx == nil || inv.Ctx.Err() == nil) {
				switch {
				case notRun:
					// It ran nowhere: send it to the incarnation that runs
					// now, as a first attempt (lostErr saw a newer one, so
					// this ends within the actor's restarts).
					a.invoke(inv, attempt)
					return
				case a.maxRetries < 0 || attempt < a.maxRetries:
					a.invoke(inv, attempt+1)
					return
				}
			}
			a.finish(inv, nil, lerr)
		})
	})
	cl.InvokeIncarnation(a.id, inc, &out) // the worker refuses it unless incarnation inc runs there
	if d, token := out.Reply.DriverOf(); d != nil {
		if fresh {
			inv.Reply.SetDriver(d, token)
		} else {
			d.Need()
		}
	}
}

// fenceOld tells the worker behind cl that incarnation newest of the
// actor exists: a call naming it, which that worker refuses and which
// ends the older incarnation it runs (worker.LookupIncarnation). Nobody
// waits for the answer.
func (a *actorRef) fenceOld(cl *wire.Client, newest int) {
	p := actors.NewPromise()
	cl.InvokeIncarnation(a.id, newest, &actors.Invocation{Method: fenceMethod, Reply: p})
	if d, _ := p.DriverOf(); d != nil {
		d.Need() // its reply is read in the background
	}
}

// fenceMethod is the method of fenceOld's call: no actor has it, so a
// worker that does run incarnation newest answers ErrNoSuchMethod.
const fenceMethod = "troupe.fence"

// incarnationGone reports whether err means the incarnation that cl served
// is gone: the connection was lost, the worker no longer hosts the actor,
// or the actor itself died inside the worker (the cluster may restart it).
// Errors a method returned (even an ActorDiedError about another actor)
// are not.
func (a *actorRef) incarnationGone(cl *wire.Client, err error) bool {
	if cl.Err() != nil || errors.Is(err, wire.ErrClosed) {
		return true
	}
	var de *actors.ActorDiedError
	if errors.As(err, &de) && de.Actor == a.label() {
		return true
	}
	var nh *api.NotHostedError
	var se *api.StaleIncarnationError
	return (errors.As(err, &nh) && nh.Actor == a.id) || (errors.As(err, &se) && se.Actor == a.id)
}

// forget drops the cached incarnation so the next call looks it up again.
func (a *actorRef) forget(cl *wire.Client, inc int) {
	a.mu.Lock()
	if a.cur != nil && a.cur.cl == cl && a.cur.inc == inc {
		a.cur = nil
	}
	a.mu.Unlock()
}

// lostErr asks the cluster what became of the incarnation: dead for good
// gives its *ActorDiedError, restarted gives ErrActorRestarted.
func (a *actorRef) lostErr(method string, inc int, node string, cause error) error {
	ctx, cancel := context.WithTimeout(a.r.ctx, 30*time.Second)
	defer cancel()
	for {
		v, err := a.r.client.GetActorByID(ctx, a.id)
		if err == nil {
			a.r.seen(a.id, a.newest, v)
			switch {
			case v.State == scheduler.ActorDead.String():
				return &actors.ActorDiedError{Actor: a.label(), Node: node, Cause: v.Death, Restarts: v.Restarts, Err: cause}
			case v.Restarts > inc:
				return fmt.Errorf("call %s.%s: %w (at-most-once, not retried): %s", a.label(), method, actors.ErrActorRestarted, v.Death)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("call %s.%s: connection to the actor's worker on node %s lost and its fate unknown: %w", a.label(), method, node, cause)
		case <-a.r.clock.After(20 * time.Millisecond):
		}
	}
}

// seen records what a lookup of actor id found in ep, the epoch of the
// reference that looked: its committed incarnation; and if the actor is
// dead, the driver's table forgets it (after the incarnation is recorded,
// so every reference that shares ep has it).
func (r *Driver) seen(id string, ep *epoch, v *client.ActorView) {
	if ep == nil {
		ep = r.epochs.of(id)
	}
	ep.see(v.Restarts)
	if v.State == scheduler.ActorDead.String() {
		r.epochs.forget(ep)
	}
}

// Kill implements actors.Ref: the actor is killed through the control
// plane, for good.
func (a *actorRef) Kill(ctx context.Context, reason string) error {
	if reason == "" {
		reason = "killed"
	}
	if _, err := a.r.client.ApplyCommand(ctx, &scheduler.KillActor{Actor: scheduler.ActorID(a.id), Cause: reason, At: a.r.clock.Now().UnixNano()}); err != nil {
		return fmt.Errorf("kill %s: %w", a.label(), err)
	}
	// Later calls through this ref look the actor up (and find it dead)
	// instead of racing the node, which ends the instance within a tick.
	// Dead for good: the driver's table forgets it (epochs.go).
	if a.newest != nil {
		a.r.epochs.forget(a.newest)
	}
	a.mu.Lock()
	a.cur = nil
	a.mu.Unlock()
	return nil
}

// waitAlive waits (on the cluster side) until the actor is alive with an
// address, and connects to that address. What it learns of the actor's
// incarnations goes to ep, the epoch of the reference that waits.
func (r *Driver) waitAlive(ctx context.Context, id, label string, ep *epoch) (*wire.Client, int, string, error) {
	for {
		if r.isClosed() { // the driver's connections are gone: nothing to wait for
			return nil, 0, "", fmt.Errorf("actor %s: %w", label, api.ErrShutdown)
		}
		wait := 10 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, dl.Sub(r.clock.Now()))
		}
		v, err := r.client.WaitActor(ctx, id, 0, wait)
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, "", fmt.Errorf("waiting for actor %s to start: %w", label, ctx.Err())
			}
			if status.Code(err) == codes.NotFound {
				return nil, 0, "", fmt.Errorf("actor %s: %w", label, actors.ErrNotFound)
			}
		} else {
			r.seen(id, ep, v)
			switch {
			case v.State == scheduler.ActorDead.String():
				return nil, 0, "", &actors.ActorDiedError{Actor: label, Node: v.Node, Cause: v.Death, Restarts: v.Restarts}
			case v.State == scheduler.ActorAlive.String() && v.Address != "":
				cl, err := r.conn(ctx, v.Address)
				if err == nil {
					return cl, v.Restarts, v.Node, nil
				}
				// Its worker is unreachable: wait for what replaces it, or
				// for the same one to answer.
			}
		}
		select {
		case <-ctx.Done():
			return nil, 0, "", fmt.Errorf("waiting for actor %s to start: %w", label, ctx.Err())
		case <-r.clock.After(10 * time.Millisecond):
		}
	}
}
