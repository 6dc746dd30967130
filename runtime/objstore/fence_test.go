package objstore

import (
	"errors"
	"testing"

	"troupe/actors"
)

// TestPutFencedRefusesAStaleIncarnation: once a store has seen incarnation
// 2 of an actor (Fence, or a put of it), a put of incarnation 1 is refused
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
