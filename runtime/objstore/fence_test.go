package objstore

import (
	"errors"
	"fmt"
	"testing"

	"troupe/actors"
)

// TestPutFencedRefusesAStaleIncarnation: once a store has seen incarnation
// 2 of an actor (Fence, or a put of it after a Fence), a put of incarnation 1 is refused
// with ErrStaleIncarnation and leaves nothing behind; incarnation 2 and
// later ones are accepted, and other actors are not affected.
func TestPutFencedRefusesAStaleIncarnation(t *testing.T) {
	s := NewStore("owner:1")
	if _, err := s.PutFenced([]byte("old"), "a", 1); err != nil {
		t.Fatalf("first put of incarnation 1: %v", err)
	}
	s.Fence("a", 2)
	s.Fence("a", 0) // never lowers
	n := s.Len()
	if _, err := s.PutFenced([]byte("late"), "a", 1); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("put of incarnation 1 after 2 was seen: %v, want ErrStaleIncarnation", err)
	}
	if s.Len() != n {
		t.Fatalf("a refused put left an object: %d objects, want %d", s.Len(), n)
	}
	ref, err := s.PutFenced([]byte("new"), "a", 2)
	if err != nil {
		t.Fatalf("put of the current incarnation: %v", err)
	}
	if b, err := s.Get(ref.ID, ref.Key); err != nil || string(b) != "new" {
		t.Fatalf("get: %q, %v", b, err)
	}
	if _, err := s.PutFenced([]byte("newer"), "a", 3); err != nil {
		t.Fatalf("put of a newer incarnation: %v", err)
	}
	if _, err := s.PutFenced([]byte("late"), "a", 2); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("put of incarnation 2 after a put of 3: %v, want ErrStaleIncarnation", err)
	}
	if _, err := s.PutFenced([]byte("b"), "b", 0); err != nil {
		t.Fatalf("another actor's put: %v", err)
	}
}

// TestEpochsRetiredBounded: a store that hosts many actors over its life
// holds the epochs of the ones that run here and of the last
// retiredMemory that ended here, no more; an actor fenced again after it
// retired (a restart here) is kept however many others retire after it.
func TestEpochsRetiredBounded(t *testing.T) {
	s := NewStore("owner:1")
	s.Fence("live", 0)
	s.Fence("back", 1)
	s.Retire("back")
	s.Fence("back", 2) // restarted here: live again
	for i := range 3 * retiredMemory {
		tag := fmt.Sprintf("a%d", i)
		s.Fence(tag, 1)
		if _, err := s.PutFenced([]byte("r"), tag, 1); err != nil {
			t.Fatal(err)
		}
		s.Retire(tag)
	}
	held, retired := s.Epochs()
	if retired != retiredMemory || held != retiredMemory+2 {
		t.Fatalf("after %d actors ended here: %d epochs held, %d retired; want %d and %d", 3*retiredMemory, held, retired, retiredMemory+2, retiredMemory)
	}
	for _, tag := range []string{"live", "back"} {
		if _, ok := s.epochs[tag]; !ok {
			t.Fatalf("the epoch of %s, which runs here, was forgotten", tag)
		}
	}
	if _, err := s.PutFenced([]byte("late"), "back", 1); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("late put of back's incarnation 1: %v, want ErrStaleIncarnation", err)
	}
	s.Retire("never-fenced") // nothing to retire
	if held2, _ := s.Epochs(); held2 != held {
		t.Fatalf("retiring an unknown actor: %d epochs, want %d", held2, held)
	}
}

// TestStalePutAfterRetire: a retired actor's epoch still refuses the
// late results of its older incarnations; once forgotten (retiredMemory
// other actors ended here since), such a put is taken as one of an actor
// the store never saw and makes no epoch, so the table stays bounded.
func TestStalePutAfterRetire(t *testing.T) {
	s := NewStore("owner:1")
	s.Fence("a", 2)
	s.Retire("a")
	if _, err := s.PutFenced([]byte("late"), "a", 1); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("late put of a retired actor's older incarnation: %v, want ErrStaleIncarnation", err)
	}
	for i := range retiredMemory {
		tag := fmt.Sprintf("b%d", i)
		s.Fence(tag, 0)
		s.Retire(tag)
	}
	if _, ok := s.epochs["a"]; ok {
		t.Fatal("a's epoch is still held after retiredMemory later retirements")
	}
	held, _ := s.Epochs()
	if _, err := s.PutFenced([]byte("very late"), "a", 1); err != nil {
		t.Fatalf("put of a forgotten actor: %v", err)
	}
	if held2, _ := s.Epochs(); held2 != held {
		t.Fatalf("a put of a forgotten actor made an epoch: %d, want %d", held2, held)
	}
}
