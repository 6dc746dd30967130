package cluster

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// neverFuture is a raft future that is never answered, as an entry the
// state machine's goroutine held when raft shut down (hashicorp/raft#498).
type neverFuture struct{ block chan struct{} }

func (f neverFuture) Error() error { <-f.block; return nil }

type doneFuture struct{ err error }

func (f doneFuture) Error() error { return f.err }

func TestAwaitGivesUpWhenRaftGoesDown(t *testing.T) {
	n := &Node{raftDown: make(chan struct{})}
	want := errors.New("leadership lost")
	if err := n.await(doneFuture{want}); err != want {
		t.Fatalf("answered future: got %v, want %v", err, want)
	}
	f := neverFuture{block: make(chan struct{})}
	defer close(f.block)
	got := make(chan error, 1)
	go func() { got <- n.await(f) }()
	close(n.raftDown)
	if err := <-got; !errors.Is(err, raft.ErrRaftShutdown) {
		t.Fatalf("unanswered future after raft went down: got %v, want %v", err, raft.ErrRaftShutdown)
	}
}
