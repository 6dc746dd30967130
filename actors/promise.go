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

// Done is closed once the promise is resolved.
func (p *Promise) Done() <-chan struct{} { return p.done }

// Wait blocks until the promise is resolved or ctx ends.
func (p *Promise) Wait(ctx context.Context) ([]byte, error) {
	select {
	case <-p.done:
		return p.data, p.err
	default:
	}
	select {
	case <-p.done:
		return p.data, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Result returns the outcome of a resolved promise and false before that.
func (p *Promise) Result() ([]byte, error, bool) {
	select {
	case <-p.done:
		return p.data, p.err, true
	default:
		return nil, nil, false
	}
}
