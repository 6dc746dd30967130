package scheduler

import (
	"encoding/binary"
	"math/bits"
	"sort"
)

// State is the replicated cluster state: nodes and their free resources,
// actors, placement groups, named actors and jobs. It changes only through
// Apply (commands committed through raft), is deterministic (no clocks, no
// randomness, no map-order dependence), and is not safe for concurrent use
// on its own: FSM adds the locking and keeps the derived indexes fresh, so
// readers inside FSM.Read (including Planner calls) never write.
//
// Accessors return pointers into the state for speed; callers must treat
// them as read-only.
type State struct {
	d   stateData
	idx index
	rel relations
	// dead lists dead actors oldest first (by DeathSeq) from deadHead on;
	// beyond MaxDeadActors the oldest are forgotten.
	dead     []ActorID
	deadHead int
}

// MaxDeadActors is how many dead actors the state remembers (for status and
// death causes); older ones are forgotten, deterministically in the order
// they died, so the state does not grow without bound.
const MaxDeadActors = 10000

// stateData is the state proper (everything but derived lookups).
type stateData struct {
	Nodes  map[NodeID]*Node
	Actors map[ActorID]*Actor
	Groups map[GroupID]*PlacementGroup
	Names  map[string]ActorID // derived from Actors on restore
	Jobs   map[JobID]*Job
	// Applied is the raft index of the last applied log entry.
	Applied uint64
	// Deaths counts actor deaths; Actor.DeathSeq orders the dead for pruning.
	Deaths uint64
}

// snapshot is the serialized form of stateData: maps become slices sorted
// by ID so equal states encode to equal bytes.
type snapshot struct {
	Nodes   []*Node           `msgpack:"nodes"`
	Actors  []*Actor          `msgpack:"actors"`
	Groups  []*PlacementGroup `msgpack:"groups"`
	Jobs    []*Job            `msgpack:"jobs"`
	Applied uint64            `msgpack:"applied"`
	Deaths  uint64            `msgpack:"deaths"`
}

// NewState returns an empty cluster state.
func NewState() *State {
	s := &State{}
	s.d.init()
	s.idx.dirty = true
	return s
}

func (d *stateData) init() {
	if d.Nodes == nil {
		d.Nodes = map[NodeID]*Node{}
	}
	if d.Actors == nil {
		d.Actors = map[ActorID]*Actor{}
	}
	if d.Groups == nil {
		d.Groups = map[GroupID]*PlacementGroup{}
	}
	if d.Names == nil {
		d.Names = map[string]ActorID{}
	}
	if d.Jobs == nil {
		d.Jobs = map[JobID]*Job{}
	}
}

// AppliedIndex returns the raft log index of the last applied command (0
// when commands were applied without raft).
func (s *State) AppliedIndex() uint64 { return s.d.Applied }

// Node returns the node with the given ID, or nil.
func (s *State) Node(id NodeID) *Node { return s.d.Nodes[id] }

// Nodes returns every node sorted by ID.
func (s *State) Nodes() []*Node { return s.sortedNodes() }

func (s *State) sortedNodes() []*Node {
	if !s.idx.dirty {
		return append([]*Node(nil), s.idx.order...)
	}
	out := make([]*Node, 0, len(s.d.Nodes))
	for _, n := range s.d.Nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Actor returns the actor with the given ID, or nil.
func (s *State) Actor(id ActorID) *Actor { return s.d.Actors[id] }

// Actors returns every actor sorted by ID.
func (s *State) Actors() []*Actor {
	out := make([]*Actor, 0, len(s.d.Actors))
	for _, a := range s.d.Actors {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.ID < out[j].Spec.ID })
	return out
}

// ActorsOn returns the actors placed on node id, sorted by ID (for
// draining a node or reporting its load).
func (s *State) ActorsOn(id NodeID) []*Actor {
	set := s.rel.onNode[id]
	out := make([]*Actor, 0, len(set))
	for _, aid := range sortedIDs(set) {
		out = append(out, s.d.Actors[aid])
	}
	return out
}

// StartingOn returns the actors placed on node id that are not alive yet
// (PENDING or RESTARTING) and that the node must start, sorted by ID: those
// whose spec has Args. Placement records without Args are left out (a node
// has nothing to launch for them). Unlike ActorsOn it costs nothing for
// the node's running actors or for such records.
func (s *State) StartingOn(id NodeID) []*Actor {
	set := s.rel.starting[id]
	out := make([]*Actor, 0, len(set))
	for _, aid := range sortedIDs(set) {
		out = append(out, s.d.Actors[aid])
	}
	return out
}

// HasWaiting reports whether any actor waits for a node (PENDING or
// RESTARTING without one) or any placement group is not created yet. It
// costs O(nodes + groups), not O(actors): the leader asks after every
// reconcile, under the FSM's read lock, with any number of live actors.
func (s *State) HasWaiting() bool {
	if s.numWaitingActors() > 0 {
		return true
	}
	for _, g := range s.d.Groups {
		if g.State != GroupCreated {
			return true
		}
	}
	return false
}

