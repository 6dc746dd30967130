package actors

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap them, so callers test
// with errors.Is.
var (
	// ErrNotRegistered: no actor type is registered under the name.
	ErrNotRegistered = errors.New("actor type not registered")
	// ErrBadSignature: a constructor or method has a signature the runtime
	// cannot call.
	ErrBadSignature = errors.New("bad signature")
	// ErrDuplicate: a type or actor name is already taken.
	ErrDuplicate = errors.New("duplicate name")
	// ErrNoSuchMethod: the method is not a callable method of the actor type.
	ErrNoSuchMethod = errors.New("no such method")
	// ErrNotFound: no live actor has that name.
	ErrNotFound = errors.New("actor not found")
	// ErrTypeMismatch: a handle's Go type does not match the actor's type.
	ErrTypeMismatch = errors.New("actor type mismatch")
	// ErrInfeasible: the spawn asks for more than any node of the cluster has.
	ErrInfeasible = errors.New("infeasible resource request")
	// ErrActorRestarted: the actor crashed while running this call and was
	// restarted; the call was not retried (at-most-once).
	ErrActorRestarted = errors.New("actor restarted while running the call")
	// ErrStaleIncarnation: a call, its reply or an object put named an
	// incarnation of an actor other than the one the refusing side knows
	// is current. A caller behind the cluster named an incarnation that
	// was replaced, or an incarnation the cluster replaced (its node was
	// lost) tried to act after a newer one had been seen: the old one is
	// fenced off (see ActorInfo.Epoch).
	ErrStaleIncarnation = errors.New("stale actor incarnation")
	// ErrEncode and ErrDecode: an argument or result could not be encoded or
	// decoded as msgpack.
	ErrEncode = errors.New("msgpack encode")
	ErrDecode = errors.New("msgpack decode")
)

// CallError is returned by a future when the actor's method panicked. The
// actor keeps serving later calls.
type CallError struct {
	Actor  string // actor name or ID
	Method string
	Panic  string // the panic value, formatted
	Stack  string // the goroutine stack at the panic
}

func (e *CallError) Error() string {
	return fmt.Sprintf("actor %s: method %s panicked: %s", e.Actor, e.Method, e.Panic)
}

// ActorDiedError is returned for every pending and later call of an actor
// that is dead for good: killed, out of restarts, or its constructor failed.
type ActorDiedError struct {
	Actor    string // actor name or ID
	Node     string // node that hosted it, when known
	Cause    string // why it died, for a person to read
	Restarts int    // restarts used before it died
	Err      error  // the underlying error, if any
}

func (e *ActorDiedError) Error() string {
	s := fmt.Sprintf("actor %s died: %s", e.Actor, e.Cause)
	if e.Node != "" {
		s += " (node " + e.Node + ")"
	}
	if e.Restarts > 0 {
		s += fmt.Sprintf(" after %d restart(s)", e.Restarts)
	}
	return s
}

// Unwrap returns the underlying error.
func (e *ActorDiedError) Unwrap() error { return e.Err }

// CrashError is a panic value that crashes the actor instead of failing only
// the current call: panic(actors.Crash("lost device")) behaves like the
// actor's process dying. The runtime restarts the actor within MaxRestarts.
type CrashError struct{ Reason string }

func (e *CrashError) Error() string { return "actor crashed: " + e.Reason }

// Crash returns a panic value that crashes the calling actor; see CrashError.
func Crash(reason string) *CrashError { return &CrashError{Reason: reason} }
