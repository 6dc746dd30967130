package scheduler

import "testing"

// checkInvariants fails the test when the state's accounting is off (see
// State.Check).
func checkInvariants(t testing.TB, s *State) {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
