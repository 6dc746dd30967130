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
// The lock order is written on Driver (driver.go). Every goroutine of the
// driver is started through a group (group.go) that its owner waits for:
// Driver.Shutdown ends the job (and its keep-alives), cancels the driver's
// context (spawn waits, lookups, retries of lost calls), stops the call
// watcher and closes every wire connection, then waits for all of them;
// TestDriverShutdownLeak checks that none outlives it.
//
// # Testing
//
// The driver talks to the control plane through Control: *client.Client
// over gRPC, or client.Inmem, the same contract in memory, so its spawn
// retries, abandoned spawns and job lease run in a testing/synctest
// bubble without a node (inmem_bubble_test.go). Its waits use a Clock,
// the real one unless Config.Clock says otherwise. Tests of calls start
// real nodes (the test binary serves as their workers).
//
// # Imports
//
// driver imports runtime/client, runtime/wire, runtime/objstore,
// runtime/api, actors and scheduler. It never imports runtime/cluster,
// raft, raft-wal or memberlist (runtime's TestDriverLinksNoServer); only
// its tests start real nodes.
package driver