// numWaitingActors counts the actors without a node that are not dead.
func (s *State) numWaitingActors() int { return len(s.rel.waiting) }

// ActorByName returns the live actor registered under namespace/name, or nil.
func (s *State) ActorByName(namespace, name string) *Actor {
	id, ok := s.d.Names[nameKey(namespace, name)]
	if !ok {
		return nil
	}
	return s.d.Actors[id]
}

// Group returns the placement group with the given ID, or nil.
func (s *State) Group(id GroupID) *PlacementGroup { return s.d.Groups[id] }

// Groups returns every placement group sorted by ID.
func (s *State) Groups() []*PlacementGroup {
	out := make([]*PlacementGroup, 0, len(s.d.Groups))
	for _, g := range s.d.Groups {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.ID < out[j].Spec.ID })
	return out
}

// NumGroups returns how many placement groups exist.
func (s *State) NumGroups() int { return len(s.d.Groups) }

// Job returns the job with the given ID, or nil.
func (s *State) Job(id JobID) *Job { return s.d.Jobs[id] }

// Jobs returns every job sorted by ID.
func (s *State) Jobs() []*Job {
	out := make([]*Job, 0, len(s.d.Jobs))
	for _, j := range s.d.Jobs {
		out = append(out, j)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.ID < out[j].Spec.ID })
	return out
}

// Clone returns a deep copy of s: applying commands to the copy leaves s
// unchanged (the planner plans multi-step decisions on a clone). Parts that
// never change after creation (specs, topology matrices) are shared.
func (s *State) Clone() *State {
	c := &State{}
	c.d = stateData{
		Nodes:  make(map[NodeID]*Node, len(s.d.Nodes)),
		Actors: make(map[ActorID]*Actor, len(s.d.Actors)),
		Groups: make(map[GroupID]*PlacementGroup, len(s.d.Groups)),
		Names:  make(map[string]ActorID, len(s.d.Names)),
		Jobs:   make(map[JobID]*Job, len(s.d.Jobs)),
	}
	c.d.Applied, c.d.Deaths = s.d.Applied, s.d.Deaths
	for id, n := range s.d.Nodes {
		c.d.Nodes[id] = n.clone()
	}
	for id, a := range s.d.Actors {
		ca := *a
		ca.GPUs = append([]GPUAlloc(nil), a.GPUs...)
		c.d.Actors[id] = &ca
	}
	for id, g := range s.d.Groups {
		c.d.Groups[id] = cloneGroup(g)
	}
	for k, v := range s.d.Names {
		c.d.Names[k] = v
	}
	for id, j := range s.d.Jobs {
		cj := *j
		c.d.Jobs[id] = &cj
	}
	c.dead = append([]ActorID(nil), s.dead[s.deadHead:]...)
	c.idx.dirty = true
	c.rebuildRelations()
	return c
}

// cloneGroup returns a copy of g that applying commands to either leaves
// the other unchanged.
func cloneGroup(g *PlacementGroup) *PlacementGroup {
	cg := *g
	cg.Bundles = make([]Bundle, len(g.Bundles))
	for i, b := range g.Bundles {
		cb := b
		cb.Resources = b.Resources.Clone()
		cb.Free = b.Free.Clone()
		cb.GPUs = append([]GPUAlloc(nil), b.GPUs...)
		cb.GPUFree = append([]GPUAlloc(nil), b.GPUFree...)
		cg.Bundles[i] = cb
	}
	return &cg
}

func nameKey(namespace, name string) string { return namespace + "/" + name }

// index holds derived per-node lookups so a placement decision does not
// scan every node: for each count k, the set of schedulable nodes with
// exactly k entirely free GPUs, and the set of schedulable nodes with a
// partly used GPU. Node ordinals follow node ID order, so the index is a
// pure function of the state (rebuilt lazily after nodes come or go).
type index struct {
	dirty   bool
	order   []*Node
	ord     map[NodeID]int
	buckets []bitset // buckets[k]: nodes with k whole free GPUs
	partial bitset
	key     []int // current bucket per ordinal, -1 when not schedulable
	maxGPUs int
	// topo[i] describes node i's GPU topology (shared between nodes with
	// the same matrix).
	topo []*topoInfo
}

// topoInfo is precomputed for each distinct topology matrix.
type topoInfo struct {
	// ideal[k] is the best link score k GPUs can have, so a search can stop
	// at a node offering that.
	ideal []int
	// cliques lists, for each distinct link score v of the matrix in
	// increasing order, the largest GPU set whose pairs all score ≥ v.
	cliques []scoreClique
}

type scoreClique struct{ score, size int }

