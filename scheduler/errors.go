package scheduler

import "errors"

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
