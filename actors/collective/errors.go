package collective

import (
	"errors"
	"fmt"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrMemberLost: a member died, was cut off, or stopped answering
	// within the group's timeout. The error is a *MemberError naming it.
	ErrMemberLost = errors.New("collective: member lost")
	// ErrNoGroup: Of was called for a group this actor is not a member of
	// (or outside an actor's method).
	ErrNoGroup = errors.New("collective: no such group")
	// ErrMismatch: members called different operations, or with buffers of
	// different lengths or different roots.
	ErrMismatch = errors.New("collective: mismatched call")
	// ErrClosed: the group was closed or replaced by a new one of the same
	// name.
	ErrClosed = errors.New("collective: group closed")
	// ErrBadArg: a call's own arguments are wrong (buffer lengths, root out
	// of range, an unknown Op); no data moved.
	ErrBadArg = errors.New("collective: bad argument")
)

// MemberError is a failure that one member of a group caused: it names the
// group and the member, and wraps what happened (ErrMemberLost,
// ErrMismatch, ...).
type MemberError struct {
	Group string
	Rank  int
	Actor string // the member's actor ID or name, "" when unknown
	Err   error
}

func (e *MemberError) Error() string {
	who := fmt.Sprintf("rank %d", e.Rank)
	if e.Actor != "" {
		who += " (" + e.Actor + ")"
	}
	return fmt.Sprintf("collective group %q: member %s: %v", e.Group, who, e.Err)
}

func (e *MemberError) Unwrap() error { return e.Err }
