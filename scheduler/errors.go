package scheduler

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with detail, so test with errors.Is.
var (
	// ErrInfeasible means the request can never be satisfied by the current
	// cluster: it exceeds every schedulable node's total resources, names an
	// unknown node as hard affinity, or is otherwise impossible. It fails at
	// once instead of waiting.
	ErrInfeasible = errors.New("infeasible")
	// ErrPending means the request fits some node's total but not what is
	// free right now; it can be placed when resources are released.
	ErrPending = errors.New("pending")
	// ErrInvalid means a request or command is malformed (negative amounts,
	// a GPU count like 1.5, a missing ID, ...).
	ErrInvalid = errors.New("invalid")
	// ErrNotFound means a command names a node, actor, placement group or job
	// the state does not have.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a command contradicts the state: an ID or actor name
	// already taken, or a placement decided by the leader that no longer fits.
	ErrConflict = errors.New("conflict")
	// ErrUnknownCommand means a command's type byte is not one this version
	// knows.
	ErrUnknownCommand = errors.New("unknown command type")
	// ErrMalformed means a command's bytes could not be decoded.
	ErrMalformed = errors.New("malformed command")
)

// InfeasibleError is an ErrInfeasible with its reason kept apart from the
// words callers put before it, so a caller can restate the reason without
// cutting text.
type InfeasibleError struct{ Reason string }

func (e *InfeasibleError) Error() string { return ErrInfeasible.Error() + ": " + e.Reason }

// Is reports that an InfeasibleError is an ErrInfeasible.
func (e *InfeasibleError) Is(target error) bool { return target == ErrInfeasible }

// infeasible returns an *InfeasibleError with the formatted reason.
func infeasible(format string, args ...any) error {
	return &InfeasibleError{Reason: fmt.Sprintf(format, args...)}
}
