// Package api is the contract between troupe's processes: what a driver,
// a node and a worker agree on however they talk: the one error codec,
// the Status a runtime reports, and the conversion of an actor's spec to
// the scheduler's request that the embedded cluster and a cluster's leader
// both plan with. The control plane's messages and its gRPC client are in
// runtime/client (which imports gRPC, so they cannot live here).
//
// # Errors
//
// An error that crosses a process boundary, in a reply of the direct call
// path (runtime/wire) or of a control-plane RPC (runtime/transport puts it
// in the gRPC status), is encoded with Encode and turned back into a Go
// error with (*Error).Err. On the receiving side errors.Is holds for every
// sentinel the sender's error wrapped, and errors.As finds the structured
// errors (*actors.CallError, *actors.ActorDiedError, *NotHostedError,
// *scheduler.InfeasibleError). Nothing classifies an error by its text.
//
// The codec names the sentinels of actors, scheduler, wire, cluster and
// runtime by a stable kind. Sentinels of runtime packages that api cannot
// import without a cycle (runtime.ErrShutdown, wire.ErrClosed,
// cluster.ErrNoLeader, ...) are defined here and re-exported there as the
// same value. A new sentinel that crosses processes gets a kind in kinds
// (errors.go); TestEverySentinelHasAKind lists what must be there.
//
// # Imports
//
// api imports actors and scheduler (for their sentinels and structured
// errors), nothing of gRPC, raft, raft-wal or memberlist, and neither do
// they (TestContractLinksNoServer checks with go list -deps). It is
// imported by wire, transport, client, cluster, local, driver and runtime;
// it never imports them.
package api
