package wire

import (
	"context"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
)

// wireError is an error as it crosses the wire: its kind decides which Go
// error the caller gets back, so errors.Is and errors.As keep working
// across processes.
type wireError struct {
	Kind     string `msgpack:"k"`
	Msg      string `msgpack:"m"`
	Actor    string `msgpack:"a,omitempty"`
	Method   string `msgpack:"f,omitempty"`
	Panic    string `msgpack:"p,omitempty"`
	Stack    string `msgpack:"s,omitempty"`
	Node     string `msgpack:"n,omitempty"`
	Cause    string `msgpack:"c,omitempty"`
	Restarts int    `msgpack:"r,omitempty"`
}

// RemoteError is an error returned by an actor method in another process,
// whose Go type does not travel.
type RemoteError struct{ Msg string }

func (e *RemoteError) Error() string { return e.Msg }

// sentinels maps the kinds of wrapped sentinel errors.
var sentinels = []struct {
	kind string
	err  error
}{
	{"restarted", actors.ErrActorRestarted},
	{"nomethod", actors.ErrNoSuchMethod},
	{"decode", actors.ErrDecode},
	{"encode", actors.ErrEncode},
	{"notfound", actors.ErrNotFound},
	{"canceled", context.Canceled},
	{"deadline", context.DeadlineExceeded},
	{"toolarge", ErrFrameTooLarge},
}

func encodeError(err error) []byte {
	we := wireError{Kind: "remote", Msg: err.Error()}
	var ce *actors.CallError
	var de *actors.ActorDiedError
	switch {
	case errors.As(err, &ce):
		we.Kind, we.Actor, we.Method, we.Panic, we.Stack = "call", ce.Actor, ce.Method, ce.Panic, ce.Stack
	case errors.As(err, &de):
		we.Kind, we.Actor, we.Node, we.Cause, we.Restarts = "died", de.Actor, de.Node, de.Cause, de.Restarts
	default:
		for _, s := range sentinels {
			if errors.Is(err, s.err) {
				we.Kind = s.kind
				break
			}
		}
	}
	b, merr := msgpack.Marshal(&we)
	if merr != nil { // cannot happen for this struct; keep the message
		b, _ = msgpack.Marshal(&wireError{Kind: "remote", Msg: err.Error()})
	}
	return b
}

func decodeError(b []byte) error {
	var we wireError
	if err := msgpack.Unmarshal(b, &we); err != nil {
		return fmt.Errorf("%w: reply error: %v", ErrMalformed, err)
	}
	switch we.Kind {
	case "call":
		return &actors.CallError{Actor: we.Actor, Method: we.Method, Panic: we.Panic, Stack: we.Stack}
	case "died":
		return &actors.ActorDiedError{Actor: we.Actor, Node: we.Node, Cause: we.Cause, Restarts: we.Restarts, Err: errors.New(we.Msg)}
	}
	for _, s := range sentinels {
		if we.Kind == s.kind {
			return &kindError{msg: we.Msg, kind: s.err}
		}
	}
	return &RemoteError{Msg: we.Msg}
}

// kindError carries a remote message and the sentinel it wrapped.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }
