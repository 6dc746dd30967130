package cluster

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/scheduler"

	"troupe/runtime/transport"
)

// controlImpl is a node's Control service.
type controlImpl struct{ n *Node }

func (c *controlImpl) node() *Node { return c.n }

func (c *controlImpl) info(ctx context.Context, r *InfoRequest) (*InfoResponse, error) {
	n := c.node()
	out := &InfoResponse{NodeID: n.cfg.NodeID, Role: string(n.cfg.Role), GRPCAddr: n.r.grpcAddr(), GossipAddr: n.r.gossipAddr()}
	if n.cfg.Role.isServer() {
		out.RaftAddr = n.r.raftAddr()
	}
	if n.fsm != nil {
		n.fsm.Read(func(s *scheduler.State) { out.Applied = s.AppliedIndex() })
	}
	return out, nil
}

func (c *controlImpl) apply(ctx context.Context, r *ApplyRequest) (*ApplyResponse, error) {
	return c.node().apply(ctx, r)
}

func (c *controlImpl) createActors(ctx context.Context, r *CreateActorsRequest) (*CreateActorsResponse, error) {
	if len(r.Specs) == 0 {
		return nil, transport.Status(codes.InvalidArgument, errEmpty)
	}
	if len(r.Specs) > 16*maxPlaceBatch {
		return nil, status.Errorf(codes.InvalidArgument, "create actors: %d specs in one call, at most %d", len(r.Specs), 16*maxPlaceBatch)
	}
	n := c.node()
	out := new(CreateActorsResponse)
	err := n.onLeader(ctx, r.Hops, func() error {
		var err error
		out.Results, err = n.createLocal(ctx, r.Specs)
		return err
	}, func(cc *grpc.ClientConn) error {
		return cc.Invoke(ctx, "/"+ServiceName+"/CreateActors", &CreateActorsRequest{Specs: r.Specs, Hops: r.Hops + 1}, out)
	})
	return out, err
}

// forwardRead sends a read to a server when this node holds no state.
func (n *Node) forwardRead(ctx context.Context, method string, hops int, req, resp any) error {
	if hops >= maxHops {
		return status.Error(codes.Unavailable, "no server reachable")
	}
	addr := n.anyServer()
	if addr == "" {
		return status.Error(codes.Unavailable, "this worker knows no live server")
	}
	cc, err := n.peers.get(addr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "dial server %s: %v", addr, err)
	}
	return cc.Invoke(ctx, "/"+ServiceName+"/"+method, req, resp)
}

func (c *controlImpl) status(ctx context.Context, r *StatusRequest) (*ClusterStatus, error) {
	n := c.node()
	if n.raft == nil {
		out := new(ClusterStatus)
		return out, n.forwardRead(ctx, "Status", r.Hops, &StatusRequest{Hops: r.Hops + 1}, out)
	}
	out := n.Status()
	n.checkCaughtUp(ctx, out)
	return out, nil
}

// Status returns this server's view of the cluster (a worker's is empty:
// use the Status RPC, which forwards).
func (n *Node) Status() *ClusterStatus {
	out := &ClusterStatus{ReportedBy: n.cfg.NodeID}
	if n.ml != nil {
		out.GossipAlive = n.ml.NumMembers()
	}
	if n.raft == nil {
		return out
	}
	_, lid := n.raft.LeaderWithID()
	out.Leader = string(lid)
	if lid != "" {
		if m, ok := n.members.get(string(lid)); ok {
			out.LeaderAddr = m.meta.GRPC
		}
	}
	out.Term, _ = strconv.ParseUint(n.raft.Stats()["term"], 10, 64)
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		out.Servers = raftServers(f.Configuration(), lid)
	}
	n.fsm.Read(func(s *scheduler.State) { viewState(s, out) })
	return out
}

