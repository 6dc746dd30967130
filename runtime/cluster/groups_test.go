package cluster

import (
	"errors"
	"testing"

	"troupe/scheduler"
)

// TestGroupWorkRetries: the placer's group planning is idempotent for
// requests forwarded again after an attempt with an unknown outcome: a
// create that committed is reported from the state without a second
// command, and removing a group that is gone succeeds only on a retry.
func TestGroupWorkRetries(t *testing.T) {
	s := scheduler.NewState()
	if err := s.Apply(&scheduler.RegisterNode{Node: scheduler.SimNode("n0", 8, 1<<30, nil), At: 1}); err != nil {
		t.Fatal(err)
	}
	n := &Node{}
	spec := scheduler.GroupSpec{ID: "pg", Strategy: scheduler.StrictPack, Bundles: []scheduler.Resources{{MilliCPU: 1000}, {MilliCPU: 1000}}}
	w := &groupWork{create: []scheduler.GroupSpec{spec}}
	var res CreateResult
	b := w.plan(n, s, 0, 2, &res)
	if b == nil || res.Err != nil || len(res.Bundles) != 2 {
		t.Fatalf("create: %v %+v", b, res)
	}
	res = CreateResult{}
	if b := w.plan(n, s, 0, 3, &res); b != nil || res.Err != nil || len(res.Bundles) != 2 || res.Bundles[1].Node != "n0" {
		t.Fatalf("retried create: command %v, result %+v; want the committed bundles and no command", b, res)
	}
	other := spec
	other.Strategy = scheduler.Spread
	res = CreateResult{}
	if b := (&groupWork{create: []scheduler.GroupSpec{other}}).plan(n, s, 0, 3, &res); b != nil || !errors.Is(res.Err, scheduler.ErrConflict) {
		t.Fatalf("another group under a used ID: %v %+v", b, res)
	}

	rm := &groupWork{remove: []scheduler.GroupID{"pg"}}
	res = CreateResult{}
	if b := rm.plan(n, s, 0, 4, &res); b == nil || res.Err != nil || s.Group("pg") != nil {
		t.Fatalf("remove: %v %+v", b, res)
	}
	res = CreateResult{}
	if b := rm.plan(n, s, 0, 5, &res); b != nil || !errors.Is(res.Err, scheduler.ErrNotFound) {
		t.Fatalf("remove of a missing group: %v %+v, want not found", b, res)
	}
	rm.retry = true
	res = CreateResult{}
	if b := rm.plan(n, s, 0, 5, &res); b != nil || res.Err != nil {
		t.Fatalf("retried remove of a removed group: %v %+v, want success without a command", b, res)
	}
}
