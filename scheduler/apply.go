package scheduler

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Apply applies one command to the state. It is deterministic: the same
// commands in the same order give the same state on every server. A refused
// command leaves the state unchanged and returns an error wrapping one of
// the sentinel errors. For a Batch it returns a *BatchError when some
// entries were refused (the others are applied).
func (s *State) Apply(c Command) error {
	if bt, ok := c.(*Batch); ok {
		return s.applyBatch(bt)
	}
	return s.apply1(c)
}

// ApplyBytes decodes and applies one encoded command.
func (s *State) ApplyBytes(b []byte) error {
	c, err := DecodeCommand(b)
	if err != nil {
		return err
	}
	return s.Apply(c)
}

// BatchError lists the refused entries of a Batch; the other entries were
// applied.
type BatchError struct {
	// Errs holds one entry per batch command: nil when it was applied.
	Errs []error
}

// Error summarizes the failures.
func (e *BatchError) Error() string {
	n, first := 0, -1
	for i, err := range e.Errs {
		if err != nil {
			n++
			if first < 0 {
				first = i
			}
		}
	}
	return fmt.Sprintf("batch: %d of %d commands refused; first (entry %d): %v", n, len(e.Errs), first, e.Errs[first])
}

func (s *State) applyBatch(bt *Batch) error {
	cmds := bt.decoded
	if cmds == nil || len(cmds) != len(bt.Commands) {
		cmds = make([]Command, len(bt.Commands))
		for i, b := range bt.Commands {
			c, err := decodeCommand(b, 1)
			if err != nil {
				return fmt.Errorf("batch entry %d: %w", i, err)
			}
			cmds[i] = c
		}
	}
	var errs []error
	for i, c := range cmds {
		if err := s.apply1(c); err != nil {
			if errs == nil {
				errs = make([]error, len(cmds))
			}
			errs[i] = err
		}
	}
	if errs != nil {
		return &BatchError{Errs: errs}
	}
	return nil
}

func (s *State) apply1(c Command) error {
	switch c := c.(type) {
	case *RegisterNode:
		return s.registerNode(c)
	case *UpdateNodeState:
		return s.updateNodeState(c)
	case *RemoveNode:
		return s.removeNode(c)
	case *CreateActor:
		return s.createActor(c)
	case *PlaceActor:
		return s.placeActorCmd(c)
	case *ActorStarted:
		return s.actorStarted(c)
	case *ActorDied:
		return s.actorDied(c)
	case *KillActor:
		return s.killActor(c)
	case *CreatePlacementGroup:
		return s.createGroup(c)
	case *PlaceBundles:
		return s.placeBundlesCmd(c)
	case *RemovePlacementGroup:
		return s.removeGroupCmd(c)
	case *SubmitJob:
		return s.submitJob(c)
	case *JobFinished:
		return s.jobFinished(c)
	case *Batch:
		return fmt.Errorf("%w: batches do not nest", ErrInvalid)
	case nil:
		return fmt.Errorf("%w: nil command", ErrInvalid)
	}
	return fmt.Errorf("%w: %T", ErrUnknownCommand, c)
}

// ---- nodes ----

func (s *State) registerNode(c *RegisterNode) error {
	if err := c.Node.Validate(); err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	old := s.d.Nodes[c.Node.ID]
	fresh := newNode(c.Node, c.At)
	if old == nil {
		s.d.Nodes[fresh.ID] = fresh
		s.idx.dirty = true
		return nil
	}
	if old.State == NodeDead || s.nodeIdle(old) {
		s.d.Nodes[fresh.ID] = fresh
		s.idx.dirty = true // GPU count may differ
		return nil
	}
	// The node holds allocations: only its address, labels and liveness
	// may change, or the allocations would no longer add up.
	if !sameInventory(old, fresh) {
		return fmt.Errorf("register node %s: %w: it holds allocations and re-registered with different resources or GPUs", c.Node.ID, ErrConflict)
	}
	old.Address, old.Labels, old.State, old.UpdatedAt = fresh.Address, fresh.Labels, NodeAlive, c.At
	old.Cause, old.Drained = "", false
	s.touch(old)
	return nil
}

