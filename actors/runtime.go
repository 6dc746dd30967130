package actors

import "context"

// Runtime places actors and delivers calls to them. Package troupe/runtime
// implements it (the embedded local cluster and the cluster client); tests
// may implement it in memory.
type Runtime interface {
	// SpawnActor creates an actor from spec and returns a reference to it
	// once its constructor has succeeded. A spawn that does not fit the free
	// resources waits (until ctx ends); one that can never fit fails at once
	// with an error wrapping ErrInfeasible.
	SpawnActor(ctx context.Context, spec Spec) (Ref, error)
	// GetActor finds a live named actor; the error wraps ErrNotFound.
	GetActor(ctx context.Context, name string) (Ref, error)
}

// Ref is a runtime's reference to one actor: where to send invocations.
type Ref interface {
	// ID is the actor's unique ID within its cluster.
	ID() string
	// Name is the actor's name, or "" for an unnamed actor.
	Name() string
	// TypeName is the registered actor type.
	TypeName() string
	// Invoke delivers a call. It never blocks on the call's execution; the
	// outcome arrives through inv.Reply. Calls from one caller run in the
	// order they were invoked.
	Invoke(inv *Invocation)
	// Kill ends the actor for good (no restart); pending and later calls
	// fail with an *ActorDiedError carrying reason.
	Kill(ctx context.Context, reason string) error
}

// Invocation is one call on its way to an actor.
type Invocation struct {
	Method string // method name, e.g. "Add"
	// Arg is the msgpack-encoded argument, unless ArgRef is set: then the
	// argument is the value of ArgRef, awaited by the callee before the call
	// runs.
	Arg    []byte
	ArgRef ObjectRef
	// Ctx is the caller's context: when it ends before the call runs, the
	// call is dropped; when it ends during the call, the method's context is
	// cancelled. Remote runtimes propagate cancellation their own way.
	Ctx context.Context
	// Reply receives the msgpack-encoded result or the error.
	Reply *Promise
}

// ObjectRef is a result that may not exist yet: a future's value as seen by
// the actor that consumes it.
type ObjectRef interface {
	// Wait blocks until the value is ready and returns its msgpack bytes.
	Wait(ctx context.Context) ([]byte, error)
}

// ActorInfo describes the actor a method or constructor runs in; see Self.
type ActorInfo struct {
	ID   string
	Name string
	Type string
	Node string
	GPUs []int // indices of the GPUs assigned to the actor on its node
	// GPUUUIDs are the NVML UUIDs of GPUs, in the same order (empty when
	// the node did not report them), so that the actor can find the same
	// devices through CUDA, whose device order may differ from NVML's.
	GPUUUIDs []string `msgpack:"gpu_uuids,omitempty"`
	// SimulatedGPUs marks GPUs of a simulated profile: there is no device to
	// compute on, and the actor's backend is metered against them instead.
	SimulatedGPUs bool `msgpack:"sim_gpus,omitempty"`
	Restarts      int  // how many times it has been restarted
	// PlacementGroup is the ID of the placement group the actor runs in
	// ("" when none), and Bundle the index of its bundle there: GPUs are
	// then devices the bundle reserved on Node.
	PlacementGroup string `msgpack:"pg,omitempty"`
	Bundle         int    `msgpack:"bundle,omitempty"`
}

type selfKey struct{}

// Epoch is the incarnation's fencing token: its committed restart count.
// The cluster commits an incarnation's epoch before the incarnation
// starts, every restart gets a larger one, and no two incarnations of an
// actor share one. troupe itself refuses calls, replies and object puts
// of an incarnation older than the newest one the refusing process has
// seen; what an actor writes outside troupe (files, databases, other
// services) is not checked by troupe: pass the epoch along with such
// writes and have the store refuse one older than the largest it has
// accepted (docs/clusters.md, "Fencing").
func (i ActorInfo) Epoch() uint64 { return uint64(i.Restarts) }

// Epoch returns the fencing token of the actor incarnation ctx belongs to
// (see ActorInfo.Epoch); ok is false outside an actor.
func Epoch(ctx context.Context) (epoch uint64, ok bool) {
	info, ok := Self(ctx)
	return info.Epoch(), ok
}

// Self returns the ActorInfo of the actor whose constructor or method is
// running with ctx.
func Self(ctx context.Context) (ActorInfo, bool) {
	info, ok := ctx.Value(selfKey{}).(*ActorInfo)
	if !ok {
		return ActorInfo{}, false
	}
	return *info, true
}

// WithSelf returns a context that carries info for Self. Runtimes use it.
func WithSelf(ctx context.Context, info *ActorInfo) context.Context {
	return context.WithValue(ctx, selfKey{}, info)
}
