// Package cluster is the node daemon of a multi-node troupe cluster: a gRPC
// server (the Control service, msgpack over troupe/runtime/transport), raft
// (hashicorp/raft with raft-wal storage and file snapshots, the
// scheduler.FSM as state machine) on server nodes, and memberlist gossip
// among all nodes for liveness. The raft leader turns membership changes
// into committed node states, reconciles periodically so a lost event is
// not lost for good, and decides actor placements with scheduler.Planner.
//
// Ports: a node listens for gRPC on its bind port P (default 7370), gossips
// on P+1 (TCP and UDP) and, on servers, speaks raft on P+2; each can be set
// explicitly. Every gRPC call, gossip message and raft connection is
// authenticated by the cluster token. gRPC and raft (and the ports of the
// node's worker processes) are TLS unless the node runs with --insecure:
// certificates come from the cluster CA, made by the head or derived by
// --bootstrap-expect servers, or from the operator (tls.go, runtime/pki);
// raft requires a certificate of the cluster CA from both sides.
//
// # What a node runs
//
// Node has a field per service it serves on its gRPC port, built in Start
// (newServices, services.go): control (Control: info, apply, actors), jobs
// (submitted drivers, leases, logs), groups (placement groups), gpus (GPU
// views) and list (troupe list). Start also starts the node's loops:
// gossip, raft on servers, the leader's reconcile and placer, the worker
// processes and the job manager; Shutdown stops them. nodeSvc (Node:
// EndActor) is what the leader asks of the node hosting an actor.
//
// # No actor runs twice
//
// A committed KillActor returns only once the hosting node's worker has
// ended the incarnation (kill.go). Every incarnation has an epoch, its
// committed restart count, and the wire, the workers' object stores and
// the drivers refuse a replaced incarnation by it
// (actors.ErrStaleIncarnation), so the leader restarts a lost node's
// actors after a short grace (two probe intervals), not after the node
// has surely stopped them. A node out of contact with the cluster for a
// lease still stops its worker processes itself, as the backstop for
// what epochs do not reach: an incarnation's writes outside troupe, which
// must carry the epoch as a fencing token (fence.go).
//
// # Errors
//
// Handlers return plain errors or transport.Status for a chosen code;
// either way the error crosses to the client in runtime/api's codec, so
// callers match ErrNoLeader, ErrWrongPlatform and the scheduler's
// sentinels with errors.Is. Replies that carry the state machine's verdict
// (ApplyResponse, CreateResult) hold an *api.Error.
//
// # Imports
//
// cluster imports raft, raft-wal and memberlist, and adapts the
// scheduler's FSM to raft (raftFSM, fsm.go). The messages it serves and
// the driver's client are in runtime/client (contract.go names them here),
// so a driver reaches a node without linking cluster or its dependencies.
package cluster