// nodeIdle reports whether nothing is allocated on n.
func (s *State) nodeIdle(n *Node) bool {
	if len(s.rel.onNode[n.ID]) > 0 {
		return false
	}
	for _, g := range s.d.Groups {
		for i := range g.Bundles {
			if g.Bundles[i].Node == n.ID {
				return false
			}
		}
	}
	return true
}

func sameInventory(a, b *Node) bool {
	if len(a.GPUs) != len(b.GPUs) {
		return false
	}
	for i := range a.GPUs {
		if a.GPUs[i].GPUInfo != b.GPUs[i].GPUInfo {
			return false
		}
	}
	ea, _ := msgpack.Marshal(&a.Total)
	eb, _ := msgpack.Marshal(&b.Total)
	ta, _ := msgpack.Marshal(a.Topology)
	tb, _ := msgpack.Marshal(b.Topology)
	return bytes.Equal(ea, eb) && bytes.Equal(ta, tb)
}

func (s *State) updateNodeState(c *UpdateNodeState) error {
	n := s.d.Nodes[c.Node]
	if n == nil {
		return fmt.Errorf("update node %s: %w", c.Node, ErrNotFound)
	}
	switch c.State {
	case NodeAlive:
		n.Cause, n.Drained = "", false
	case NodeSuspect, NodeDraining:
		n.Cause = c.Cause
	case NodeDead:
		if n.State != NodeDead {
			cause := c.Cause
			if cause == "" {
				cause = fmt.Sprintf("node %s died", n.ID)
			}
			n.Drained = n.State == NodeDraining
			n.Cause = cause
			s.nodeDied(n, cause, c.At)
		}
	default:
		return fmt.Errorf("update node %s: %w: state %v", c.Node, ErrInvalid, c.State)
	}
	n.State, n.UpdatedAt = c.State, c.At
	s.touch(n)
	return nil
}

// nodeDied releases everything on n: its actors lose their placement
// (restarting within MaxRestarts, else dead) and its bundles wait to be
// reserved again. Afterwards n is entirely free, so it can come back.
func (s *State) nodeDied(n *Node, cause string, at int64) {
	for _, id := range sortedIDs(s.rel.onNode[n.ID]) {
		s.actorLost(s.d.Actors[id], cause, at, true, false)
	}
	for _, g := range s.d.Groups {
		for i := range g.Bundles {
			b := &g.Bundles[i]
			if b.Node != n.ID {
				continue
			}
			b.Node, b.GPUs, b.GPUFree = "", nil, nil
			b.Free = b.Resources.Clone()
			g.State, g.UpdatedAt = GroupRescheduling, at
			g.PendingReason = cause
		}
	}
	n.Free = n.Total.Clone()
	for i := range n.GPUs {
		n.GPUs[i].Free = 1
	}
	s.touch(n)
}

func (s *State) removeNode(c *RemoveNode) error {
	n := s.d.Nodes[c.Node]
	if n == nil {
		return fmt.Errorf("remove node %s: %w", c.Node, ErrNotFound)
	}
	if n.State != NodeDead {
		cause := c.Cause
		if cause == "" {
			cause = fmt.Sprintf("node %s removed", n.ID)
		}
		s.nodeDied(n, cause, c.At)
	}
	delete(s.d.Nodes, c.Node)
	s.idx.dirty = true
	return nil
}

// ---- actors ----