// maxCliqueAll returns the largest set of n's GPUs whose pairs all score at
// least minScore, from the precomputed table.
func (t *topoInfo) maxCliqueAll(gpus, minScore int) int {
	if minScore <= 0 {
		return gpus
	}
	for _, c := range t.cliques {
		if c.score >= minScore {
			return c.size
		}
	}
	return min(gpus, 1)
}

func (x *index) ensure(s *State) {
	if !x.dirty {
		return
	}
	x.dirty = false
	x.order = x.order[:0]
	for _, n := range s.d.Nodes {
		x.order = append(x.order, n)
	}
	sort.Slice(x.order, func(i, j int) bool { return x.order[i].ID < x.order[j].ID })
	x.ord = make(map[NodeID]int, len(x.order))
	x.maxGPUs = 0
	for i, n := range x.order {
		x.ord[n.ID] = i
		if len(n.GPUs) > x.maxGPUs {
			x.maxGPUs = len(n.GPUs)
		}
	}
	words := (len(x.order) + 63) / 64
	x.buckets = make([]bitset, x.maxGPUs+1)
	for k := range x.buckets {
		x.buckets[k] = make(bitset, words)
	}
	x.partial = make(bitset, words)
	x.key = make([]int, len(x.order))
	for i, n := range x.order {
		x.key[i] = -1
		x.place(i, n)
	}
	x.topo = make([]*topoInfo, len(x.order))
	byTopo := map[string]*topoInfo{}
	var kb []byte
	for i, n := range x.order {
		kb = kb[:0]
		for _, row := range n.Topology {
			for _, v := range row {
				kb = binary.AppendUvarint(kb, uint64(v))
			}
		}
		kb = binary.AppendUvarint(kb, uint64(len(n.GPUs)))
		ti, ok := byTopo[string(kb)]
		if !ok {
			ti = newTopoInfo(n)
			byTopo[string(kb)] = ti
		}
		x.topo[i] = ti
	}
}

// allGPUs returns the mask of every GPU slot of n.
func allGPUs(n *Node) uint64 {
	if len(n.GPUs) == 64 {
		return ^uint64(0)
	}
	return uint64(1)<<uint(len(n.GPUs)) - 1
}

func newTopoInfo(n *Node) *topoInfo {
	t := &topoInfo{ideal: make([]int, len(n.GPUs)+1)}
	if n.Topology == nil {
		return t
	}
	all := allGPUs(n)
	for k := 2; k <= len(n.GPUs); k++ {
		_, sc, _ := bestGPUSet(n, all, k, 0, 0)
		t.ideal[k] = sc
	}
	var vals []int
	seen := map[int]bool{}
	for i, row := range n.Topology {
		for j, v := range row {
			if i != j && !seen[v] && v > 0 {
				seen[v] = true
				vals = append(vals, v)
			}
		}
	}
	sort.Ints(vals)
	for _, v := range vals {
		t.cliques = append(t.cliques, scoreClique{score: v, size: maxClique(n, all, v)})
	}
	return t
}

// place files ordinal i under its current bucket (key must be -1 or stale
// and already cleared).
func (x *index) place(i int, n *Node) {
	if !n.schedulable() {
		x.key[i] = -1
		x.partial.clear(i)
		return
	}
	k := n.wholeFree()
	x.key[i] = k
	x.buckets[k].set(i)
	if n.hasPartial() {
		x.partial.set(i)
	} else {
		x.partial.clear(i)
	}
}

// touch refreshes n's index entry after its free resources or state changed.
func (s *State) touch(n *Node) {
	x := &s.idx
	if x.dirty {
		return
	}
	i, ok := x.ord[n.ID]
	if !ok {
		x.dirty = true
		return
	}
	if k := x.key[i]; k >= 0 {
		x.buckets[k].clear(i)
	}
	x.place(i, n)
}

// bitset is a set of node ordinals.
type bitset []uint64

func (b bitset) set(i int)   { b[i>>6] |= 1 << uint(i&63) }
func (b bitset) clear(i int) { b[i>>6] &^= 1 << uint(i&63) }

// next returns the first member ≥ from, or -1.
func (b bitset) next(from int) int {
	w := from >> 6
	if w >= len(b) {
		return -1
	}
	if m := b[w] >> uint(from&63); m != 0 {
		return from + bits.TrailingZeros64(m)
	}
	for w++; w < len(b); w++ {
		if b[w] != 0 {
			return w<<6 + bits.TrailingZeros64(b[w])
		}
	}
	return -1
}

// each calls fn for every member starting at start and wrapping around,
// until fn returns false.
func (b bitset) each(start int, fn func(i int) bool) {
	for i := b.next(start); i >= 0; i = b.next(i + 1) {
		if !fn(i) {
			return
		}
	}
	end := start
	for i := b.next(0); i >= 0 && i < end; i = b.next(i + 1) {
		if !fn(i) {
			return
		}
	}
}
