package cluster

import "troupe/runtime/transport"

// security is what the node's worker processes authenticate their call
// and object ports with (and their dials to other workers' ports): the
// cluster token; TLS configurations join it when the cluster has TLS.
func (n *Node) security() transport.Security {
	return transport.Security{Token: n.cfg.Token}
}
