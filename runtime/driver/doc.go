// Package driver is the driver side of a multi-node cluster: what
// runtime.Init returns with a cluster address.
//
// Actors are placed through the control plane (runtime/client over gRPC:
// the leader places them, their node starts them in a worker process
// running this program's binary, uploaded once per node) and called
// directly over runtime/wire, one shared connection per worker. Results of
// 256 KiB or more stay with their owner (runtime/objstore) and are fetched
// when needed. The call watcher (watch.go) fails calls to incarnations
// whose node vanished; the job's keep-alives (job.go) let the leader end
// the job's actors when the driver is lost.
//
// # Concurrency
//
// The lock order is written on Driver (driver.go). Driver.Shutdown ends
// the job (and its keep-alives), the call watcher, the object server and
// every wire connection; TestDriverShutdownLeak checks that none of the
// driver's goroutines outlive it.
//
// # Imports
//
// driver imports runtime/client, runtime/wire, runtime/objstore,
// runtime/api, actors and scheduler. It never imports runtime/cluster,
// raft, raft-wal or memberlist (runtime's TestDriverLinksNoServer); only
// its tests start real nodes.
package driver
