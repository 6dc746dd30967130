// Package client is the client side of a cluster's control plane: the
// messages of the Control, Jobs and PlacementGroups services, the views of
// a cluster's state (ClusterStatus, ActorView), the launch record a driver
// puts in an actor's spec, and Client, which calls them over gRPC
// (runtime/transport) and fails over between the nodes it was given.
//
// A driver (runtime/driver) and the node daemon (runtime/cluster) both
// import it: the node serves these messages, the driver sends them.
//
// # Imports
//
// client imports runtime/api, runtime/transport, scheduler and actors.
// It never imports runtime/cluster, raft, raft-wal or memberlist, so a
// driver links none of them (runtime's TestDriverLinksNoServer checks
// with go list -deps).
package client
