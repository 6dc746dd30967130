package driver

import (
	"context"
	"fmt"
	"net"
	"strings"

	"troupe/actors"
	"troupe/runtime/api"
	"troupe/runtime/objstore"
	"troupe/runtime/transport"
)

// A driver's own objects (actors.Put): the driver keeps a Store like a
// worker's and serves it to the job's workers, on TCP at the address this
// host uses to reach the cluster and, for workers of this host, on the Unix
// socket beside it. Put stores the encoded value once; the future is
// resolved with a reference naming the driver as owner, so passing it to
// calls forwards the reference and each callee's worker fetches the value
// from the driver in chunks, never in a call's frame (whose size the wire
// bounds). The driver's objRefs handles such references like a worker's:
// Release and the future's garbage collection drop the driver's count,
// calls in flight pin it, and its client reads and frees the driver's own
// objects in place.

// newDriverObjRefs returns the driver's objRefs with its own store served
// to the cluster at clusterAddr (the addresses Init was given). When no
// server can be started, the driver still works, but Put of a large value
// fails with the reason. opts configure its objstore client.
func newDriverObjRefs(clusterAddr string, sec transport.Security, opts ...objstore.ClientOption) *objRefs {
	l, err := listenReachable(clusterAddr)
	if err != nil {
		o := newObjRefs(nil, sec, opts...)
		o.ownErr = err
		return o
	}
	st := objstore.NewStore(l.Addr().String())
	o := newObjRefs(st, sec, opts...)
	o.srv = objstore.NewServer(st, sec)
	o.served.Go(func() { o.srv.Serve(l) })
	if ul, err := objstore.ListenLocal(l); err == nil {
		o.served.Go(func() { o.srv.Serve(ul) })
	}
	return o
}

// listenReachable listens on a system-chosen TCP port of the local address
// that this host's route to the cluster's first address uses: the address
// the cluster's nodes (and so the job's workers) can reach the driver at.
func listenReachable(clusterAddr string) (net.Listener, error) {
	first := strings.TrimSpace(strings.Split(clusterAddr, ",")[0])
	// Connecting a UDP socket sends nothing: the kernel only picks the
	// route and with it the local address.
	c, err := net.Dial("udp", first)
	if err != nil {
		return nil, fmt.Errorf("the driver's object store: finding the local address towards the cluster at %s: %w", first, err)
	}
	host := c.LocalAddr().(*net.UDPAddr).IP.String()
	c.Close()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("the driver's object store: listen on %s: %w", host, err)
	}
	return l, nil
}

// PutObject implements actors.ObjectPutter: a value of objstore.InlineMax
// bytes or more is kept in the driver's store and the promise is resolved
// with its reference; a smaller one with its bytes, which travel inline in
// each call as a plain argument's do.
func (r *Driver) PutObject(ctx context.Context, data []byte) (*actors.Promise, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, api.ErrShutdown
	}
	if len(data) < objstore.InlineMax {
		p := actors.NewPromise()
		p.Resolve(data, nil)
		return p, nil
	}
	return r.objs.put(data)
}