func (s *State) createActor(c *CreateActor) error {
	sp := c.Spec
	if err := sp.Validate(); err != nil {
		return fmt.Errorf("create actor: %w", err)
	}
	if s.d.Actors[sp.ID] != nil {
		return fmt.Errorf("create actor %s: %w: ID already used", sp.ID, ErrConflict)
	}
	if sp.Name != "" {
		if other := s.ActorByName(sp.Namespace, sp.Name); other != nil {
			return fmt.Errorf("create actor %s: %w: name %q in namespace %q taken by %s", sp.ID, ErrConflict, sp.Name, sp.Namespace, other.Spec.ID)
		}
	}
	if g := sp.Request.Group; g != "" {
		grp := s.d.Groups[g]
		if grp == nil {
			return fmt.Errorf("create actor %s: placement group %s: %w", sp.ID, g, ErrNotFound)
		}
		if sp.Request.Bundle >= len(grp.Bundles) {
			return fmt.Errorf("create actor %s: %w: bundle %d of group %s with %d bundles", sp.ID, ErrInvalid, sp.Request.Bundle, g, len(grp.Bundles))
		}
	}
	a := &Actor{Spec: sp, State: ActorPending, Bundle: AnyBundle, CreatedAt: c.At, UpdatedAt: c.At}
	if c.Placement != nil {
		if err := s.placeActor(a, *c.Placement); err != nil {
			return fmt.Errorf("create actor %s: %w", sp.ID, err)
		}
	} else {
		a.PendingReason = c.PendingReason
		s.rel.setWaiting(sp.ID, true)
	}
	s.d.Actors[sp.ID] = a
	if sp.Name != "" {
		s.d.Names[nameKey(sp.Namespace, sp.Name)] = sp.ID
	}
	if sp.Request.Group != "" {
		addRel(&s.rel.inGroup, sp.Request.Group, sp.ID)
	}
	if sp.JobID != "" {
		addRel(&s.rel.ofJob, sp.JobID, sp.ID)
	}
	return nil
}

// placeActor checks p against a's request and the state and reserves the
// resources, or changes nothing.
func (s *State) placeActor(a *Actor, p Placement) error {
	req := a.Spec.Request
	n := s.d.Nodes[p.Node]
	if n == nil {
		return fmt.Errorf("place on %s: %w: no such node", p.Node, ErrConflict)
	}
	if !n.schedulable() {
		return fmt.Errorf("place on %s: %w: node is %v", p.Node, ErrConflict, n.State)
	}
	if req.Group != "" {
		g := s.d.Groups[req.Group]
		if g == nil {
			return fmt.Errorf("place in group %s: %w: group is gone", req.Group, ErrConflict)
		}
		if p.Bundle < 0 || p.Bundle >= len(g.Bundles) || (req.Bundle != AnyBundle && p.Bundle != req.Bundle) {
			return fmt.Errorf("place in group %s: %w: bundle %d does not match request %d", req.Group, ErrConflict, p.Bundle, req.Bundle)
		}
		b := &g.Bundles[p.Bundle]
		if b.Node != p.Node {
			return fmt.Errorf("place in group %s: %w: bundle %d is on %q, not %s", req.Group, ErrConflict, p.Bundle, b.Node, p.Node)
		}
		if err := reserveInBundle(b, req.Resources, p.GPUs); err != nil {
			return fmt.Errorf("place in group %s: %w", req.Group, err)
		}
	} else {
		if p.Bundle != AnyBundle {
			return fmt.Errorf("place on %s: %w: bundle %d given for an actor outside any group", p.Node, ErrConflict, p.Bundle)
		}
		if !labelsMatch(n, req.Labels) {
			return fmt.Errorf("place on %s: %w: node labels do not match the selector", p.Node, ErrConflict)
		}
		if af := req.Affinity; af != nil && !af.Soft && af.Node != p.Node {
			return fmt.Errorf("place on %s: %w: hard affinity to %s", p.Node, ErrConflict, af.Node)
		}
		if err := s.reserveOnNode(n, req.Resources, p.GPUs); err != nil {
			return fmt.Errorf("place: %w", err)
		}
	}
	a.Node, a.Bundle, a.PendingReason = p.Node, p.Bundle, ""
	a.GPUs = append([]GPUAlloc(nil), p.GPUs...)
	addRel(&s.rel.onNode, a.Node, a.Spec.ID)
	s.rel.setWaiting(a.Spec.ID, false)
	if launches(a) {
		addRel(&s.rel.starting, a.Node, a.Spec.ID)
	}
	return nil
}

