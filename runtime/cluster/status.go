package cluster

import (
	"sort"

	"github.com/hashicorp/raft"

	"troupe/scheduler"
)

// roleLabel is the node label that carries the node's role.
const roleLabel = "troupe.role"

// viewState converts the committed state (read under the FSM lock).
func viewState(st *scheduler.State, out *ClusterStatus) {
	out.AppliedIndex = st.AppliedIndex()
	for _, n := range st.Nodes() {
		out.Nodes = append(out.Nodes, nodeView(n))
	}
	out.ActorsByState = map[string]int{}
	for _, a := range st.Actors() {
		out.ActorsByState[a.State.String()]++
		if len(out.Actors) < MaxStatusActors {
			out.Actors = append(out.Actors, actorView(a))
		} else {
			out.ActorsOmitted++
		}
	}
	for _, g := range st.Groups() {
		out.Groups = append(out.Groups, groupView(g))
	}
}

func nodeView(n *scheduler.Node) NodeView {
	state := n.State.String()
	if n.State == scheduler.NodeDead && n.Drained {
		state = NodeDrained
	}
	return NodeView{ID: string(n.ID), Address: n.Address, Role: n.Labels[roleLabel], State: state,
		Total: n.Total.Clone(), Used: n.Total.Sub(n.Free), GPUs: append([]scheduler.GPU(nil), n.GPUs...), Labels: copyLabels(n.Labels),
		Cause: n.Cause, UpdatedAt: n.UpdatedAt}
}

func groupView(g *scheduler.PlacementGroup) GroupView {
	gv := GroupView{ID: string(g.Spec.ID), Name: g.Spec.Name, Strategy: g.Spec.Strategy.String(), State: g.State.String(), Pending: g.PendingReason,
		Job: string(g.Spec.JobID), Detached: g.Spec.Detached, CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt}
	for _, b := range g.Bundles {
		s := ""
		if b.Node != "" {
			s = scheduler.Placement{Node: b.Node, GPUs: b.GPUs, Bundle: scheduler.AnyBundle}.String()
		}
		gv.Bundles = append(gv.Bundles, s)
		gv.BundleResources = append(gv.BundleResources, b.Resources.Clone())
	}
	return gv
}

func actorView(a *scheduler.Actor) ActorView {
	v := ActorView{ID: string(a.Spec.ID), Namespace: a.Spec.Namespace, Name: a.Spec.Name, Class: a.Spec.Class, State: a.State.String(),
		Node: string(a.Node), GPUs: scheduler.GPUIndices(a.GPUs), Resources: a.Spec.Request.Resources.Clone(), Restarts: a.Restarts,
		Death: a.DeathCause, Address: a.Address, Pending: a.PendingReason,
		Job: string(a.Spec.JobID), MaxRestarts: a.Spec.MaxRestarts, Detached: a.Spec.Detached, Group: string(a.Spec.Request.Group),
		CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
	if a.Spec.Request.Group != "" {
		b := a.Bundle
		v.Bundle = &b
	}
	return v
}

func copyLabels(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// raftServers lists the raft configuration.
func raftServers(cfg raft.Configuration, leaderID raft.ServerID) []RaftServer {
	out := make([]RaftServer, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		out = append(out, RaftServer{ID: string(s.ID), Address: string(s.Address), Suffrage: s.Suffrage.String(), Leader: s.ID == leaderID})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
