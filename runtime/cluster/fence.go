package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"troupe/runtime/worker"
	"troupe/scheduler"
)

// No actor runs twice: epochs first, the self-fence as a backstop.
//
// Every incarnation of an actor has an epoch, its committed restart count
// (scheduler.Actor.Restarts, actors.ActorInfo.Epoch): the leader commits
// it before the incarnation starts, and each restart commits a larger one.
// troupe refuses what a replaced incarnation does, by epoch, wherever it
// reaches:
//
//   - the wire: a call names the incarnation it is for, and the worker runs
//     it only there (wire.FencedHost). A call naming a newer incarnation
//     than the one a worker runs proves that one replaced: it is refused
//     and the worker ends it at once (runtime/worker);
//   - the object store: a worker's store refuses the results of an
//     incarnation older than one it has seen (objstore.Store.PutFenced);
//   - callers: a driver refuses a reply from an incarnation older than the
//     newest it has seen committed (runtime/driver), so a call it retried
//     on the new incarnation is not answered twice;
//
// all with actors.ErrStaleIncarnation. So the leader need not wait until a
// lost node has surely stopped its actors before it restarts them: a node
// gossip has lost is committed suspect (it keeps its actors, gets no new
// ones) and dead, which restarts its actors elsewhere, after suspectGrace,
// a few probe intervals that let a node memberlist declared dead by mistake
// refute it. memberlist has already waited out its own suspicion timeout
// by then, so a lost worker's actors restart a few seconds after it went.
//
// The self-fence stays, as the backstop for what no epoch reaches: an
// incarnation's writes outside troupe (files, databases, other services).
// A node cut off from the cluster (its network, or the servers it can
// reach have lost the leader) cannot learn that the leader gave its actors
// to other nodes. So it stops them itself: once it has had no contact with
// the cluster for fenceLease it kills its job worker processes, and it
// starts nothing until contact is back. Contact is an answer to its sync
// (NodeActors) from a server that heard from the raft leader recently, in
// which the node is still alive; its time is when the question was asked,
// less the server's time since it last heard from the leader. Between the
// restart elsewhere and the fence, a replaced incarnation on a cut-off
// node may still run and write outside troupe: such writes must carry
// the epoch, checked by what they write to (docs/clusters.md, "Fencing").
//
// A node that drained (troupe stop) has stopped its workers and is
// committed dead at once. Every node of a cluster must use the same
// Timing, from which both durations derive.

// fenceLease is how long a node runs its actors without contact with the
// cluster: the job lease (20 gossip probe intervals, at least 3 s).
func (n *Node) fenceLease() time.Duration { return n.jobLease() }

// suspectGrace is how long the leader keeps a lost node suspect before it
// commits the node dead and its actors restart elsewhere.
func (n *Node) suspectGrace() time.Duration { return suspectGraceFor(n.cfg.Timing) }

// suspectGraceFor is two probe intervals (at least 200 ms): a node that
// memberlist declared dead while it was only slow refutes that within a
// probe or two, and keeps its actors.
func suspectGraceFor(t Timing) time.Duration { return max(2*t.ProbeInterval, 200*time.Millisecond) }

// contactClock decides when a node fences itself. It is pure logic over
// the times it is given (tested with made-up clocks).
type contactClock struct {
	lease  time.Duration
	last   time.Time // latest moment the node was known in contact
	fenced bool
}

// contact records contact with the cluster as of at (now is the time of
// the call). An answer already older than the lease is not contact. It
// reports whether the node was fenced and may run actors again.
func (c *contactClock) contact(at, now time.Time) (unfenced bool) {
	if now.Sub(at) > c.lease {
		return false
	}
	if at.After(c.last) {
		c.last = at
	}
	if c.fenced {
		c.fenced = false
		return true
	}
	return false
}

// due reports, once, that the node has gone without contact for longer
// than the lease and must fence itself now.
func (c *contactClock) due(now time.Time) bool {
	if c.fenced || now.Sub(c.last) <= c.lease {
		return false
	}
	c.fenced = true
	return true
}

