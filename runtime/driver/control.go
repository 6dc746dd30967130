package driver

import (
	"context"
	"time"

	"troupe/runtime/client"
	"troupe/scheduler"
)

// Control is the control plane as a driver uses it: *client.Client over
// gRPC to a cluster's nodes, or client.Inmem, the same contract in memory,
// for tests that run a driver without nodes.
type Control interface {
	Info(ctx context.Context) (*client.InfoResponse, error)
	ApplyCommand(ctx context.Context, cmd scheduler.Command) (uint64, error)
	CreateActors(ctx context.Context, specs []scheduler.ActorSpec) ([]client.CreateResult, error)
	Status(ctx context.Context) (*client.ClusterStatus, error)
	GetActor(ctx context.Context, namespace, name string) (*client.ActorView, error)
	GetActorByID(ctx context.Context, id string) (*client.ActorView, error)
	WaitActor(ctx context.Context, id string, minRestarts int, timeout time.Duration) (*client.ActorView, error)
	WaitActors(ctx context.Context, ids []string, timeout time.Duration) (*client.WaitActorsResponse, error)
	KeepAlive(ctx context.Context, jobs ...string) (*client.KeepAliveResponse, error)
	CommitPlacementGroups(ctx context.Context, create []scheduler.GroupSpec, remove []scheduler.GroupID) ([]client.CreateResult, error)
	PlacementGroup(ctx context.Context, id scheduler.GroupID, wait time.Duration) (*scheduler.PlacementGroup, error)
	// UploadBinary stores the job binary on the node called (for gRPC, the
	// first address).
	UploadBinary(ctx context.Context, path, hash string) (sent bool, err error)
	Close() error
}

var (
	_ Control = (*client.Client)(nil)
	_ Control = (*client.Inmem)(nil)
)

// Clock is the driver's time: the spawn and lookup retries, the call
// watcher's checks, the keep-alives and the binary rescans wait on it.
// The real clock by default; under testing/synctest the real clock is the
// bubble's, so tests need no other.
type Clock interface {
	Now() time.Time
	// After is time.After.
	After(d time.Duration) <-chan time.Time
}

// realClock is the time package.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// noClose is a Control whose Close does nothing: the driver's own control
// plane lent for a node's upload (Connect's Config.Control).
type noClose struct{ Control }

func (noClose) Close() error { return nil }
