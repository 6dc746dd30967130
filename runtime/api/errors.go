package api

import (
	"context"
	"errors"
	"fmt"

	"troupe/actors"
	"troupe/scheduler"
)

// Sentinel errors of the runtime's packages that cross process
// boundaries. They are defined here, in the leaf every side imports, so
// the codec can name them; the packages that return them re-export them
// (runtime.ErrShutdown is api.ErrShutdown, the same value).
var (
	// ErrShutdown: the runtime was shut down (runtime.ErrShutdown).
	ErrShutdown = errors.New("runtime is shut down")
	// ErrPlacementGroupRemoved: the placement group was removed (by Remove,
	// or with the job that created it) (runtime.ErrPlacementGroupRemoved).
	ErrPlacementGroupRemoved = errors.New("placement group removed")

	// ErrFrameTooLarge: a frame exceeds the connection's limit
	// (wire.ErrFrameTooLarge).
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrMalformedFrame: a frame could not be decoded (wire.ErrMalformed).
	ErrMalformedFrame = errors.New("wire: malformed frame")
	// ErrClosed: the connection is closed (wire.ErrClosed).
	ErrClosed = errors.New("wire: connection closed")
	// ErrUnauthenticated: a connection between troupe processes failed the
	// token or TLS handshake (transport.ErrUnauthenticated).
	ErrUnauthenticated = errors.New("transport: peer not authenticated")

	// ErrNoLeader: no raft leader could be reached within the bounded retry;
	// the control plane has lost its quorum or is electing
	// (cluster.ErrNoLeader).
	ErrNoLeader = errors.New("no raft leader")
	// ErrWrongPlatform: an uploaded binary is not an executable for the
	// node's OS and architecture (cluster.ErrWrongPlatform).
	ErrWrongPlatform = errors.New("binary is for another OS or architecture")
	// ErrBadPackage: an archive is not a working directory troupe packed
	// (cluster.ErrBadPackage).
	ErrBadPackage = errors.New("bad working-directory archive")
	// ErrNotRunnable: the command of a job cannot be run as given
	// (cluster.ErrNotRunnable).
	ErrNotRunnable = errors.New("cannot run")
	// ErrBadFilter: a list filter is malformed or names no field of the
	// kind (cluster.ErrBadFilter).
	ErrBadFilter = errors.New("bad filter")
	// ErrUnknownKind: a list was asked for a kind the node does not know
	// (cluster.ErrUnknownKind).
	ErrUnknownKind = errors.New("unknown kind")
)

// NotHostedError is a worker's answer to a call for an actor it does not
// host (any more): the caller's cached address is stale. It matches
// actors.ErrNotFound. It is an error of the call path, never of a method,
// so a caller can tell it from an ErrNotFound a method returned about
// another actor.
type NotHostedError struct{ Actor string }

func (e *NotHostedError) Error() string {
	return "actor " + e.Actor + ": " + actors.ErrNotFound.Error() + " on this worker"
}

// Is reports that a NotHostedError is an actors.ErrNotFound.
func (e *NotHostedError) Is(target error) bool { return target == actors.ErrNotFound }

// StaleIncarnationError is a worker's answer to a call that names an
// incarnation of an actor other than the one it runs (wire.FencedHost):
// Called is the incarnation the call named, Running the one there. Called
// below Running: the caller is behind. Called above Running: the one there
// was replaced, and the worker ends it. It is an
// actors.ErrStaleIncarnation, and an error of the call path, never of a
// method.
type StaleIncarnationError struct {
	Actor           string
	Called, Running int
}

func (e *StaleIncarnationError) Error() string {
	if e.Called > e.Running {
		return fmt.Sprintf("actor %s: %s: the call is for incarnation %d, and incarnation %d here was replaced (ended now)",
			e.Actor, actors.ErrStaleIncarnation, e.Called, e.Running)
	}
	return fmt.Sprintf("actor %s: %s: the call is for incarnation %d, incarnation %d runs here", e.Actor, actors.ErrStaleIncarnation, e.Called, e.Running)
}

// Is reports that a StaleIncarnationError is an actors.ErrStaleIncarnation.
func (e *StaleIncarnationError) Is(target error) bool { return target == actors.ErrStaleIncarnation }

// Kinds maps each sentinel that crosses a process boundary to its name on
// the wire. The names are part of the protocol: never reuse one.
var kinds = []struct {
	name string
	err  error
}{
	{"actors.notregistered", actors.ErrNotRegistered},
	{"actors.badsignature", actors.ErrBadSignature},
	{"actors.duplicate", actors.ErrDuplicate},
	{"actors.nomethod", actors.ErrNoSuchMethod},
	{"actors.notfound", actors.ErrNotFound},
	{"actors.typemismatch", actors.ErrTypeMismatch},
	{"actors.infeasible", actors.ErrInfeasible},
	{"actors.restarted", actors.ErrActorRestarted},
	{"actors.stale", actors.ErrStaleIncarnation},
	{"actors.encode", actors.ErrEncode},
	{"actors.decode", actors.ErrDecode},

	{"scheduler.infeasible", scheduler.ErrInfeasible},
	{"scheduler.pending", scheduler.ErrPending},
	{"scheduler.invalid", scheduler.ErrInvalid},
	{"scheduler.notfound", scheduler.ErrNotFound},
	{"scheduler.conflict", scheduler.ErrConflict},
	{"scheduler.unknowncommand", scheduler.ErrUnknownCommand},
	{"scheduler.malformed", scheduler.ErrMalformed},

	{"runtime.shutdown", ErrShutdown},
	{"runtime.groupremoved", ErrPlacementGroupRemoved},

	{"wire.toolarge", ErrFrameTooLarge},
	{"wire.malformed", ErrMalformedFrame},
	{"wire.closed", ErrClosed},
	{"transport.unauthenticated", ErrUnauthenticated},

	{"cluster.noleader", ErrNoLeader},
	{"cluster.wrongplatform", ErrWrongPlatform},
	{"cluster.badpackage", ErrBadPackage},
	{"cluster.notrunnable", ErrNotRunnable},
	{"cluster.badfilter", ErrBadFilter},
	{"cluster.unknownkind", ErrUnknownKind},

	{"context.canceled", context.Canceled},
	{"context.deadline", context.DeadlineExceeded},
}

