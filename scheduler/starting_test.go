package scheduler

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// TestStartingOnMatchesActorsOn: after every command of random logs (and
// after a snapshot round trip and a clone), StartingOn(n) is exactly the
// actors on n that are not alive and have something to launch (Args), in
// ID order, HasWaiting agrees with a scan of every actor and group, and
// PlanPending gives what it gives on a copy, leaving the state as it was.
func TestStartingOnMatchesActorsOn(t *testing.T) {
	check := func(s *State) {
		t.Helper()
		for _, n := range s.Nodes() {
			var want []ActorID
			for _, a := range s.ActorsOn(n.ID) {
				if (a.State == ActorPending || a.State == ActorRestarting) && len(a.Spec.Args) > 0 {
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
		waiting := 0
		for _, a := range s.Actors() {
			if a.Node == "" && (a.State == ActorPending || a.State == ActorRestarting) {
				waiting++
			}
		}
		if got := s.numWaitingActors(); got != waiting {
			t.Fatalf("numWaitingActors() = %d, want %d", got, waiting)
		}
		groupWaits := false
		for _, g := range s.Groups() {
			groupWaits = groupWaits || g.State != GroupCreated
		}
		if got := s.HasWaiting(); got != (waiting > 0 || groupWaits) {
			t.Fatalf("HasWaiting() = %v with %d waiting actors, a group waiting: %v", got, waiting, groupWaits)
		}
		// PlanPending plans on s itself when it decides nothing: the same
		// outcome as on a copy, and s unchanged.
		before := snapshotBytes(t, s)
		cmds, waits := Planner{}.PlanPending(s, 7)
		wantCmds, wantWaits := Planner{}.planPending(s.Clone(), 7)
		show := func(cmds []Command, waits []Waiting) string {
			out := ""
			for _, c := range cmds {
				out += fmt.Sprintf("%x ", MustEncode(c))
			}
			for _, w := range waits {
				out += fmt.Sprintf("%s/%s: %v; ", w.Actor, w.Group, w.Err)
			}
			return out
		}
		if got, want := show(cmds, waits), show(wantCmds, wantWaits); got != want {
			t.Fatalf("PlanPending = %s\non a copy %s", got, want)
		}
		if !bytes.Equal(snapshotBytes(t, s), before) {
			t.Fatal("PlanPending changed the state")
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
