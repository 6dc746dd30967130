package api_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
	"troupe/runtime/api"
	"troupe/scheduler"
)

// roundTrip sends err through the codec as another process would see it.
func roundTrip(t *testing.T, err error) error {
	t.Helper()
	b, merr := msgpack.Marshal(api.Encode(err))
	if merr != nil {
		t.Fatal(merr)
	}
	var e api.Error
	if merr := msgpack.Unmarshal(b, &e); merr != nil {
		t.Fatal(merr)
	}
	return e.Err()
}

// TestSentinelsCrossProcesses: errors.Is holds on the other side for every
// sentinel the codec knows, wrapped with context as callers do, and no
// other sentinel matches by accident.
func TestSentinelsCrossProcesses(t *testing.T) {
	all := api.Sentinels()
	for _, s := range all {
		t.Run(s.Error(), func(t *testing.T) {
			sent := fmt.Errorf("spawn worker: %w", s)
			got := roundTrip(t, sent)
			if !errors.Is(got, s) {
				t.Fatalf("errors.Is(%v, %v) = false after the round trip", got, s)
			}
			if got.Error() != sent.Error() {
				t.Errorf("message %q, want %q", got.Error(), sent.Error())
			}
			for _, o := range all {
				if o != s && errors.Is(got, o) != errors.Is(sent, o) {
					t.Errorf("errors.Is(got, %v) = %v, sender had %v", o, errors.Is(got, o), errors.Is(sent, o))
				}
			}
		})
	}
}

// TestEverySentinelHasAKind: the exported sentinels of the packages whose
// errors cross processes are all in the codec's table.
// TestStaleIncarnationErrorTravels: a worker's refusal of a call for
// another incarnation keeps its type and fields across processes, and is
// an actors.ErrStaleIncarnation.
func TestStaleIncarnationErrorTravels(t *testing.T) {
	err := roundTrip(t, &api.StaleIncarnationError{Actor: "a", Called: 3, Running: 2})
	var se *api.StaleIncarnationError
	if !errors.As(err, &se) || se.Actor != "a" || se.Called != 3 || se.Running != 2 || !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("after a round trip: %#v", err)
	}
	// One a method wrapped is not the call path's own: only its sentinel travels.
	err = roundTrip(t, fmt.Errorf("nested call: %w", &api.StaleIncarnationError{Actor: "b", Called: 1}))
	if errors.As(err, &se) || !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("wrapped by a method: %#v", err)
	}
}

func TestEverySentinelHasAKind(t *testing.T) {
	want := []error{
		actors.ErrNotRegistered, actors.ErrBadSignature, actors.ErrDuplicate, actors.ErrNoSuchMethod,
		actors.ErrNotFound, actors.ErrTypeMismatch, actors.ErrInfeasible, actors.ErrActorRestarted, actors.ErrStaleIncarnation,
		actors.ErrEncode, actors.ErrDecode,
		scheduler.ErrInfeasible, scheduler.ErrPending, scheduler.ErrInvalid, scheduler.ErrNotFound,
		scheduler.ErrConflict, scheduler.ErrUnknownCommand, scheduler.ErrMalformed,
		api.ErrShutdown, api.ErrPlacementGroupRemoved, api.ErrFrameTooLarge, api.ErrMalformedFrame,
		api.ErrClosed, api.ErrNoLeader, api.ErrWrongPlatform, api.ErrBadPackage, api.ErrNotRunnable,
		api.ErrBadFilter, api.ErrUnknownKind,
	}
	have := map[error]bool{}
	for _, s := range api.Sentinels() {
		if have[s] {
			t.Errorf("%v listed twice", s)
		}
		have[s] = true
	}
	for _, s := range want {
		if !have[s] {
			t.Errorf("sentinel %q has no kind in the codec", s)
		}
	}
}

func TestStructuredErrorsCrossProcesses(t *testing.T) {
	ce := roundTrip(t, fmt.Errorf("call: %w", &actors.CallError{Actor: "a", Method: "M", Panic: "boom", Stack: "st"}))
	var gotCE *actors.CallError
	if !errors.As(ce, &gotCE) || gotCE.Method != "M" || gotCE.Panic != "boom" || gotCE.Stack != "st" {
		t.Errorf("CallError: got %#v", ce)
	}
	de := roundTrip(t, &actors.ActorDiedError{Actor: "a", Node: "n1", Cause: "killed", Restarts: 2, Err: actors.ErrActorRestarted})
	var gotDE *actors.ActorDiedError
	if !errors.As(de, &gotDE) || gotDE.Node != "n1" || gotDE.Cause != "killed" || gotDE.Restarts != 2 {
		t.Errorf("ActorDiedError: got %#v", de)
	}
	if !errors.Is(de, actors.ErrActorRestarted) {
		t.Errorf("ActorDiedError lost the sentinel it wrapped: %v", de)
	}
	nh := roundTrip(t, &api.NotHostedError{Actor: "x1"})
	var gotNH *api.NotHostedError
	if !errors.As(nh, &gotNH) || gotNH.Actor != "x1" || !errors.Is(nh, actors.ErrNotFound) {
		t.Errorf("NotHostedError: got %#v", nh)
	}
	// A NotHostedError a method wrapped (about the actor it called) is
	// not the call path's own answer: it arrives as a plain ErrNotFound.
	wrapped := roundTrip(t, fmt.Errorf("ask peer: %w", &api.NotHostedError{Actor: "x2"}))
	if errors.As(wrapped, &gotNH) || !errors.Is(wrapped, actors.ErrNotFound) {
		t.Errorf("wrapped NotHostedError: got %#v", wrapped)
	}
	ie := roundTrip(t, fmt.Errorf("create actor x: %w", &scheduler.InfeasibleError{Reason: "needs 9 GPUs"}))
	var gotIE *scheduler.InfeasibleError
	if !errors.As(ie, &gotIE) || gotIE.Reason != "needs 9 GPUs" || !errors.Is(ie, scheduler.ErrInfeasible) {
		t.Errorf("InfeasibleError: got %#v", ie)
	}
	if got := roundTrip(t, errors.New("plain")); got.Error() != "plain" {
		t.Errorf("plain error: %q", got)
	}
	if api.Encode(nil) != nil || (*api.Error)(nil).AsError() != nil || (*api.Error)(nil).Err() != nil {
		t.Error("nil does not stay nil")
	}
}
