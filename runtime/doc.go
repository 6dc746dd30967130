// Package runtime makes actors real: Init connects a program to a cluster
// and returns the actors.Runtime that Spawn and GetActor take.
//
//	rt, err := runtime.Init(ctx)
//	if err != nil { ... }
//	defer rt.Shutdown(context.Background())
//	h, err := actors.Spawn[Counter](ctx, rt, "Counter", cfg)
//
// # What runs where
//
//   - Init and its options (runtime.go) are the edge: they read the
//     environment (TROUPE_ADDRESS, TROUPE_TOKEN, TROUPE_JOB_ID,
//     TROUPE_SIMULATE_GPUS, TROUPE_WIRE_SPIN, TROUPE_WIRE_UNIX,
//     TROUPE_OBJECTS_UNIX, and TROUPE_WORKER in a
//     worker process) and pass it down as configuration.
//   - With no address, the embedded cluster (runtime/local): one node in
//     this process running the same scheduler state machine as a real
//     cluster.
//   - With an address, the driver (runtime/driver): actors are placed
//     through the control plane (runtime/client over gRPC) and called directly over
//     runtime/wire; results of 256 KiB or more stay with their owner
//     (runtime/objstore); the call watcher fails calls to vanished nodes;
//     the job's keep-alives end its actors when the driver is lost.
//   - In a worker process (started by a node), Init serves the registered
//     actor types (runtime/worker) and returns ErrWorkerDone when the
//     node ends the worker: main returns without running driver code.
//
// # Errors
//
// Errors cross processes in runtime/api's codec: ErrShutdown,
// ErrPlacementGroupRemoved and the sentinels of actors and scheduler are
// matched with errors.Is on either side of a process boundary. After
// Shutdown, a driver's spawns, lookups and calls fail at once with
// ErrShutdown.
//
// # Imports
//
// runtime imports actors, scheduler, runtime/local, runtime/driver and the
// packages below them; nothing below it imports runtime. Neither runtime
// nor a program that imports it links runtime/cluster, raft, memberlist or
// raft-wal (TestDriverLinksNoServer runs go list -deps on testdata/driveronly).
// Placement groups (placement_group.go) are the user's API over both:
// the embedded cluster and the driver implement groupBackend.
package runtime
