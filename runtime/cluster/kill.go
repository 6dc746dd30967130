package cluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"troupe/runtime/transport"
	"troupe/runtime/worker"
	"troupe/scheduler"
)

// A committed KillActor is made synchronous here: the leader that commits
// it asks the node hosting the actor to end the incarnation in its worker
// and waits for the worker's acknowledgement before the Apply returns. So
// when actors.Kill returns, the worker's wire server no longer has the
// actor and every later call fails (the caller then finds it dead in the
// state). A node that cannot be reached within endActorTimeout is left to
// its next sync, or to self-fencing (fence.go) if it lost the cluster.

// NodeServiceName is the gRPC service a node answers for the leader.
const NodeServiceName = "troupe.Node"

// EndActorRequest asks a node to end one incarnation of an actor now.
type EndActorRequest struct {
	Actor       string `msgpack:"actor"`
	Incarnation int    `msgpack:"inc"`
	Cause       string `msgpack:"cause,omitempty"`
}

// EndActorResponse says the incarnation no longer runs on the node.
type EndActorResponse struct{}

// endActorTimeout bounds how long a kill waits for the hosting node.
const endActorTimeout = 5 * time.Second

type nodeServer interface {
	endActor(ctx context.Context, r *EndActorRequest) (*EndActorResponse, error)
}

var nodeDesc = grpc.ServiceDesc{
	ServiceName: NodeServiceName,
	HandlerType: (*nodeServer)(nil),
	Methods: []grpc.MethodDesc{
		transport.UnaryMethod(NodeServiceName, "EndActor", nodeServer.endActor),
	},
	Metadata: "troupe/runtime/cluster/kill.go",
}

// nodeImpl is the node's side of the Node service.
type nodeImpl struct{ n *Node }

func (s *nodeImpl) endActor(ctx context.Context, r *EndActorRequest) (*EndActorResponse, error) {
	if r.Actor == "" {
		return nil, fmt.Errorf("end actor: no actor named")
	}
	if err := s.n.workers.end(ctx, scheduler.ActorID(r.Actor), r.Incarnation, r.Cause); err != nil {
		return nil, err
	}
	return &EndActorResponse{}, nil
}

// end ends incarnation inc of actor id on this node and returns once no
// worker of the node serves it. The node's periodic sync may be ending it
// at the same time (its kill message is sent outside w.mu), so every live
// worker process is asked, not only the one that hosts it: the control
// channel is ordered, so each acknowledgement comes after any kill sent
// before it.
func (w *workerSet) end(ctx context.Context, id scheduler.ActorID, inc int, cause string) error {
	if cause == "" {
		cause = "killed"
	}
	w.mu.Lock()
	if h, ok := w.actors[id]; ok && h.inc == inc {
		delete(w.actors, id)
		delete(w.seen, key(id, inc))
	}
	procs := make([]*worker.Proc, 0, len(w.procs))
	for _, p := range w.procs {
		procs = append(procs, p)
	}
	w.mu.Unlock()
	var first error
	for _, p := range procs {
		if err := p.EndActor(ctx, string(id), inc, cause); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// killTarget returns, for an encoded KillActor, the node and incarnation
// of the actor it names as the state has them now (before the commit);
// ok is false for any other command or an actor that runs nowhere.
func (n *Node) killTarget(cmd []byte) (node scheduler.NodeID, req EndActorRequest, ok bool) {
	if len(cmd) == 0 || scheduler.CommandType(cmd[0]) != scheduler.CmdKillActor {
		return "", req, false
	}
	c, err := scheduler.DecodeCommand(cmd)
	if err != nil {
		return "", req, false
	}
	k := c.(*scheduler.KillActor)
	n.fsm.Read(func(s *scheduler.State) {
		a := s.Actor(k.Actor)
		if a == nil || a.Node == "" || a.State == scheduler.ActorDead {
			return
		}
		node, ok = a.Node, true
		req = EndActorRequest{Actor: string(k.Actor), Incarnation: a.Restarts, Cause: k.Cause}
	})
	return node, req, ok
}

// endOn asks node to end the incarnation (this node's own workers
// directly), waiting at most endActorTimeout. A failure is logged, not
// returned: the kill is committed, and the node ends the actor at its next
// sync or fences itself when it cannot reach the cluster.
func (n *Node) endOn(ctx context.Context, node scheduler.NodeID, req *EndActorRequest) {
	ctx, cancel := context.WithTimeout(ctx, endActorTimeout)
	defer cancel()
	var err error
	if string(node) == n.cfg.NodeID {
		err = n.workers.end(ctx, scheduler.ActorID(req.Actor), req.Incarnation, req.Cause)
	} else if addr := n.nodeAddr(string(node)); addr == "" {
		err = fmt.Errorf("node is not alive in gossip")
	} else {
		var cc *grpc.ClientConn
		if cc, err = n.peers.get(addr); err == nil {
			err = cc.Invoke(ctx, "/"+NodeServiceName+"/EndActor", req, new(EndActorResponse))
		}
	}
	if err != nil {
		n.log.Warn("killed actor not confirmed stopped by its node (it ends at the node's next sync)", "actor", req.Actor,
			"incarnation", req.Incarnation, "node", node, "err", err)
	}
}
