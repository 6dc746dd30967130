package cluster

import "troupe/runtime/transport"

// security is what the node's worker processes authenticate their call
// and object ports with (and their dials to other workers' ports): the
// cluster token and, unless the node runs with --insecure, the node's own
// TLS identity (they listen on its addresses; see tls.go).
func (n *Node) security() transport.Security { return n.sec }
