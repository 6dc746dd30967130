package driver

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"troupe/actors"
	"troupe/runtime/client"
	"troupe/scheduler"
)

// createInmem commits actor id of the driver's job in the in-memory
// control plane (placed, not yet started) and returns a reference to it,
// as SpawnActor makes one.
func createInmem(t *testing.T, d *Driver, m *client.Inmem, id, name string, maxRestarts int) *actorRef {
	t.Helper()
	res, err := m.CreateActors(context.Background(), []scheduler.ActorSpec{{ID: scheduler.ActorID(id), Name: name, Class: "RCounter",
		JobID: d.JobID(), MaxRestarts: maxRestarts}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("create %s: %v, %v", id, err, res[0].Err)
	}
	return &actorRef{r: d, id: id, name: name, typ: "RCounter", newest: d.epochs.of(id)}
}

// TestEpochsPrunedOnDeath: the driver's epoch table holds the actors that
// are alive, however many it created and saw die: an actor killed through
// a reference leaves it at once, and so does one a lookup finds dead
// (killed elsewhere, or out of restarts), though the references are kept.
func TestEpochsPrunedOnDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, m := connectInmem(t)
		defer d.Shutdown(context.Background())
		ctx := context.Background()
		const n = 300
		var refs []*actorRef
		for i := range n {
			a := createInmem(t, d, m, fmt.Sprintf("a%d", i), "", 0)
			refs = append(refs, a)
			switch i % 3 {
			case 0: // killed through its reference
				if err := a.Kill(ctx, "done"); err != nil {
					t.Fatal(err)
				}
			case 1: // died on its node, out of restarts: a lookup finds it dead
				if err := m.Kill(a.id, "crashed", true); err != nil {
					t.Fatal(err)
				}
				var de *actors.ActorDiedError
				if err := a.resolve(ctx); !errors.As(err, &de) {
					t.Fatalf("resolve of a dead actor: %v, want an ActorDiedError", err)
				}
			case 2: // alive: kept
			}
		}
		if got := d.epochs.size(); got != n/3 {
			t.Fatalf("epoch table after %d actors, %d of them dead: %d entries, want %d (the live ones)", n, 2*n/3, got, n/3)
		}
		if _, ok := d.epochs.m.Load(refs[2].id); !ok {
			t.Fatalf("live actor %s has no entry", refs[2].id)
		}
		runtime.KeepAlive(refs)
	})
}

// TestEpochsStaleAfterPrune: a reference keeps the newest incarnation it
// saw after the table dropped the dead actor, so a late reply of an older
// incarnation is still refused; a reference made afterwards (GetActor)
// finds the actor dead and leaves nothing in the table.
func TestEpochsStaleAfterPrune(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, m := connectInmem(t)
		defer d.Shutdown(context.Background())
		ctx := context.Background()
		a := createInmem(t, d, m, "r1", "restarted", 1)
		if err := m.Kill(a.id, "crashed", true); err != nil { // incarnation 1 replaces 0
			t.Fatal(err)
		}
		if err := a.lostErr("Add", 0, "n1", errors.New("connection lost")); !errors.Is(err, actors.ErrActorRestarted) {
			t.Fatalf("fate of incarnation 0: %v, want ErrActorRestarted", err)
		}
		if got := d.epochs.newest(a.id); got != 1 {
			t.Fatalf("table: newest %d, want 1", got)
		}
		other := &actorRef{r: d, id: a.id, newest: d.epochs.of(a.id)} // a second reference shares the entry
		if err := m.Kill(a.id, "crashed again", true); err != nil {   // out of restarts: dead
			t.Fatal(err)
		}
		var de *actors.ActorDiedError
		if err := a.lostErr("Add", 1, "n1", errors.New("connection lost")); !errors.As(err, &de) {
			t.Fatalf("fate of incarnation 1: %v, want an ActorDiedError", err)
		}
		if got := d.epochs.size(); got != 0 {
			t.Fatalf("table after the death: %d entries, want 0", got)
		}
		// The check send applies to a reply of incarnation inc: refused
		// when newestInc() > inc.
		for _, r := range []*actorRef{a, other} {
			if got := r.newestInc(); got != 1 {
				t.Fatalf("reference's newest incarnation after the prune: %d, want 1 (a late reply of incarnation 0 is refused)", got)
			}
		}
		if _, err := d.GetActor(ctx, "restarted"); err == nil {
			t.Fatal("GetActor of a dead actor succeeded")
		}
		if got := d.epochs.size(); got != 0 {
			t.Fatalf("table after a lookup of the dead actor: %d entries, want 0", got)
		}
		runtime.KeepAlive(other)
	})
}

// TestEpochsDroppedWithTheirReferences: an entry whose references are
// all gone leaves the table (its cleanup), so actors the driver never
// sees die do not keep entries once nothing refers to them.
func TestEpochsDroppedWithTheirReferences(t *testing.T) {
	var e epochs
	kept := e.of("kept")
	for i := range 1000 {
		e.of(fmt.Sprintf("a%d", i)).see(i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.size() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries 30 s after their references went, want 1", e.size())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if got := e.of("kept"); got != kept {
		t.Fatal("the entry of a kept reference was replaced")
	}
	// A new reference to a dropped actor starts over; the lookup it makes
	// before its first call sets it.
	if got := e.of("a7").load(); got != 0 {
		t.Fatalf("fresh entry: %d, want 0", got)
	}
	runtime.KeepAlive(kept)
}
