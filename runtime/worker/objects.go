package worker

import (
	"context"
	"fmt"
	"net"
	"sync"

	"troupe/runtime/objstore"
	"troupe/runtime/transport"
)

// objects is a worker's object store: results of at least
// objstore.InlineMax bytes stay here and the reply carries a reference;
// arguments that are references are fetched from their owner (or taken
// from this store when this worker is the owner) before the method runs.
type objects struct {
	store  *objstore.Store
	client *objstore.Client
	srv    *objstore.Server
	served sync.WaitGroup
}

// startObjects serves the worker's store on host (port chosen by the
// system), and to processes of this host on the Unix socket beside it;
// opts configure its client.
func startObjects(host string, sec transport.Security, opts ...objstore.ClientOption) (*objects, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("worker: object store listen: %w", err)
	}
	st := objstore.NewStore(l.Addr().String())
	o := &objects{store: st, client: objstore.NewClient(st, sec, opts...), srv: objstore.NewServer(st, sec)}
	o.served.Go(func() { o.srv.Serve(l) })
	if ul, err := objstore.ListenLocal(l); err == nil {
		o.served.Go(func() { o.srv.Serve(ul) })
	}
	return o, nil
}

func (o *objects) close() {
	o.srv.Close()
	o.served.Wait()
	o.client.Close()
}

// arg is the actors.InstanceHooks.Arg of the worker's actors. An object
// fetched from another process comes in a fresh buffer, the call's alone
// (owned); one this worker holds is the store's own slice, shared.
func (o *objects) arg(ctx context.Context, data []byte) ([]byte, bool, error) {
	if !objstore.IsRef(data) {
		return data, false, nil
	}
	ref, err := objstore.DecodeRef(data)
	if err != nil {
		return nil, false, err
	}
	b, err := o.client.Fetch(ctx, ref)
	return b, err == nil && !o.client.IsLocal(ref), err
}

// result is the actors.InstanceHooks.Result of incarnation inc of the
// worker's actor with that ID: a large result is refused when a newer
// incarnation of the actor is known here (actors.ErrStaleIncarnation).
func (o *objects) result(actor string, inc int, data []byte) ([]byte, error) {
	if len(data) < objstore.InlineMax {
		return data, nil
	}
	ref, err := o.store.PutFenced(data, actor, uint64(inc))
	if err != nil {
		return nil, err
	}
	return ref.Encode(), nil
}
