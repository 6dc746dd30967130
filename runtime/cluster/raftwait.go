package cluster

import (
	"github.com/hashicorp/raft"
)

// await waits for a raft future, or until the node shuts raft down.
//
// hashicorp/raft answers a future it has taken in only when the entry
// commits, leadership is lost or its leader loop exits; an entry already
// handed to the state machine's goroutine when Shutdown stops it is
// never answered (hashicorp/raft#498, open upstream). A leader's
// reconcile that waited on such a future kept Shutdown waiting for it,
// and `troupe stop` left the head running. A future still unanswered
// when raft goes down is given up with raft.ErrRaftShutdown: its goroutine
// stays blocked, but only on a node that is going away.
func (n *Node) await(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-n.raftDown:
		select {
		case err := <-done: // answered as raft went down
			return err
		default:
			return raft.ErrRaftShutdown
		}
	}
}
