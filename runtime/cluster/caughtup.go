package cluster

import (
	"context"
	"strconv"
)

// Honest status: a server that has not caught up with the leader says so.
// A server restarted with its data dir, for instance, knows no leader for
// a few seconds and then replays the log: until it has applied what the
// leader had, its state shows fewer nodes and actors than there are.

// catchUpSlack is how far a server that has caught up once may trail the
// leader before it is reported catching up again: entries in flight under
// load are not news.
const catchUpSlack = 16

// catchingUp decides from a server's applied index and the index it must
// reach (target; 0 when unknown) whether it reports that it is catching
// up. leaderKnown says whether target is the leader's applied index;
// caughtBefore whether this server has caught up since it started.
func catchingUp(applied, target uint64, leaderKnown, caughtBefore bool) bool {
	switch {
	case !leaderKnown:
		return true // nothing to compare with: the state may be old
	case applied >= target:
		return false
	case !caughtBefore:
		return true
	default:
		return target-applied > catchUpSlack
	}
}

// checkCaughtUp fills st's CatchingUp and KnownIndex on a server: the
// leader is asked for its applied index (the leader itself has caught up
// once its barrier passed).
func (n *Node) checkCaughtUp(ctx context.Context, st *ClusterStatus) {
	if n.raft == nil {
		return
	}
	if n.isLeader() {
		if !n.leaderReady.Load() {
			st.CatchingUp, st.KnownIndex = true, n.lastLogIndex()
		}
		return
	}
	var target uint64
	known := false
	if addr := n.leaderGRPC(); addr != "" && addr != n.r.grpcAddr() {
		if info, err := n.peerInfo(ctx, addr); err == nil {
			target, known = info.Applied, true
		}
	}
	if !known {
		target = n.lastLogIndex()
	}
	if catchingUp(st.AppliedIndex, target, known, n.caughtUp.Load()) {
		st.CatchingUp, st.KnownIndex = true, max(target, st.AppliedIndex)
		return
	}
	n.caughtUp.Store(true)
}

// lastLogIndex is the last index in this server's raft log.
func (n *Node) lastLogIndex() uint64 {
	v, _ := strconv.ParseUint(n.raft.Stats()["last_log_index"], 10, 64)
	return v
}
