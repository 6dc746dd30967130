package actors

import (
	"context"
	"errors"
	"fmt"
	"reflect"
)

// ObjectPutter is implemented by runtimes that can keep a value in the
// putting process and let callees fetch it from there (see Put). A runtime
// without it gets Put's in-memory fallback.
type ObjectPutter interface {
	// PutObject keeps data (msgpack bytes, which the runtime may keep
	// without copying: the caller does not modify them) and returns a
	// promise already resolved with it: with a RemoteValue naming this
	// process as the owner, or with the bytes themselves when the runtime
	// passes them inline (small values, or everything in one process).
	PutObject(ctx context.Context, data []byte) (*Promise, error)
}

// Put is ray.put: it encodes v once and returns a future resolved with it,
// to pass to any number of calls with CallRef. On a remote cluster a large
// value (256 KiB or more encoded) stays in this process, whatever its size
// (the wire's frame limit does not apply), and each callee's worker fetches
// it from here in chunks: a value used by many calls is encoded and held
// once and never travels in a call's frame. A smaller one travels inline in
// each call, as a plain argument does. The value is freed
// when the future is released (Future.Release) or garbage collected, once
// the calls it was already passed to have fetched it; a call given the
// future after Release fails, saying the object was freed.
//
// In the embedded runtime, or with a runtime that does not implement
// ObjectPutter, the future simply holds the encoded value in memory.
func Put[T any](ctx context.Context, rt Runtime, v T) (*Future[T], error) {
	data, err := marshal(v)
	if err != nil {
		return nil, fmt.Errorf("put %v: %w: %v", reflect.TypeFor[T](), ErrEncode, err)
	}
	op, ok := rt.(ObjectPutter)
	if !ok {
		if rt == nil {
			return nil, fmt.Errorf("put %v: %w", reflect.TypeFor[T](), errNilRuntime)
		}
		p := NewPromise()
		p.Resolve(data, nil)
		return &Future[T]{p: p}, nil
	}
	p, err := op.PutObject(ctx, data)
	if err != nil {
		return nil, fmt.Errorf("put %v (%d bytes): %w", reflect.TypeFor[T](), len(data), err)
	}
	if p == nil {
		return nil, fmt.Errorf("put %v (%d bytes): the runtime returned no promise", reflect.TypeFor[T](), len(data))
	}
	return &Future[T]{p: p}, nil
}

var errNilRuntime = errors.New("nil runtime")
