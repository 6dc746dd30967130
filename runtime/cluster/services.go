package cluster

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newServices builds the node's services. Each concern (jobs, placement
// groups, GPU views, lists) declares its service in its own file; this is
// the one place that says what a node serves.
func (n *Node) newServices() {
	n.control = &controlImpl{n: n}
	n.jobs = newJobManager(n)
	n.groups = &groupImpl{n: n}
	n.gpus = &gpuService{n: n}
	n.list = &listImpl{n: n}
	n.nodeSvc = &nodeImpl{n: n}
}

// registerServices registers every service of the node on srv.
func (n *Node) registerServices(srv *grpc.Server) {
	srv.RegisterService(&controlDesc, n.control)
	srv.RegisterService(&gpuDesc, n.gpus)
	srv.RegisterService(&groupDesc, n.groups)
	srv.RegisterService(&jobsDesc, n.jobs)
	srv.RegisterService(&listDesc, n.list)
	srv.RegisterService(&nodeDesc, n.nodeSvc)
}

// invokeService calls service/method on the first reachable address, like
// the Control calls: an unreachable node makes the client try the next.
func (c *Client) invokeService(ctx context.Context, service, method string, req, resp any) error {
	c.mu.Lock()
	start := c.next
	c.mu.Unlock()
	var last error
	for i := range c.addrs {
		k := (start + i) % len(c.addrs)
		addr := c.addrs[k]
		cc, err := c.conn(addr)
		if err != nil {
			last = err
			continue
		}
		err = cc.Invoke(ctx, "/"+service+"/"+method, req, resp)
		if err == nil {
			c.mu.Lock()
			c.next = k
			c.mu.Unlock()
			return nil
		}
		last = fmt.Errorf("%s at %s: %w", method, addr, err)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return last
		}
	}
	return last
}
