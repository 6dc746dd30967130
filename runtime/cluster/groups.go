package cluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/transport"
	"troupe/scheduler"

	"troupe/runtime/api"
)

// Placement groups through the cluster: a driver asks the leader to create
// or remove groups; the leader's placer decides every bundle's node and
// GPUs with scheduler.Planner (together with actor creations, so their
// decisions see each other), and commits the whole round as one raft entry
// (a Batch), so many concurrent requests cost one commit. Reads go to the
// leader, so a driver sees its group right after creating it.

// maxGroupsPerCall bounds one GroupsRequest.
const maxGroupsPerCall = 16 * maxPlaceBatch

type groupServer interface {
	commit(ctx context.Context, r *GroupsRequest) (*GroupsResponse, error)
	get(ctx context.Context, r *GetGroupRequest) (*GetGroupResponse, error)
}

var groupDesc = grpc.ServiceDesc{
	ServiceName: GroupServiceName,
	HandlerType: (*groupServer)(nil),
	Methods: []grpc.MethodDesc{
		transport.UnaryMethod(GroupServiceName, "Commit", groupServer.commit),
		transport.UnaryMethod(GroupServiceName, "Get", groupServer.get),
	},
	Metadata: "troupe/runtime/cluster/groups.go",
}

// groupImpl is a node's placement group service.
type groupImpl struct{ n *Node }

// groupWork is the placement-group part of a placer request.
type groupWork struct {
	create []scheduler.GroupSpec
	remove []scheduler.GroupID
	retry  bool // see GroupsRequest.Retry
}

func (w *groupWork) size() int {
	if w == nil {
		return 0
	}
	return len(w.create) + len(w.remove)
}

// plan decides item i (creates first, then removes) on the placer's
// scratch state, applies it there and returns the encoded command, or nil
// with res.Err set (or res filled from the committed state for a retried
// create).
func (w *groupWork) plan(n *Node, scratch *scheduler.State, i int, at int64, res *CreateResult) []byte {
	var c scheduler.Command
	if i < len(w.create) {
		spec := w.create[i]
		if g := scratch.Group(spec.ID); g != nil && sameGroupSpec(&g.Spec, &spec) {
			// A retry of a create that committed: report it, commit nothing.
			res.Pending = g.PendingReason
			for _, b := range g.Bundles {
				if b.Node != "" {
					res.Bundles = append(res.Bundles, scheduler.BundlePlacement{Index: b.Index, Node: b.Node, GPUs: b.GPUs})
				}
			}
			return nil
		}
		cg, err := n.planner.CreateGroup(scratch, spec, at)
		if err != nil {
			res.Err = api.Encode(err)
			return nil
		}
		res.Bundles, res.Pending = cg.Bundles, cg.PendingReason
		c = cg
	} else {
		id := w.remove[i-len(w.create)]
		if scratch.Group(id) == nil {
			if !w.retry {
				res.Err = api.Encode(fmt.Errorf("remove placement group %s: %w", id, scheduler.ErrNotFound))
			}
			return nil
		}
		c = &scheduler.RemovePlacementGroup{Group: id, At: at}
	}
	if err := scratch.Apply(c); err != nil {
		*res = CreateResult{Err: api.Encode(err)}
		return nil
	}
	b, err := scheduler.EncodeCommand(c)
	if err != nil {
		*res = CreateResult{Err: api.Encode(err)}
		return nil
	}
	return b
}

func sameGroupSpec(a, b *scheduler.GroupSpec) bool {
	ea, err1 := scheduler.EncodeCommand(&scheduler.CreatePlacementGroup{Spec: *a})
	eb, err2 := scheduler.EncodeCommand(&scheduler.CreatePlacementGroup{Spec: *b})
	return err1 == nil && err2 == nil && string(ea) == string(eb)
}

func (g *groupImpl) commit(ctx context.Context, r *GroupsRequest) (*GroupsResponse, error) {
	total := len(r.Create) + len(r.Remove)
	switch {
	case total == 0:
		return nil, status.Error(codes.InvalidArgument, "placement groups: nothing to create or remove")
	case total > maxGroupsPerCall:
		return nil, status.Errorf(codes.InvalidArgument, "placement groups: %d in one call, at most %d", total, maxGroupsPerCall)
	}
	n := g.n
	out := new(GroupsResponse)
	tried := r.Retry // an earlier attempt may have committed
	err := n.onLeader(ctx, r.Hops, func() error {
		w := &groupWork{create: r.Create, remove: r.Remove, retry: tried}
		tried = true
		var err error
		out.Results, err = n.groupsLocal(ctx, w)
		return err
	}, func(cc *grpc.ClientConn) error {
		req := &GroupsRequest{Create: r.Create, Remove: r.Remove, Hops: r.Hops + 1, Retry: tried}
		tried = true
		return cc.Invoke(ctx, "/"+GroupServiceName+"/Commit", req, out)
	})
	return out, err
}

// groupsLocal hands group work to the placer (this node must lead).
func (n *Node) groupsLocal(ctx context.Context, w *groupWork) ([]CreateResult, error) {
	return n.toPlacer(ctx, &placeReq{groups: w, reply: make(chan placeResult, 1)})
}

// get answers from the leader's state when it can (read-your-writes after
// a create), else from this server's copy; a worker node forwards.
func (g *groupImpl) get(ctx context.Context, r *GetGroupRequest) (*GetGroupResponse, error) {
	n := g.n
	if !n.isLeader() && r.Hops < maxHops {
		if addr := n.leaderGRPC(); addr != "" && addr != n.r.grpcAddr() {
			out := new(GetGroupResponse)
			cc, err := n.peers.get(addr)
			if err == nil {
				err = cc.Invoke(ctx, "/"+GroupServiceName+"/Get", &GetGroupRequest{ID: r.ID, Timeout: r.Timeout, Hops: r.Hops + 1}, out)
			}
			if err == nil || status.Code(err) != codes.Unavailable || n.raft == nil {
				return out, err
			}
		}
	}
	if n.raft == nil {
		return nil, status.Error(codes.Unavailable, "this worker knows no live server")
	}
	timeout := min(max(r.Timeout, 0), time.Minute)
	deadline := time.Now().Add(timeout)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		changed := n.fsm.Changed() // before reading: no apply is missed
		out := new(GetGroupResponse)
		done := true
		n.fsm.Read(func(s *scheduler.State) {
			if grp := s.Group(r.ID); grp != nil {
				out.Group = cloneGroup(grp)
				done = grp.State == scheduler.GroupCreated
			}
		})
		if done || !time.Now().Before(deadline) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-n.ctx.Done():
			return nil, status.Error(codes.Unavailable, "node shutting down")
		case <-changed:
		case <-timer.C:
		}
	}
}

// cloneGroup copies a group out of the FSM.
func cloneGroup(g *scheduler.PlacementGroup) *scheduler.PlacementGroup {
	c := *g
	c.Bundles = make([]scheduler.Bundle, len(g.Bundles))
	for i, b := range g.Bundles {
		cb := b
		cb.Resources, cb.Free = b.Resources.Clone(), b.Free.Clone()
		cb.GPUs = append([]scheduler.GPUAlloc(nil), b.GPUs...)
		cb.GPUFree = append([]scheduler.GPUAlloc(nil), b.GPUFree...)
		c.Bundles[i] = cb
	}
	return &c
}
