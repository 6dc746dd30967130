package scheduler

import (
	"reflect"
	"testing"
)

// TestStartingOnMatchesActorsOn: after every command of random logs (and
// after a snapshot round trip and a clone), StartingOn(n) is exactly the
// actors on n that are not alive, in ID order.
func TestStartingOnMatchesActorsOn(t *testing.T) {
	check := func(s *State) {
		t.Helper()
		for _, n := range s.Nodes() {
			var want []ActorID
			for _, a := range s.ActorsOn(n.ID) {
				if a.State == ActorPending || a.State == ActorRestarting {
					want = append(want, a.Spec.ID)
				}
			}
			var got []ActorID
			for _, a := range s.StartingOn(n.ID) {
				got = append(got, a.Spec.ID)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("StartingOn(%s) = %v, want %v", n.ID, got, want)
			}
		}
	}
	for seed := int64(31); seed <= 33; seed++ {
		log, _ := randomLog(t, seed, 300)
		s := NewState()
		for i, b := range log {
			s.ApplyBytes(b)
			// Start some placed actors, as nodes would.
			if i%3 == 0 {
				for _, n := range s.Nodes() {
					for _, a := range s.StartingOn(n.ID) {
						mustApply(t, s, &ActorStarted{Actor: a.Spec.ID, Incarnation: a.Restarts, Address: "w", At: 9})
						break
					}
				}
			}
			check(s)
		}
		check(s.Clone())
		r := NewState()
		if err := r.UnmarshalBinary(snapshotBytes(t, s)); err != nil {
			t.Fatal(err)
		}
		check(r)
	}
}
