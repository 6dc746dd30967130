package cluster

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A nodeService is a gRPC service a node serves beside Control. Each
// concern (jobs, placement groups, GPU views) declares its own service in
// its own file and adds it with registerNodeService from an init function,
// so the Control descriptor does not grow with every feature.
type nodeService struct {
	desc *grpc.ServiceDesc
	impl func(n *Node) any
}

var nodeServices []nodeService

// registerNodeService adds a service every node serves on its gRPC port;
// impl returns the handler value for a node (usually a named type
// converted from *Node). It must be called from init.
func registerNodeService(desc *grpc.ServiceDesc, impl func(n *Node) any) {
	nodeServices = append(nodeServices, nodeService{desc: desc, impl: impl})
}

// registerServices registers Control and every node service on srv.
func (n *Node) registerServices(srv *grpc.Server) {
	srv.RegisterService(&controlDesc, (*controlImpl)(n))
	for _, s := range nodeServices {
		srv.RegisterService(s.desc, s.impl(n))
	}
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