// getActor answers from the leader's state when it can (so a driver sees
// a name right after creating it) and from this server's copy otherwise.
func (c *controlImpl) getActor(ctx context.Context, r *GetActorRequest) (*GetActorResponse, error) {
	n := c.node()
	if !n.isLeader() && r.Hops < maxHops {
		if addr := n.leaderGRPC(); addr != "" && addr != n.r.grpcAddr() {
			out := new(GetActorResponse)
			cc, err := n.peers.get(addr)
			if err == nil {
				err = cc.Invoke(ctx, "/"+ServiceName+"/GetActor", &GetActorRequest{Namespace: r.Namespace, Name: r.Name, ID: r.ID, Hops: r.Hops + 1}, out)
			}
			if err == nil || status.Code(err) != codes.Unavailable || n.raft == nil {
				return out, err
			}
		}
	}
	if n.raft == nil {
		return nil, status.Error(codes.Unavailable, "this worker knows no live server")
	}
	var out *GetActorResponse
	n.fsm.Read(func(s *scheduler.State) {
		if r.ID != "" {
			if a := s.Actor(scheduler.ActorID(r.ID)); a != nil {
				out = &GetActorResponse{Actor: actorView(a)}
			}
			return
		}
		if a := s.ActorByName(r.Namespace, r.Name); a != nil && a.State != scheduler.ActorDead {
			out = &GetActorResponse{Actor: actorView(a)}
		}
	})
	if out == nil && r.ID != "" {
		return nil, status.Errorf(codes.NotFound, "no actor with ID %q", r.ID)
	}
	if out == nil {
		return nil, status.Errorf(codes.NotFound, "no live actor named %q in namespace %q", r.Name, r.Namespace)
	}
	return out, nil
}

func (c *controlImpl) stop(ctx context.Context, r *StopRequest) (*StopResponse, error) {
	n := c.node()
	reason := r.Reason
	if reason == "" {
		reason = "troupe stop"
	}
	if err := n.Drain(ctx, reason); err != nil {
		n.log.Warn("drain finished with errors", "err", err)
	}
	n.stopOnce.Do(func() { close(n.stopReq) })
	return &StopResponse{NodeID: n.cfg.NodeID}, nil
}

// nodeActors answers from this server's copy of the state (a worker node
// forwards to a server): a node follows what is committed, so a slightly
// stale copy only delays a start by a tick. Only changes are returned, so
// a node hosting many actors costs little per tick.
func (c *controlImpl) nodeActors(ctx context.Context, r *NodeActorsRequest) (*NodeActorsResponse, error) {
	n := c.node()
	if n.raft == nil {
		out := new(NodeActorsResponse)
		return out, n.forwardRead(ctx, "NodeActors", r.Hops, &NodeActorsRequest{Node: r.Node, Hosted: r.Hosted, After: r.After, Wait: r.Wait,
			Hops: r.Hops + 1}, out)
	}
	if r.Wait > 0 {
		if err := n.waitApplied(ctx, r.After, min(r.Wait, time.Minute)); err != nil {
			return nil, err
		}
	}
	out := &NodeActorsResponse{Waits: true, LeaderAge: n.leaderAge()}
	node := scheduler.NodeID(r.Node)
	n.fsm.Read(func(s *scheduler.State) {
		out.Index = s.AppliedIndex()
		if nd := s.Node(node); nd != nil && (nd.State == scheduler.NodeSuspect || nd.State == scheduler.NodeDead) {
			out.NotAlive = true
		}
		for _, a := range s.StartingOn(node) { // not its running actors: a tick costs little on a busy node
			if inc, ok := r.Hosted[a.Spec.ID]; ok && inc == a.Restarts {
				out.Unreported = append(out.Unreported, a.Spec.ID)
				continue
			}
			out.Start = append(out.Start, cloneActor(a))
		}
		for id, inc := range r.Hosted {
			a := s.Actor(id)
			var why string
			switch {
			case a == nil:
				why = "forgotten by the cluster"
			case a.State == scheduler.ActorDead:
				why = a.DeathCause
			case a.Node != node || a.Restarts != inc:
				why = "replaced by a newer incarnation"
			default:
				continue
			}
			if why == "" {
				why = "killed"
			}
			if out.End == nil {
				out.End = map[scheduler.ActorID]string{}
			}
			out.End[id] = why
		}
	})
	return out, nil
}

// waitApplied waits until this server's state has applied an entry past
// index after, or wait passes.
func (n *Node) waitApplied(ctx context.Context, after uint64, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := n.fsm.Changed() // before reading: no apply is missed
		var applied uint64
		n.fsm.Read(func(s *scheduler.State) { applied = s.AppliedIndex() })
		if applied > after {
			return nil
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-n.ctx.Done():
			return status.Error(codes.Unavailable, "node shutting down")
		case <-changed:
		case <-timer.C:
			return nil
		}
	}
}

// cloneActor copies an actor record out of the FSM (the GPU slice is the
// only mutable part the record shares; Args is never modified in place).
func cloneActor(a *scheduler.Actor) scheduler.Actor {
	c := *a
	c.GPUs = append([]scheduler.GPUAlloc(nil), a.GPUs...)
	return c
}

