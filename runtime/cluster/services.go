package cluster

import (
	"google.golang.org/grpc"
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
