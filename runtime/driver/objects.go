package driver

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"weak"

	"troupe/actors"
	"troupe/runtime/objstore"
	"troupe/runtime/transport"
)

// objRefs is a driver's side of object references. A worker replies a
// large result as a reference (see package objstore); the driver resolves
// the call's future with an objHandle instead of bytes. Passing the future
// to another call forwards the reference, so the callee's worker fetches
// the value from its owner and the bytes never pass through the driver;
// Get fetches them here.
//
// The driver holds one reference per object and gives it up when the
// future is released (Future.Release) or garbage collected, but not while
// a call given the future as its argument is in flight: such calls pin the
// future from Invoke until their outcome, and the callee fetches its
// argument before its method runs.
//
// The driver's own heap barely grows with such results (they are held
// elsewhere), so its garbage collector might run too seldom to notice the
// dropped futures: after every gcEvery bytes of new references the driver
// starts a collection itself.
type objRefs struct {
	client *objstore.Client

	// The driver's own objects (actors.Put, put.go): store is nil
	// when no server could be started, ownErr says why.
	store  *objstore.Store
	ownErr error
	srv    *objstore.Server
	served sync.WaitGroup

	mu     sync.Mutex              // a leaf (lock order: driver.go)
	pins   map[*actors.Promise]int // futures in flight as arguments
	since  int64                   // bytes referenced since the last collection we started
	inGC   bool
	gcRuns int // collections started, for tests

	gcs group // the collections started; close waits for them
}

// gcEvery is how many bytes of new references start a garbage collection
// in the driver, so dropped futures are released before their owners run
// out of memory.
const gcEvery = 1 << 30

// newObjRefs returns the driver's references; own, when not nil, is the
// driver's own store, whose objects its client reads and frees in place.
// opts configure the client.
func newObjRefs(own *objstore.Store, sec transport.Security, opts ...objstore.ClientOption) *objRefs {
	return &objRefs{client: objstore.NewClient(own, sec, opts...), store: own, pins: map[*actors.Promise]int{}}
}

// close stops the client (sending the releases still queued) and the
// server of the driver's own objects.
func (o *objRefs) close() {
	if o == nil {
		return
	}
	o.client.Close()
	if o.srv != nil {
		o.srv.Close()
		o.served.Wait()
	}
	o.gcs.Wait()
}

// put keeps data in the driver's own store and returns a promise resolved
// with its reference, held like a worker's result: freed on Release or
// garbage collection, once the calls using it have ended.
func (o *objRefs) put(data []byte) (*actors.Promise, error) {
	if o.store == nil {
		return nil, o.ownErr
	}
	ref := o.store.Put(data)
	p := actors.NewPromise()
	h := &objHandle{o: o, ref: ref, enc: ref.Encode(), self: weak.Make(p)}
	p.ResolveRemote(h) // p is new: it cannot have been resolved
	goruntime.AddCleanup(p, func(h *objHandle) { h.Release() }, h)
	return p, nil
}

// pin marks a call's argument future as in use until unpin.
func (o *objRefs) pin(ref actors.ObjectRef) {
	p, ok := ref.(*actors.Promise)
	if o == nil || !ok {
		return
	}
	o.mu.Lock()
	o.pins[p]++
	o.mu.Unlock()
}

// unpin ends a pin; a release asked for meanwhile happens now.
func (o *objRefs) unpin(ref actors.ObjectRef) {
	p, ok := ref.(*actors.Promise)
	if o == nil || !ok {
		return
	}
	o.mu.Lock()
	n := o.pins[p] - 1
	if n > 0 {
		o.pins[p] = n
		o.mu.Unlock()
		return
	}
	delete(o.pins, p)
	h, _ := p.Remote().(*objHandle)
	free := h != nil && h.wanted && !h.released
	if free {
		h.released = true
	}
	o.mu.Unlock()
	if free {
		o.client.Release(h.ref)
	}
}

// discard gives up a reply nobody will receive (the answer of an
// incarnation that is no longer the actor's): a large result the worker
// kept in its store is released at its owner, which would otherwise hold
// it until its process ends.
func (o *objRefs) discard(data []byte) {
	if o == nil || !objstore.IsRef(data) {
		return
	}
	if ref, err := objstore.DecodeRef(data); err == nil {
		o.client.Release(ref)
	}
}

// resolve delivers a call's outcome to p: a reference from the worker
// becomes a remote value, anything else is resolved as it is.
func (o *objRefs) resolve(p *actors.Promise, data []byte, err error) {
	if o == nil || err != nil || !objstore.IsRef(data) {
		p.Resolve(data, err)
		return
	}
	ref, derr := objstore.DecodeRef(data)
	if derr != nil {
		p.Resolve(nil, fmt.Errorf("result from the worker: %w", derr))
		return
	}
	h := &objHandle{o: o, ref: ref, enc: data, self: weak.Make(p)}
	if !p.ResolveRemote(h) {
		o.client.Release(ref) // p was already resolved (failed locally): nobody holds this
		return
	}
	goruntime.AddCleanup(p, func(h *objHandle) { h.Release() }, h)
	o.mu.Lock()
	o.since += ref.Size
	collect := o.since >= gcEvery && !o.inGC
	if collect {
		o.since, o.inGC = 0, true
		o.gcRuns++
	}
	o.mu.Unlock()
	if collect {
		o.gcs.Go(func() {
			goruntime.GC()
			o.mu.Lock()
			o.inGC = false
			o.mu.Unlock()
		})
	}
}

// wireArg prepares a call's argument future for the wire: the value or the
// reference it was resolved with, never a fetch here.
func wireArg(out *actors.Invocation) {
	p, ok := out.ArgRef.(*actors.Promise)
	if !ok {
		return
	}
	if data, err, ready := p.Result(); ready && err == nil {
		out.Arg, out.ArgRef = data, nil
		return
	}
	out.ArgRef = rawArg{p}
}

// rawArg waits for a future and yields what it was resolved with: a
// remote value's reference rather than its bytes.
type rawArg struct{ p *actors.Promise }

func (r rawArg) Wait(ctx context.Context) ([]byte, error) {
	select {
	case <-r.p.Done():
		data, err, _ := r.p.Result()
		return data, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// objHandle is the driver's reference to one object: the RemoteValue its
// future was resolved with.
type objHandle struct {
	o    *objRefs
	ref  objstore.Ref
	enc  []byte
	self weak.Pointer[actors.Promise] // the future's promise (weak: its cleanup releases h)

	wanted, released bool // under o.mu
}

// Ref implements actors.RemoteValue.
func (h *objHandle) Ref() []byte { return h.enc }

// Fetch implements actors.RemoteValue: the bytes come from the owner.
func (h *objHandle) Fetch(ctx context.Context) ([]byte, error) { return h.o.client.Fetch(ctx, h.ref) }

// Release implements actors.RemoteValue: the driver's reference is given
// up now, or when the last call using the future as argument ends.
func (h *objHandle) Release() {
	o := h.o
	o.mu.Lock()
	h.wanted = true
	if p := h.self.Value(); h.released || p != nil && o.pins[p] > 0 {
		o.mu.Unlock()
		return
	}
	h.released = true
	o.mu.Unlock()
	o.client.Release(h.ref)
}