func labelsMatch(n *Node, sel map[string]string) bool {
	for k, v := range sel {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// unplace releases a's resources (into its bundle or node). When the node
// itself is being wiped (nodeGone) nothing needs releasing.
func (s *State) unplace(a *Actor, nodeGone bool) {
	if !a.placed() {
		return
	}
	if !nodeGone {
		if g := a.Spec.Request.Group; g != "" {
			if grp := s.d.Groups[g]; grp != nil && a.Bundle >= 0 && a.Bundle < len(grp.Bundles) && grp.Bundles[a.Bundle].Node == a.Node {
				releaseInBundle(&grp.Bundles[a.Bundle], a.Spec.Request.Resources, a.GPUs)
			}
		} else if n := s.d.Nodes[a.Node]; n != nil {
			s.releaseOnNode(n, a.Spec.Request.Resources, a.GPUs)
		}
	}
	delRel(s.rel.onNode, a.Node, a.Spec.ID)
	delRel(s.rel.starting, a.Node, a.Spec.ID)
	a.Node, a.GPUs, a.Bundle, a.Address = "", nil, AnyBundle, ""
	s.rel.setWaiting(a.Spec.ID, true) // until it is placed again or dies
}

// actorLost handles the end of an actor's process: release, then restart
// (if allowed and restart is wanted) or death.
func (s *State) actorLost(a *Actor, cause string, at int64, nodeGone, noRestart bool) {
	s.unplace(a, nodeGone)
	a.DeathCause, a.UpdatedAt = cause, at
	if !noRestart && (a.Spec.MaxRestarts == -1 || a.Restarts < a.Spec.MaxRestarts) {
		a.Restarts++
		a.State = ActorRestarting
		return
	}
	s.markDead(a)
}

func (s *State) markDead(a *Actor) {
	a.State = ActorDead
	s.rel.setWaiting(a.Spec.ID, false)
	if a.Spec.Name != "" {
		k := nameKey(a.Spec.Namespace, a.Spec.Name)
		if s.d.Names[k] == a.Spec.ID {
			delete(s.d.Names, k)
		}
	}
	delRel(s.rel.inGroup, a.Spec.Request.Group, a.Spec.ID)
	delRel(s.rel.ofJob, a.Spec.JobID, a.Spec.ID)
	s.d.Deaths++
	a.DeathSeq = s.d.Deaths
	s.dead = append(s.dead, a.Spec.ID)
	for len(s.dead)-s.deadHead > MaxDeadActors {
		delete(s.d.Actors, s.dead[s.deadHead])
		s.dead[s.deadHead] = ""
		s.deadHead++
	}
	if s.deadHead > 1024 && s.deadHead*2 > len(s.dead) { // compact
		s.dead = append(s.dead[:0], s.dead[s.deadHead:]...)
		s.deadHead = 0
	}
}

func (s *State) placeActorCmd(c *PlaceActor) error {
	a := s.d.Actors[c.Actor]
	if a == nil {
		return fmt.Errorf("place actor %s: %w", c.Actor, ErrNotFound)
	}
	if !a.needsPlacement() {
		return fmt.Errorf("place actor %s: %w: actor is %v on %q", c.Actor, ErrConflict, a.State, a.Node)
	}
	if err := s.placeActor(a, c.Placement); err != nil {
		return fmt.Errorf("place actor %s: %w", c.Actor, err)
	}
	a.UpdatedAt = c.At
	return nil
}

func (s *State) liveActor(id ActorID, inc int, what string) (*Actor, error) {
	a := s.d.Actors[id]
	if a == nil {
		return nil, fmt.Errorf("%s %s: %w", what, id, ErrNotFound)
	}
	if a.State == ActorDead {
		return nil, fmt.Errorf("%s %s: %w: actor is dead", what, id, ErrConflict)
	}
	if inc != a.Restarts {
		return nil, fmt.Errorf("%s %s: %w: stale incarnation %d (current %d)", what, id, ErrConflict, inc, a.Restarts)
	}
	return a, nil
}

func (s *State) actorStarted(c *ActorStarted) error {
	a, err := s.liveActor(c.Actor, c.Incarnation, "actor started")
	if err != nil {
		return err
	}
	if !a.placed() {
		return fmt.Errorf("actor started %s: %w: actor has no placement", c.Actor, ErrConflict)
	}
	a.State, a.Address, a.UpdatedAt = ActorAlive, c.Address, c.At
	delRel(s.rel.starting, a.Node, a.Spec.ID)
	return nil
}

func (s *State) actorDied(c *ActorDied) error {
	a, err := s.liveActor(c.Actor, c.Incarnation, "actor died")
	if err != nil {
		return err
	}
	s.actorLost(a, c.Cause, c.At, false, false)
	return nil
}

func (s *State) killActor(c *KillActor) error {
	a := s.d.Actors[c.Actor]
	if a == nil {
		return fmt.Errorf("kill actor %s: %w", c.Actor, ErrNotFound)
	}
	if a.State == ActorDead {
		return fmt.Errorf("kill actor %s: %w: already dead", c.Actor, ErrConflict)
	}
	cause := c.Cause
	if cause == "" {
		cause = "killed"
	}
	s.actorLost(a, cause, c.At, false, !c.Restart)
	return nil
}

// ---- placement groups ----

func (s *State) createGroup(c *CreatePlacementGroup) error {
	sp := c.Spec
	if err := sp.Validate(); err != nil {
		return fmt.Errorf("create placement group: %w", err)
	}
	if s.d.Groups[sp.ID] != nil {
		return fmt.Errorf("create placement group %s: %w: ID already used", sp.ID, ErrConflict)
	}
	g := &PlacementGroup{Spec: sp, State: GroupPending, CreatedAt: c.At, UpdatedAt: c.At, PendingReason: c.PendingReason}
	g.Bundles = make([]Bundle, len(sp.Bundles))
	for i, r := range sp.Bundles {
		g.Bundles[i] = Bundle{Index: i, Resources: r.Clone(), Free: r.Clone()}
	}
	if len(c.Bundles) > 0 {
		if len(c.Bundles) != len(sp.Bundles) {
			return fmt.Errorf("create placement group %s: %w: %d bundle placements for %d bundles", sp.ID, ErrInvalid, len(c.Bundles), len(sp.Bundles))
		}
		if err := s.placeBundles(g, c.Bundles, c.At); err != nil {
			return fmt.Errorf("create placement group %s: %w", sp.ID, err)
		}
	}
	s.d.Groups[sp.ID] = g
	return nil
}

// placeBundles reserves every listed bundle or none.
func (s *State) placeBundles(g *PlacementGroup, bps []BundlePlacement, at int64) error {
	if len(bps) == 0 {
		return fmt.Errorf("%w: no bundle placements", ErrInvalid)
	}
	seen := make(map[int]bool, len(bps))
	for _, bp := range bps {
		if bp.Index < 0 || bp.Index >= len(g.Bundles) {
			return fmt.Errorf("%w: bundle index %d of %d", ErrInvalid, bp.Index, len(g.Bundles))
		}
		if seen[bp.Index] {
			return fmt.Errorf("%w: bundle %d placed twice", ErrInvalid, bp.Index)
		}
		seen[bp.Index] = true
		if g.Bundles[bp.Index].Node != "" {
			return fmt.Errorf("%w: bundle %d already reserved on %s", ErrConflict, bp.Index, g.Bundles[bp.Index].Node)
		}
	}
	for i := range g.Bundles {
		if g.Bundles[i].Node == "" && !seen[i] {
			return fmt.Errorf("%w: bundle %d left out: the waiting bundles are reserved all together", ErrInvalid, i)
		}
	}
	if err := checkGroupStrategy(g, bps); err != nil {
		return err
	}
	for i, bp := range bps {
		n := s.d.Nodes[bp.Node]
		var err error
		switch {
		case n == nil:
			err = fmt.Errorf("%w: no such node %s", ErrConflict, bp.Node)
		case !n.schedulable():
			err = fmt.Errorf("%w: node %s is %v", ErrConflict, bp.Node, n.State)
		default:
			err = s.reserveOnNode(n, g.Bundles[bp.Index].Resources, bp.GPUs)
		}
		if err != nil {
			for _, done := range bps[:i] {
				s.releaseOnNode(s.d.Nodes[done.Node], g.Bundles[done.Index].Resources, done.GPUs)
			}
			return fmt.Errorf("bundle %d: %w", bp.Index, err)
		}
	}
	for _, bp := range bps {
		b := &g.Bundles[bp.Index]
		b.Node = bp.Node
		b.GPUs = append([]GPUAlloc(nil), bp.GPUs...)
		b.GPUFree = append([]GPUAlloc(nil), bp.GPUs...)
		b.Free = b.Resources.Clone()
	}
	g.State, g.UpdatedAt, g.PendingReason = GroupCreated, at, ""
	return nil
}

// checkGroupStrategy enforces STRICT_PACK (one node) and STRICT_SPREAD
// (distinct nodes) over the already reserved bundles plus bps.
func checkGroupStrategy(g *PlacementGroup, bps []BundlePlacement) error {
	switch g.Spec.Strategy {
	case StrictPack:
		node := bps[0].Node
		for i := range g.Bundles {
			if n := g.Bundles[i].Node; n != "" {
				node = n
				break
			}
		}
		for _, bp := range bps {
			if bp.Node != node {
				return fmt.Errorf("%w: STRICT_PACK bundle %d on %s, others on %s", ErrConflict, bp.Index, bp.Node, node)
			}
		}
	case StrictSpread:
		used := map[NodeID]int{}
		for i := range g.Bundles {
			if n := g.Bundles[i].Node; n != "" {
				used[n] = i
			}
		}
		for _, bp := range bps {
			if j, ok := used[bp.Node]; ok {
				return fmt.Errorf("%w: STRICT_SPREAD bundles %d and %d both on %s", ErrConflict, j, bp.Index, bp.Node)
			}
			used[bp.Node] = bp.Index
		}
	}
	return nil
}

func (s *State) placeBundlesCmd(c *PlaceBundles) error {
	g := s.d.Groups[c.Group]
	if g == nil {
		return fmt.Errorf("place bundles of %s: %w", c.Group, ErrNotFound)
	}
	if err := s.placeBundles(g, c.Bundles, c.At); err != nil {
		return fmt.Errorf("place bundles of %s: %w", c.Group, err)
	}
	return nil
}

func (s *State) removeGroupCmd(c *RemovePlacementGroup) error {
	g := s.d.Groups[c.Group]
	if g == nil {
		return fmt.Errorf("remove placement group %s: %w", c.Group, ErrNotFound)
	}
	s.removeGroup(g, c.At)
	return nil
}

// removeGroup kills the group's actors and returns every reservation to
// its node.
func (s *State) removeGroup(g *PlacementGroup, at int64) {
	for _, id := range sortedIDs(s.rel.inGroup[g.Spec.ID]) {
		s.actorLost(s.d.Actors[id], fmt.Sprintf("placement group %s removed", g.Spec.ID), at, false, true)
	}
	for i := range g.Bundles {
		b := &g.Bundles[i]
		if b.Node == "" {
			continue
		}
		if n := s.d.Nodes[b.Node]; n != nil {
			s.releaseOnNode(n, b.Resources, b.GPUs)
		}
	}
	delete(s.d.Groups, g.Spec.ID)
}

// ---- jobs ----

func (s *State) submitJob(c *SubmitJob) error {
	if c.Spec.ID == "" {
		return fmt.Errorf("submit job: %w: empty ID", ErrInvalid)
	}
	if s.d.Jobs[c.Spec.ID] != nil {
		return fmt.Errorf("submit job %s: %w: ID already used", c.Spec.ID, ErrConflict)
	}
	s.d.Jobs[c.Spec.ID] = &Job{Spec: c.Spec, State: JobRunning, SubmittedAt: c.At}
	return nil
}

func (s *State) jobFinished(c *JobFinished) error {
	j := s.d.Jobs[c.Job]
	if j == nil {
		return fmt.Errorf("finish job %s: %w", c.Job, ErrNotFound)
	}
	if j.State != JobRunning {
		return fmt.Errorf("finish job %s: %w: already %v", c.Job, ErrConflict, j.State)
	}
	if c.State != JobSucceeded && c.State != JobFailed && c.State != JobStopped {
		return fmt.Errorf("finish job %s: %w: final state %v", c.Job, ErrInvalid, c.State)
	}
	j.State, j.Message, j.FinishedAt = c.State, c.Message, c.At
	cause := fmt.Sprintf("job %s finished", c.Job)
	for _, id := range sortedIDs(s.rel.ofJob[c.Job]) {
		if a := s.d.Actors[id]; !a.Spec.Detached {
			s.actorLost(a, cause, c.At, false, true)
		}
	}
	for _, g := range s.Groups() {
		if g.Spec.JobID == c.Job && !g.Spec.Detached {
			s.removeGroup(g, c.At)
		}
	}
	return nil
}
