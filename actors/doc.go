// Package actors is troupe's programming model: register actor types, spawn
// them, call their methods through typed handles, and combine the results as
// futures.
//
// An actor type is a Go type T with a constructor
//
//	func(ctx context.Context, cfg C) (*T, error)
//
// registered once under a name:
//
//	func init() { actors.Register("Counter", NewCounter) }
//
// Every exported method of *T of the form
//
//	func(ctx context.Context, arg A) (R, error)
//
// becomes callable. A program spawns actors through a Runtime (the embedded
// local cluster or a remote one, both from package troupe/runtime) and calls
// them with method expressions, which the compiler checks:
//
//	h, err := actors.Spawn[Counter](ctx, rt, "Counter", CounterConfig{Start: 1})
//	fut := actors.Call(ctx, h, (*Counter).Add, 5)
//	n, err := fut.Get(ctx)
//
// Arguments and results always travel as msgpack, in process too, so a
// program that works on the embedded cluster works on a real one. Each actor
// runs its calls one at a time in arrival order unless spawned with
// MaxConcurrency. A future may be passed as the argument of another call with
// CallRef; the callee waits for it, so results flow between actors without
// passing through the caller.
//
// This package holds no networking: a Runtime implementation (package
// troupe/runtime) places actors and delivers invocations, and hosts actor
// instances with NewInstance.
package actors
