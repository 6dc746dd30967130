package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"troupe/scheduler"
)

// TestContactClockFences: a node fences itself once, exactly when it has
// gone longer than the lease without contact; a stale answer is not
// contact; fresh contact lifts the fence.
func TestContactClockFences(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const lease = 4 * time.Second
	c := contactClock{lease: lease, last: t0}
	if c.due(at(lease)) {
		t.Fatal("fenced at exactly the lease")
	}
	c.contact(at(3*time.Second), at(3*time.Second+100*time.Millisecond))
	if c.due(at(3*time.Second + lease)) {
		t.Fatal("fenced although contact was renewed at 3 s")
	}
	// An answer from a server that last heard from the leader 5 s before
	// (asked at 8 s) is older than the lease: no contact.
	if c.contact(at(3*time.Second), at(8*time.Second)) {
		t.Fatal("a stale answer lifted a fence that was not there")
	}
	if !c.due(at(3*time.Second + lease + time.Millisecond)) {
		t.Fatal("not fenced 1 ms past the lease")
	}
	if c.due(at(20 * time.Second)) {
		t.Fatal("fenced twice")
	}
	if c.contact(at(10*time.Second), at(20*time.Second)) {
		t.Fatal("a 10 s old answer lifted the fence")
	}
	if !c.contact(at(20*time.Second), at(20*time.Second+time.Millisecond)) || c.fenced {
		t.Fatal("fresh contact did not lift the fence")
	}
	if c.due(at(21 * time.Second)) {
		t.Fatal("fenced again right after contact")
	}
}

// TestNodeVerdictGrace: a node gossip loses is suspect first and dead
// (its actors restarted elsewhere, fenced by their epochs) once it has been
// suspect for the grace, a few probe intervals and far less than the
// node's own fence lease; a drained node dies at once; a node back in
// gossip is alive again.
func TestNodeVerdictGrace(t *testing.T) {
	for _, tm := range []Timing{LANTiming(), FastTiming()} {
		wait := suspectGraceFor(tm)
		lease := max(3*time.Second, 20*tm.ProbeInterval)
		if wait < 2*tm.ProbeInterval || wait > lease/4 {
			t.Errorf("probe %v: grace %v, want at least two probes and at most a quarter of the lease %v", tm.ProbeInterval, wait, lease)
		}
	}
	wait := suspectGraceFor(LANTiming())
	t0 := time.Unix(1000, 0)
	nd := &scheduler.Node{}
	nd.ID, nd.State = "w1", scheduler.NodeAlive
	dead, alive := memberlist.StateDead, memberlist.StateAlive

	if st, _ := nodeVerdict(nd, true, alive, false, t0, wait); st != 0 {
		t.Fatalf("alive node: %v", st)
	}
	st, cause := nodeVerdict(nd, true, dead, true, t0, wait)
	if st != scheduler.NodeSuspect {
		t.Fatalf("lost node: %v, want suspect", st)
	}
	nd.State, nd.Cause, nd.UpdatedAt = st, cause, t0.UnixNano()
	if st, _ := nodeVerdict(nd, true, dead, true, t0.Add(wait-time.Millisecond), wait); st != 0 {
		t.Fatalf("suspect within the grace: %v, want nothing", st)
	}
	if st, c := nodeVerdict(nd, true, dead, true, t0.Add(wait), wait); st != scheduler.NodeDead || c == "" {
		t.Fatalf("suspect for the grace: %v %q, want dead", st, c)
	}
	if st, _ := nodeVerdict(nd, true, alive, false, t0.Add(time.Second), wait); st != scheduler.NodeAlive {
		t.Errorf("suspect node back in gossip: %v, want alive", st)
	}
	nd.State = scheduler.NodeDraining
	if st, _ := nodeVerdict(nd, true, dead, true, t0, wait); st != scheduler.NodeDead {
		t.Errorf("drained node gone: %v, want dead at once", st)
	}
	nd.State = scheduler.NodeAlive
	if st, c := nodeVerdict(nd, false, 0, true, t0, wait); st != scheduler.NodeSuspect || c == "" {
		t.Errorf("node missing from gossip: %v %q, want suspect", st, c)
	}
	if st, _ := nodeVerdict(nd, false, 0, false, t0, wait); st != 0 {
		t.Errorf("node missing from gossip within the grace: %v, want nothing", st)
	}
}

// TestCatchingUp: a server reports catching up while it trails the
// leader's applied index and has not caught up since it started, always
// when it knows no leader, and after catching up once only when it trails
// by more than the slack.
func TestCatchingUp(t *testing.T) {
	for _, c := range []struct {
		applied, target     uint64
		leaderKnown, before bool
		want                bool
	}{
		{0, 40, false, false, true},
		{40, 40, false, true, true},
		{0, 40, true, false, true},
		{39, 40, true, false, true},
		{40, 40, true, false, false},
		{41, 40, true, false, false},
		{39, 40, true, true, false},
		{40 - catchUpSlack - 1, 40, true, true, true},
	} {
		if got := catchingUp(c.applied, c.target, c.leaderKnown, c.before); got != c.want {
			t.Errorf("catchingUp(%d, %d, leader known %v, caught up before %v) = %v, want %v", c.applied, c.target, c.leaderKnown, c.before, got, c.want)
		}
	}
}
