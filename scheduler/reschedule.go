package scheduler

import (
	"fmt"
	"sort"
)

// Waiting is something PlanPending could not place yet, with the reason.
type Waiting struct {
	// Actor is set for a waiting actor.
	Actor ActorID
	// Group is set for a placement group with waiting bundles.
	Group GroupID
	// Err wraps ErrPending or ErrInfeasible with a reason a person can read.
	Err error
}

// PlanPending decides placements for everything that waits: bundles of
// pending or rescheduling placement groups first (oldest first), then
// pending and restarting actors without a node (oldest first). Each
// decision sees the ones before it (they are applied to a scratch copy of
// the state), so the returned commands can be committed together, for
// example as one Batch. What cannot be placed is listed in waiting.
//
// An actor that can never be placed again fails instead of waiting
// forever: one with hard affinity to a node that is dead or no longer in
// the cluster, or one whose placement group is gone, gets a KillActor
// whose cause names the node or group (its ActorDiedError says why).
//
// It costs O(waiting actors + groups) unless it decides something: the
// leader calls it at every reconcile while anything waits (an actor that
// does not fit may wait for hours), and a copy of a state of 100,000
// actors under the FSM's read lock each time held up every apply.
func (p Planner) PlanPending(s *State, at int64) (cmds []Command, waiting []Waiting) {
	if !p.decides(s) {
		// Nothing would be applied, so planning on s itself changes
		// nothing and gives what planning on a copy would.
		return p.planPending(s, at)
	}
	return p.planPending(s.Clone(), at)
}

// decides reports whether planPending would decide anything on s: a group
// waits (its planning is left to a copy), or a waiting actor can be placed
// or must be killed. It only reads s.
func (p Planner) decides(s *State) bool {
	for _, g := range s.d.Groups {
		if g.State != GroupCreated {
			return true
		}
	}
	s.idx.ensure(s)
	for id := range s.rel.waiting {
		req := s.d.Actors[id].Spec.Request
		if neverPlaceable(s, req) != "" {
			return true
		}
		if _, err := p.Place(s, req); err == nil {
			return true
		}
	}
	return false
}

func (p Planner) planPending(scratch *State, at int64) (cmds []Command, waiting []Waiting) {
	scratch.idx.ensure(scratch)
	groups := scratch.Groups()
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].CreatedAt < groups[j].CreatedAt })
	for _, g := range groups {
		if g.State == GroupCreated {
			continue
		}
		var todo []int
		fixed := map[int]BundlePlacement{}
		for i := range g.Bundles {
			b := &g.Bundles[i]
			if b.Node == "" {
				todo = append(todo, i)
			} else {
				fixed[i] = BundlePlacement{Index: i, Node: b.Node, GPUs: b.GPUs}
			}
		}
		bps, err := p.planBundles(scratch, g.Spec, todo, fixed)
		if err != nil {
			waiting = append(waiting, Waiting{Group: g.Spec.ID, Err: err})
			continue
		}
		c := &PlaceBundles{Group: g.Spec.ID, Bundles: bps, At: at}
		if err := scratch.Apply(c); err != nil {
			waiting = append(waiting, Waiting{Group: g.Spec.ID, Err: fmt.Errorf("planned bundles refused: %w", err)})
			continue
		}
		cmds = append(cmds, c)
	}
	actors := make([]*Actor, 0, len(scratch.rel.waiting))
	for id := range scratch.rel.waiting { // the actors that need placement
		actors = append(actors, scratch.d.Actors[id])
	}
	sort.Slice(actors, func(i, j int) bool {
		if actors[i].CreatedAt != actors[j].CreatedAt {
			return actors[i].CreatedAt < actors[j].CreatedAt
		}
		return actors[i].Spec.ID < actors[j].Spec.ID
	})
	for _, a := range actors {
		if cause := neverPlaceable(scratch, a.Spec.Request); cause != "" {
			c := &KillActor{Actor: a.Spec.ID, Cause: cause, At: at}
			if err := scratch.Apply(c); err != nil {
				waiting = append(waiting, Waiting{Actor: a.Spec.ID, Err: infeasible("%s (kill refused: %v)", cause, err)})
				continue
			}
			cmds = append(cmds, c)
			continue
		}
		pl, err := p.Place(scratch, a.Spec.Request)
		if err != nil {
			waiting = append(waiting, Waiting{Actor: a.Spec.ID, Err: err})
			continue
		}
		c := &PlaceActor{Actor: a.Spec.ID, Placement: pl, At: at}
		if err := scratch.Apply(c); err != nil {
			waiting = append(waiting, Waiting{Actor: a.Spec.ID, Err: fmt.Errorf("planned placement refused: %w", err)})
			continue
		}
		cmds = append(cmds, c)
	}
	return cmds, waiting
}

// NodeDied returns the commands a leader commits when node id is found
// dead: the UpdateNodeState that releases everything on it, then the
// re-placement of its actors (within their MaxRestarts) and of its
// placement-group bundles by the same policy as first placement, plus
// anything else that was waiting. What cannot be re-placed now is listed in
// waiting (it stays pending in the state and PlanPending retries it).
func (p Planner) NodeDied(s *State, id NodeID, cause string, at int64) (cmds []Command, waiting []Waiting, err error) {
	n := s.d.Nodes[id]
	if n == nil {
		return nil, nil, fmt.Errorf("node died %s: %w", id, ErrNotFound)
	}
	scratch := s.Clone()
	mark := &UpdateNodeState{Node: id, State: NodeDead, Cause: cause, At: at}
	if err := scratch.Apply(mark); err != nil {
		return nil, nil, fmt.Errorf("node died %s: %w", id, err)
	}
	rest, waiting := p.planPending(scratch, at)
	return append([]Command{mark}, rest...), waiting, nil
}

// neverPlaceable returns why req can never be placed again ("" when it
// may be): its hard-affinity node is dead or unknown, or its placement
// group is gone. A node that is only suspect or draining may recover, so
// the request keeps waiting, its pending reason naming the node.
func neverPlaceable(s *State, req Request) string {
	if g := req.Group; g != "" {
		if s.d.Groups[g] == nil {
			return fmt.Sprintf("placement group %s was removed", g)
		}
		return ""
	}
	if af := req.Affinity; af != nil && !af.Soft {
		switch n := s.d.Nodes[af.Node]; {
		case n == nil:
			return fmt.Sprintf("hard affinity to node %s, which is not in the cluster", af.Node)
		case n.State == NodeDead:
			return fmt.Sprintf("hard affinity to node %s, which is dead", af.Node)
		}
	}
	return ""
}
