package actors

import (
	"context"
	"sync/atomic"
)

// Promise is the write side of a result: a runtime resolves it exactly once
// with the msgpack-encoded result or an error. It is also an ObjectRef, so a
// pending result can be handed to another call.
type Promise struct {
	done      chan struct{}
	resolved  atomic.Bool
	data      []byte
	err       error
	onResolve func([]byte, error)

	remote  RemoteValue   // set by ResolveRemote
	fetchMu chan struct{} // one fetch of remote at a time
	fetched []byte        // remote's bytes once fetched here

	driver Driver // set by SetDriver before p is shared
	token  uint64 // the driver's name for p's call
}

// Driver delivers results on demand. A transport whose replies are read by
// the goroutine waiting for them sets one on a promise: the caller that
// waits reads the reply itself, so a synchronous round trip costs no
// hand-off between goroutines (on a virtual machine, a wake-up of another
// thread that costs as much as the round trip itself).
type Driver interface {
	// Drive is called by Wait before it blocks on p. It may read results
	// until the call named token has its reply (or ctx ends), or return at
	// once when another goroutine is reading them.
	Drive(ctx context.Context, token uint64)
	// Need says a goroutine is about to block on p's Done channel without
	// calling Drive: the results must be read for it.
	Need()
}

// SetDriver makes d deliver p's result, the call that p stands for being
// named token for d. It must be called before p is shared with other
// goroutines (before the Invoke that got it returns); a transport that gets
// a promise other goroutines may already wait for calls d.Need instead.
func (p *Promise) SetDriver(d Driver, token uint64) { p.driver, p.token = d, token }

// DriverOf returns the driver set on p and its token, or nil: a runtime
// that resolves its caller's promise from a transport's promise passes the
// driver on with SetDriver.
func (p *Promise) DriverOf() (Driver, uint64) { return p.driver, p.token }

// RemoteValue is a result that another process holds. A runtime resolves a
// Promise with one instead of the value's bytes when the value is large, so
// that it travels from the process that made it straight to the process
// that uses it, not through the caller.
type RemoteValue interface {
	// Ref is the reference's encoding, which transports pass on to other
	// processes in place of the value.
	Ref() []byte
	// Fetch returns the value's msgpack bytes from the process holding it.
	Fetch(ctx context.Context) ([]byte, error)
	// Release says the program is done with the value (see Promise.Release).
	Release()
}

// NewPromise returns an unresolved promise.
func NewPromise() *Promise { return &Promise{done: make(chan struct{})} }

// NewPromiseFunc returns an unresolved promise that calls fn with the
// outcome when it is resolved, on the resolving goroutine. Transports use it
// to send a reply without a goroutine waiting per call.
func NewPromiseFunc(fn func(data []byte, err error)) *Promise {
	return &Promise{done: make(chan struct{}), onResolve: fn}
}

// Resolve sets the outcome. Later calls are ignored and report false, so a
// race between a reply and a failure resolves once.
func (p *Promise) Resolve(data []byte, err error) bool {
	if !p.resolved.CompareAndSwap(false, true) {
		return false
	}
	p.data, p.err = data, err
	close(p.done)
	if p.onResolve != nil {
		p.onResolve(data, err)
	}
	return true
}

// ResolveRemote resolves p with a value that another process holds: Wait
// fetches it on first use (and keeps it), while Result returns rv.Ref(),
// which transports forward so that the next consumer fetches the value
// itself. A promise made by NewPromiseFunc gets (rv.Ref(), nil). Later
// calls are ignored and report false.
func (p *Promise) ResolveRemote(rv RemoteValue) bool {
	if !p.resolved.CompareAndSwap(false, true) {
		return false
	}
	p.remote, p.data, p.fetchMu = rv, rv.Ref(), make(chan struct{}, 1)
	close(p.done)
	if p.onResolve != nil {
		p.onResolve(p.data, nil)
	}
	return true
}

// Remote returns the remote value p was resolved with, or nil (not
// resolved yet, or resolved with bytes or an error).
func (p *Promise) Remote() RemoteValue {
	select {
	case <-p.done:
		return p.remote
	default:
		return nil
	}
}

// Release says the program will not use the result again. A remote value
// is then freed by the process holding it once the calls it was already
// passed to have fetched it; a later Wait that has not fetched it yet fails.
// For a value held here it does nothing: the garbage collector frees it.
func (p *Promise) Release() {
	if rv := p.Remote(); rv != nil {
		rv.Release()
	}
}

// fetchRemote fetches p's remote value once; concurrent waiters share the
// fetch, and a failed fetch is tried again by the next Wait.
func (p *Promise) fetchRemote(ctx context.Context) ([]byte, error) {
	select {
	case p.fetchMu <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.fetchMu }()
	if p.fetched != nil {
		return p.fetched, nil
	}
	data, err := p.remote.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	p.fetched = data
	return data, nil
}

// Done is closed once the promise is resolved.
func (p *Promise) Done() <-chan struct{} {
	if p.driver != nil && !p.resolved.Load() {
		p.driver.Need()
	}
	return p.done
}

// Wait blocks until the promise is resolved or ctx ends. A remote value is
// fetched (once) from the process holding it.
func (p *Promise) Wait(ctx context.Context) ([]byte, error) {
	select {
	case <-p.done:
	default:
		if p.driver != nil {
			p.driver.Drive(ctx, p.token)
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if p.remote != nil {
		return p.fetchRemote(ctx)
	}
	return p.data, p.err
}

// Result returns the outcome of a resolved promise and false before that.
// For a remote value the data is its reference's encoding (RemoteValue.Ref).
func (p *Promise) Result() ([]byte, error, bool) {
	select {
	case <-p.done:
		return p.data, p.err, true
	default:
		return nil, nil, false
	}
}
