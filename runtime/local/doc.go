// Package local is the embedded cluster: one node in the driver's process
// that is control plane and worker at once. runtime.Init returns it when
// no cluster address is given.
//
// Its control-plane state is the same scheduler.State a multi-node cluster
// replicates through raft, changed by the same commands applied directly
// (there is nobody to replicate to), so placement, GPU topology scoring,
// placement groups and queuing behave as on a cluster. Actors are
// actors.Instances in this process; calls are method calls.
//
// Its tests are runtime's (local_test.go, placement_group_test.go): they
// go through Init and CreatePlacementGroup, as a program does.
//
// # Imports
//
// local imports actors, scheduler, gpu and runtime/api; nothing of the
// network (no gRPC, raft or memberlist).
package local