// followerCatchUp bounds how long a follower waits for an actor it does
// not know yet to appear in its state before answering NotFound.
const followerCatchUp = 5 * time.Second

// waitActor waits on this server's state, woken by every apply (no
// polling), so the caller makes one call per wait instead of polling over
// the network.
func (c *controlImpl) waitActor(ctx context.Context, r *WaitActorRequest) (*GetActorResponse, error) {
	n := c.node()
	if n.raft == nil {
		out := new(GetActorResponse)
		return out, n.forwardRead(ctx, "WaitActor", r.Hops, &WaitActorRequest{ID: r.ID, MinRestarts: r.MinRestarts, Timeout: r.Timeout, Hops: r.Hops + 1}, out)
	}
	var out *GetActorResponse
	notFound := false
	err := n.waitOnState(ctx, r.Timeout, func(s *scheduler.State, final bool) (finished, unknown bool) {
		a := s.Actor(scheduler.ActorID(r.ID))
		if a == nil {
			notFound = final
			return final, !final
		}
		out = &GetActorResponse{Actor: actorView(a)}
		return a.State == scheduler.ActorDead || (a.State == scheduler.ActorAlive && a.Address != "" && a.Restarts >= r.MinRestarts), false
	})
	switch {
	case err != nil:
		return nil, err
	case notFound:
		return nil, status.Errorf(codes.NotFound, "no actor with ID %q", r.ID)
	}
	return out, nil
}

// waitOnState calls look with this server's state at once and again after
// every apply that changes it (no polling), until look reports finished,
// timeout (capped at a minute) passes, or ctx or the node ends. final tells
// look whether an unknown ID is final: a follower may not have applied a
// create the caller learned of from the leader, so an unknown ID is final
// only on the leader or once a follower has had followerCatchUp to catch
// up; look reports unknown to be looked at again then.
func (n *Node) waitOnState(ctx context.Context, timeout time.Duration, look func(s *scheduler.State, final bool) (finished, unknown bool)) error {
	timeout = min(max(timeout, 0), time.Minute)
	start := time.Now()
	deadline := start.Add(timeout)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		changed := n.fsm.Changed() // before reading: no apply is missed
		final := n.isLeader() || time.Since(start) >= min(timeout, followerCatchUp)
		var finished, unknown bool
		n.fsm.Read(func(s *scheduler.State) { finished, unknown = look(s, final) })
		if finished || !time.Now().Before(deadline) {
			return nil
		}
		var recheck <-chan time.Time // an unknown ID is re-judged in time
		if unknown {
			recheck = time.After(min(timeout, followerCatchUp) - time.Since(start))
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-n.ctx.Done():
			return status.Error(codes.Unavailable, "node shutting down")
		case <-changed: // the state moved on: look again
		case <-timer.C:
		case <-recheck:
		}
	}
}

// waitActors is waitActor for many actors at once: it returns as soon as
// at least one of them is done (dead, or alive with an address), with all
// those done by then, so a driver waiting for a batch of spawns makes one
// call per wake-up instead of one per actor. An unknown ID is final as in
// waitActor (at once on the leader, after followerCatchUp on a follower).
func (c *controlImpl) waitActors(ctx context.Context, r *WaitActorsRequest) (*WaitActorsResponse, error) {
	n := c.node()
	if n.raft == nil {
		out := new(WaitActorsResponse)
		return out, n.forwardRead(ctx, "WaitActors", r.Hops, &WaitActorsRequest{IDs: r.IDs, Timeout: r.Timeout, Hops: r.Hops + 1}, out)
	}
	if len(r.IDs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "wait actors: no IDs")
	}
	var out *WaitActorsResponse
	err := n.waitOnState(ctx, r.Timeout, func(s *scheduler.State, final bool) (finished, unknown bool) {
		out = new(WaitActorsResponse)
		for _, id := range r.IDs {
			a := s.Actor(scheduler.ActorID(id))
			switch {
			case a == nil:
				unknown = true
				if final {
					out.NotFound = append(out.NotFound, id)
				}
			case a.State == scheduler.ActorDead || (a.State == scheduler.ActorAlive && a.Address != ""):
				out.Done = append(out.Done, actorView(a))
			}
		}
		return len(out.Done) > 0 || len(out.NotFound) > 0, unknown
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
