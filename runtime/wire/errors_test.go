package wire

import (
	"errors"
	"fmt"
	"testing"

	"troupe/actors"
	"troupe/runtime/api"
)

// TestErrorsCrossTheWire: errors.Is holds after the call path's error
// encoding for every sentinel of api's codec, and a worker's "not hosted"
// answer stays apart from an ErrNotFound a method returned.
func TestErrorsCrossTheWire(t *testing.T) {
	for _, s := range api.Sentinels() {
		sent := fmt.Errorf("method: %w", s)
		got := decodeError(encodeError(sent))
		if !errors.Is(got, s) || got.Error() != sent.Error() {
			t.Errorf("%v: got %v (Is %v)", s, got, errors.Is(got, s))
		}
	}
	var nh *api.NotHostedError
	got := decodeError(encodeError(&api.NotHostedError{Actor: "a1"}))
	if !errors.As(got, &nh) || nh.Actor != "a1" || !errors.Is(got, actors.ErrNotFound) {
		t.Errorf("not hosted: got %#v", got)
	}
	got = decodeError(encodeError(fmt.Errorf("lookup: %w", actors.ErrNotFound)))
	if errors.As(got, &nh) || !errors.Is(got, actors.ErrNotFound) {
		t.Errorf("method's ErrNotFound: got %#v", got)
	}
}