// Sentinels returns every sentinel the codec carries, for tests.
func Sentinels() []error {
	out := make([]error, len(kinds))
	for i, k := range kinds {
		out[i] = k.err
	}
	return out
}

// Error is an error as it crosses a process boundary, on the direct call
// path (wire) and in control-plane replies (gRPC) alike. Encode builds it;
// Err turns it back into a Go error on the other side, for which errors.Is
// holds for every sentinel the original wrapped and errors.As finds the
// structured errors (*actors.CallError, *actors.ActorDiedError,
// *NotHostedError, *scheduler.InfeasibleError).
type Error struct {
	// Type names a structured error ("call", "died", "nothosted"); empty
	// for any other error.
	Type string `msgpack:"t,omitempty"`
	Msg  string `msgpack:"m"`
	// Kinds are the names of the sentinels the error wraps.
	Kinds []string `msgpack:"k,omitempty"`
	// Reason is the detail of a *scheduler.InfeasibleError it wraps.
	Reason     string `msgpack:"why,omitempty"`
	Infeasible bool   `msgpack:"inf,omitempty"`

	Actor    string `msgpack:"a,omitempty"`
	Method   string `msgpack:"f,omitempty"`
	Panic    string `msgpack:"p,omitempty"`
	Stack    string `msgpack:"s,omitempty"`
	Node     string `msgpack:"n,omitempty"`
	Cause    string `msgpack:"c,omitempty"`
	Restarts int    `msgpack:"r,omitempty"`
	// Called is the incarnation a refused call named ("stale").
	Called int `msgpack:"ci,omitempty"`
}

// Encode converts err for the wire (nil gives nil).
func Encode(err error) *Error {
	if err == nil {
		return nil
	}
	e := &Error{Msg: err.Error()}
	var ce *actors.CallError
	var de *actors.ActorDiedError
	switch nh, _ := err.(*NotHostedError); {
	case errors.As(err, &ce):
		e.Type, e.Actor, e.Method, e.Panic, e.Stack = "call", ce.Actor, ce.Method, ce.Panic, ce.Stack
	case errors.As(err, &de):
		e.Type, e.Actor, e.Node, e.Cause, e.Restarts = "died", de.Actor, de.Node, de.Cause, de.Restarts
	case nh != nil: // only the call path's own answer, never one a method wrapped
		e.Type, e.Actor = "nothosted", nh.Actor
	default:
		if se, _ := err.(*StaleIncarnationError); se != nil { // likewise
			e.Type, e.Actor, e.Restarts, e.Called = "stale", se.Actor, se.Running, se.Called
		}
	}
	var ie *scheduler.InfeasibleError
	if errors.As(err, &ie) {
		e.Infeasible, e.Reason = true, ie.Reason
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			e.Kinds = append(e.Kinds, k.name)
		}
	}
	return e
}

// Err returns the Go error e stands for (a nil *Error gives nil).
func (e *Error) Err() error {
	if e == nil {
		return nil
	}
	var wraps []error
	if e.Infeasible {
		wraps = append(wraps, &scheduler.InfeasibleError{Reason: e.Reason})
	}
	for _, name := range e.Kinds {
		for _, k := range kinds {
			if k.name == name {
				wraps = append(wraps, k.err)
				break
			}
		}
	}
	switch e.Type {
	case "call":
		return &actors.CallError{Actor: e.Actor, Method: e.Method, Panic: e.Panic, Stack: e.Stack}
	case "died":
		return &actors.ActorDiedError{Actor: e.Actor, Node: e.Node, Cause: e.Cause, Restarts: e.Restarts,
			Err: &RemoteError{Msg: e.Msg, wraps: wraps}}
	case "nothosted":
		return &NotHostedError{Actor: e.Actor}
	case "stale":
		return &StaleIncarnationError{Actor: e.Actor, Called: e.Called, Running: e.Restarts}
	}
	return &RemoteError{Msg: e.Msg, wraps: wraps}
}

// Error implements error, so an *Error can sit in a reply and be returned
// as is; errors.Is and errors.As see through it to Err's result.
func (e *Error) Error() string { return e.Msg }

// Unwrap returns the decoded error.
func (e *Error) Unwrap() error { return e.Err() }

// AsError returns e as an error, keeping a nil *Error a nil error. The
// result is e itself, so errors.As(err, new(*api.Error)) tells an error
// the other side sent in a reply (a refusal) from a failed transport.
func (e *Error) AsError() error {
	if e == nil {
		return nil
	}
	return e
}

// RemoteError is an error from another process whose Go type does not
// travel: it keeps the message and the sentinels the original wrapped.
type RemoteError struct {
	Msg   string
	wraps []error
}

func (e *RemoteError) Error() string { return e.Msg }

// Unwrap returns the sentinels the original error wrapped.
func (e *RemoteError) Unwrap() []error { return e.wraps }
