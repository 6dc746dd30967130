package scheduler

import (
	"fmt"
	"sort"
)

// withoutGPUs returns r with its GPU count zeroed (GPUs are checked per
// device).
func withoutGPUs(r Resources) Resources { r.GPUs = 0; return r }

// reserveOnNode takes res with the given GPU shares from n's free
// resources, or changes nothing and says what does not fit.
func (s *State) reserveOnNode(n *Node, res Resources, gpus []GPUAlloc) error {
	if err := nodeReserve(n, res, gpus); err != nil {
		return err
	}
	s.touch(n)
	return nil
}

// releaseOnNode gives back what reserveOnNode took.
func (s *State) releaseOnNode(n *Node, res Resources, gpus []GPUAlloc) {
	nodeRelease(n, res, gpus)
	s.touch(n)
}

// nodeReserve is reserveOnNode without the index upkeep (also used on the
// planner's scratch copies of nodes).
func nodeReserve(n *Node, res Resources, gpus []GPUAlloc) error {
	if short := n.Free.shortfall(withoutGPUs(res)); len(short) > 0 {
		return fmt.Errorf("%w: node %s lacks %v", ErrConflict, n.ID, short)
	}
	err := checkGPUAllocs(res, gpus, func(idx int) (float64, bool) {
		sl := n.slot(idx)
		if sl < 0 {
			return 0, false
		}
		return n.GPUs[sl].Free, true
	})
	if err != nil {
		return fmt.Errorf("node %s: %w", n.ID, err)
	}
	n.Free.addInPlace(withoutGPUs(res), -1)
	for _, a := range gpus {
		sl := n.slot(a.Index)
		n.GPUs[sl].Free = q(n.GPUs[sl].Free - a.Fraction)
		n.Free.GPUs = q(n.Free.GPUs - a.Fraction)
	}
	return nil
}

// nodeRelease gives back what nodeReserve took.
func nodeRelease(n *Node, res Resources, gpus []GPUAlloc) {
	n.Free.addInPlace(withoutGPUs(res), +1)
	for _, a := range gpus {
		if sl := n.slot(a.Index); sl >= 0 {
			n.GPUs[sl].Free = q(n.GPUs[sl].Free + a.Fraction)
			n.Free.GPUs = q(n.Free.GPUs + a.Fraction)
		}
	}
}

// bundleFree returns the free share of device idx within b.
func (b *Bundle) bundleFree(idx int) (float64, bool) {
	for _, g := range b.GPUFree {
		if g.Index == idx {
			return g.Fraction, true
		}
	}
	return 0, false
}

// reserveInBundle takes res with the given GPU shares from b's unused
// reservation.
func reserveInBundle(b *Bundle, res Resources, gpus []GPUAlloc) error {
	if short := b.Free.shortfall(withoutGPUs(res)); len(short) > 0 {
		return fmt.Errorf("%w: bundle %d lacks %v", ErrConflict, b.Index, short)
	}
	if err := checkGPUAllocs(res, gpus, b.bundleFree); err != nil {
		return fmt.Errorf("bundle %d: %w", b.Index, err)
	}
	b.Free.addInPlace(withoutGPUs(res), -1)
	b.adjustGPUs(gpus, -1)
	return nil
}

// releaseInBundle gives back what reserveInBundle took.
func releaseInBundle(b *Bundle, res Resources, gpus []GPUAlloc) {
	b.Free.addInPlace(withoutGPUs(res), +1)
	b.adjustGPUs(gpus, +1)
}

func (b *Bundle) adjustGPUs(gpus []GPUAlloc, sign float64) {
	for _, a := range gpus {
		for i := range b.GPUFree {
			if b.GPUFree[i].Index == a.Index {
				b.GPUFree[i].Fraction = q(b.GPUFree[i].Fraction + sign*a.Fraction)
				b.Free.GPUs = q(b.Free.GPUs + sign*a.Fraction)
			}
		}
	}
}

// relations are derived lookups (not serialized): which actors sit on a
// node, belong to a group, or to a job. They are rebuilt after a restore.
type relations struct {
	onNode map[NodeID]map[ActorID]struct{}
	// starting: actors placed on the node and not yet alive (PENDING or
	// RESTARTING) that the node must launch (see launches). A node asks
	// for them after every commit, so the set must not hold what it would
	// skip: placement records with nothing to run would make every ask
	// cost O(records), a cost that grew with the live actors.
	starting map[NodeID]map[ActorID]struct{}
	inGroup  map[GroupID]map[ActorID]struct{}
	ofJob    map[JobID]map[ActorID]struct{}
	// waiting: actors that are not dead and have no node (PENDING or
	// RESTARTING), so that looking for them costs O(waiting), not
	// O(actors).
	waiting map[ActorID]struct{}
}

func (r *relations) setWaiting(id ActorID, on bool) {
	if !on {
		delete(r.waiting, id)
		return
	}
	if r.waiting == nil {
		r.waiting = map[ActorID]struct{}{}
	}
	r.waiting[id] = struct{}{}
}

func addRel[K comparable](m *map[K]map[ActorID]struct{}, k K, a ActorID) {
	if *m == nil {
		*m = map[K]map[ActorID]struct{}{}
	}
	set := (*m)[k]
	if set == nil {
		set = map[ActorID]struct{}{}
		(*m)[k] = set
	}
	set[a] = struct{}{}
}

func delRel[K comparable](m map[K]map[ActorID]struct{}, k K, a ActorID) {
	if set := m[k]; set != nil {
		delete(set, a)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

// sortedIDs returns the members of set in ID order, so state changes that
// walk them are deterministic.
func sortedIDs(set map[ActorID]struct{}) []ActorID {
	out := make([]ActorID, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// launches reports whether a node has something to launch for a: its spec
// carries Args (runtime/cluster's encoded launch). An actor without them is
// a placement record that whoever created it runs, or nobody.
func launches(a *Actor) bool { return len(a.Spec.Args) > 0 }

func (s *State) rebuildRelations() {
	s.rel = relations{}
	for id, a := range s.d.Actors {
		if a.State == ActorDead {
			continue
		}
		s.rel.setWaiting(id, a.Node == "")
		if a.Node != "" {
			addRel(&s.rel.onNode, a.Node, id)
			if a.State != ActorAlive && launches(a) {
				addRel(&s.rel.starting, a.Node, id)
			}
		}
		if a.Spec.Request.Group != "" {
			addRel(&s.rel.inGroup, a.Spec.Request.Group, id)
		}
		if a.Spec.JobID != "" {
			addRel(&s.rel.ofJob, a.Spec.JobID, id)
		}
	}
}