// nodeVerdict is the leader's decision for one registered node given the
// gossip view: the state to commit (0: none) and its cause. gone says
// gossip has lost the node (failed probes, or not a member at all after
// the leader's grace period).
func nodeVerdict(nd *scheduler.Node, inGossip bool, gossip memberlist.NodeStateType, gone bool, now time.Time, wait time.Duration) (scheduler.NodeState, string) {
	alive := inGossip && gossip == memberlist.StateAlive
	switch {
	case alive && (nd.State == scheduler.NodeDead || nd.State == scheduler.NodeSuspect):
		return scheduler.NodeAlive, ""
	case alive || !gone || nd.State == scheduler.NodeDead:
		return 0, ""
	case nd.State == scheduler.NodeDraining:
		return scheduler.NodeDead, fmt.Sprintf("node %s left the cluster (drained)", nd.ID)
	case nd.State == scheduler.NodeAlive:
		why := "failed gossip probes"
		if !inGossip {
			why = "not in gossip membership"
		}
		return scheduler.NodeSuspect, fmt.Sprintf("node %s lost: %s", nd.ID, why)
	case nd.State == scheduler.NodeSuspect && now.Sub(time.Unix(0, nd.UpdatedAt)) >= wait:
		cause := nd.Cause
		if cause == "" {
			cause = fmt.Sprintf("node %s lost", nd.ID)
		}
		return scheduler.NodeDead, fmt.Sprintf("%s, and suspect for %v", cause, wait)
	}
	return 0, ""
}

// leaderAge is how long ago this server heard from the raft leader (0 on
// the leader; a day when it never has).
func (n *Node) leaderAge() time.Duration {
	if n.raft == nil || n.isLeader() {
		return 0
	}
	last := n.raft.LastContact()
	if last.IsZero() {
		return 24 * time.Hour
	}
	return time.Since(last)
}

// fenceState is the workerSet's part of self-fencing (guarded by
// workerSet.mu).
type fenceState struct {
	clock contactClock
	// lost are the deaths of the incarnations the fence ended, committed
	// once contact is back.
	lost []scheduler.Command
}

// contact records an answer from the cluster that began at asked.
func (w *workerSet) contact(resp *NodeActorsResponse, asked time.Time) {
	if resp.NotAlive {
		return
	}
	w.mu.Lock()
	unfenced := w.fence.clock.contact(asked.Add(-resp.LeaderAge), time.Now())
	var lost []scheduler.Command
	if unfenced {
		lost, w.fence.lost = w.fence.lost, nil
	}
	w.mu.Unlock()
	if !unfenced {
		return
	}
	w.n.log.Warn("contact with the cluster is back: running actors again", "ended", len(lost))
	w.n.wg.Add(1)
	go func() {
		defer w.n.wg.Done()
		for _, c := range lost {
			w.commit(c)
		}
	}()
}

// fenced reports whether the node has fenced itself (w.mu held).
func (w *workerSet) fencedLocked() bool { return w.fence.clock.fenced }

// checkFence fences the node if it has been out of contact for longer
// than the lease: every job worker process is killed, and waited for,
// before it returns.
func (w *workerSet) checkFence(now time.Time) {
	w.mu.Lock()
	if w.closing || !w.fence.clock.due(now) {
		w.mu.Unlock()
		return
	}
	cause := fmt.Sprintf("node %s fenced itself: no contact with the cluster for %v", w.n.cfg.NodeID, now.Sub(w.fence.clock.last).Round(time.Millisecond))
	for id, h := range w.actors {
		w.fence.lost = append(w.fence.lost, &scheduler.ActorDied{Actor: id, Incarnation: h.inc, Cause: cause, At: now.UnixNano()})
		delete(w.seen, key(id, h.inc))
	}
	n := len(w.actors)
	w.actors = map[scheduler.ActorID]hosted{}
	procs := w.procs
	w.procs = map[scheduler.JobID]*worker.Proc{}
	lease := w.fence.clock.lease
	w.mu.Unlock()
	if n == 0 && len(procs) == 0 {
		w.n.log.Info("no contact with the cluster for longer than the lease: starting no actors until it is back", "lease", lease)
		return
	}
	w.n.log.Warn("no contact with the cluster for longer than the lease: stopping every actor of this node", "actors", n,
		"workers", len(procs), "lease", lease)
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(0) }() // killed, not asked: it must not outlive the lease
	}
	wg.Wait()
}

// fenceLoop checks the contact clock often enough that the node stops its
// actors well inside the leader's margin.
func (n *Node) fenceLoop() {
	every := max(n.fenceLease()/20, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case now := <-t.C:
			n.workers.checkFence(now)
		}
	}
}
