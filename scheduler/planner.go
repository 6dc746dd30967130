package scheduler

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strings"
)

// Planner decides placements on the raft leader. Its decisions are a pure
// function of the state, the request and Seed; they are carried inside
// the commands the leader proposes, so followers never re-decide.
type Planner struct {
	// Seed rotates where the search starts among equally good nodes
	// (0: start at the first node in ID order).
	Seed uint64
}

// view is the state plus scratch copies of the nodes a multi-step decision
// (a placement group's bundles) has already used.
type view struct {
	s  *State
	ov map[NodeID]*Node
}

func (v *view) node(n *Node) *Node {
	if c := v.ov[n.ID]; c != nil {
		return c
	}
	return n
}

// reserve books res on the scratch copy of n.
func (v *view) reserve(n *Node, res Resources, gpus []GPUAlloc) error {
	c := v.ov[n.ID]
	if c == nil {
		if v.ov == nil {
			v.ov = map[NodeID]*Node{}
		}
		c = n.clone()
		v.ov[n.ID] = c
	}
	return nodeReserve(c, res, gpus)
}

// searchOpts narrows a node search.
type searchOpts struct {
	exclude map[NodeID]bool   // nodes not to use
	prefer  []NodeID          // nodes to try first, in order
	anchors map[NodeID]uint64 // GPU slots the same group holds per node
}

func (p Planner) start(n int) int {
	if p.Seed == 0 || n == 0 {
		return 0
	}
	x := p.Seed + 0x9e3779b97f4a7c15 // splitmix64
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(n))
}

// fitNode returns the GPUs n would give req now, or false.
func fitNode(n *Node, req Request, anchor uint64) ([]GPUAlloc, bool) {
	g, _, ok := fitNodeScore(n, req, anchor)
	return g, ok
}

// fitNodeScore is fitNode that also returns the GPU set's link score.
func fitNodeScore(n *Node, req Request, anchor uint64) ([]GPUAlloc, int, bool) {
	if !n.schedulable() || !labelsMatch(n, req.Labels) {
		return nil, 0, false
	}
	r := req.Resources
	if r.MilliCPU > n.Free.MilliCPU || r.MemoryBytes > n.Free.MemoryBytes {
		return nil, 0, false
	}
	for k, v := range r.Custom {
		if v > 0 && v > n.Free.Custom[k]+1e-9 {
			return nil, 0, false
		}
	}
	return pickGPUsScore(n, r, req.MinLinkScore, n.wholeFreeMask(), anchor)
}

// pickGPUs chooses the devices for r among the whole-free slots in mask (or
// by best fit for a fraction).
func pickGPUs(n *Node, r Resources, minScore int, mask uint64, anchor uint64) ([]GPUAlloc, bool) {
	g, _, ok := pickGPUsScore(n, r, minScore, mask, anchor)
	return g, ok
}

// pickGPUsScore is pickGPUs that also returns the set's link score.
func pickGPUsScore(n *Node, r Resources, minScore int, mask uint64, anchor uint64) ([]GPUAlloc, int, bool) {
	switch {
	case r.GPUs == 0:
		return nil, 0, true
	case r.fractionalGPU():
		sl, ok := pickFraction(n, q(r.GPUs))
		if !ok {
			return nil, 0, false
		}
		return []GPUAlloc{{Index: n.GPUs[sl].Index, Fraction: q(r.GPUs)}}, 0, true
	}
	k := r.wholeGPUs()
	if bits.OnesCount64(mask) < k {
		return nil, 0, false
	}
	set, score, ok := bestGPUSet(n, mask, k, minScore, anchor)
	if !ok {
		return nil, 0, false
	}
	out := make([]GPUAlloc, len(set))
	for i, sl := range set {
		out[i] = GPUAlloc{Index: n.GPUs[sl].Index, Fraction: 1}
	}
	return out, score, true
}

// packCandidates is how many nodes with equally many whole free GPUs a
// decision compares: a multi-GPU request to find the best-connected free
// GPUs, a PACK request to find the least waste. Bounding it keeps a
// decision independent of the cluster's size.
const packCandidates = 8

// waste is what PACK minimizes among nodes that keep equally many whole
// GPUs free: the share of the node's CPU and of its memory left free after
// placing r (0 to 2; a dimension the node does not have counts 0). Filling
// the fullest node first keeps whole nodes free for large requests.
func waste(n *Node, r Resources) float64 {
	w := 0.0
	if t := n.Total.MilliCPU; t > 0 {
		w += float64(n.Free.MilliCPU-r.MilliCPU) / float64(t)
	}
	if t := n.Total.MemoryBytes; t > 0 {
		w += float64(n.Free.MemoryBytes-r.MemoryBytes) / float64(t)
	}
	return w
}

// findNode searches the index for a node that takes req now.
func (p Planner) findNode(v *view, req Request, o searchOpts) (Placement, bool) {
	s := v.s
	x := &s.idx
	var score int
	sharedOnly := false // when set, a fraction must land on an already shared GPU
	try := func(n *Node) (Placement, bool) {
		if o.exclude[n.ID] {
			return Placement{}, false
		}
		n = v.node(n)
		gpus, sc, ok := fitNodeScore(n, req, o.anchors[n.ID])
		if !ok {
			return Placement{}, false
		}
		if sharedOnly && len(gpus) == 1 && n.GPUs[n.slot(gpus[0].Index)].Free >= 1 {
			return Placement{}, false
		}
		score = sc
		return Placement{Node: n.ID, GPUs: gpus, Bundle: AnyBundle}, true
	}
	for _, id := range o.prefer {
		if n := s.d.Nodes[id]; n != nil {
			if pl, ok := try(n); ok {
				return pl, true
			}
		}
	}
	var found Placement
	ok := false
	multi := req.Resources.wholeGPUs() >= 2
	pack := req.Strategy == Pack
	// scan compares up to packCandidates nodes of a bucket (equally good by
	// whole free GPUs): a multi-GPU request keeps the best-connected GPU
	// set first; under PACK, ties go to the node left with the least CPU
	// and memory waste. A node that cannot beat the best so far (which has
	// the ideal topology, and this node no less waste) is not tried. It
	// stops early at a node that cannot be beaten (ideal topology and, for
	// PACK, no waste); SPREAD takes the first fitting node of a single-GPU
	// search.
	scan := func(b bitset) bool {
		considered, bestScore, bestWaste, bestIdeal := 0, -1, 0.0, false
		b.each(p.start(len(x.order)), func(i int) bool {
			w := 0.0
			if pack {
				w = waste(v.node(x.order[i]), req.Resources)
				if ok && bestIdeal && w >= bestWaste {
					considered++
					return considered < packCandidates
				}
			}
			pl, fits := try(x.order[i])
			if !fits {
				return true
			}
			considered++
			ideal := !multi || score >= x.topo[i].ideal[req.Resources.wholeGPUs()]
			if score > bestScore || (score == bestScore && w < bestWaste) {
				found, bestScore, bestWaste, bestIdeal, ok = pl, score, w, ideal, true
			}
			return considered < packCandidates && !(ideal && (!pack || w == 0)) && (pack || multi)
		})
		return ok
	}
	r := req.Resources
	k := r.wholeGPUs()
	if r.fractionalGPU() {
		k = 1
	}
	if r.GPUs == 0 && req.Strategy == Spread {
		return p.spreadCPU(v, req, o, try)
	}
	if req.Strategy == Spread {
		for b := x.maxGPUs; b >= k; b-- {
			if scan(x.buckets[b]) {
				return found, true
			}
		}
		if r.fractionalGPU() && scan(x.partial) {
			return found, true
		}
		return Placement{}, false
	}
	// Pack: fractions first go where a GPU is already shared, then every
	// request goes to the node left with the fewest whole free GPUs.
	if r.fractionalGPU() {
		sharedOnly = true
		if scan(x.partial) {
			return found, true
		}
		sharedOnly = false
	}
	for b := k; b <= x.maxGPUs; b++ {
		if scan(x.buckets[b]) {
			return found, true
		}
	}
	return Placement{}, false
}

// spreadCPU places a CPU-only Spread request on the schedulable node with
// the largest free CPU share.
func (p Planner) spreadCPU(v *view, req Request, o searchOpts, try func(*Node) (Placement, bool)) (Placement, bool) {
	x := &v.s.idx
	var best Placement
	bestShare, found := -1.0, false
	nn := len(x.order)
	st := p.start(nn)
	for j := 0; j < nn; j++ {
		n := v.node(x.order[(st+j)%nn])
		if !n.schedulable() || n.Total.MilliCPU == 0 && req.Resources.MilliCPU > 0 {
			continue
		}
		share := 1.0
		if n.Total.MilliCPU > 0 {
			share = float64(n.Free.MilliCPU) / float64(n.Total.MilliCPU)
		}
		if share <= bestShare {
			continue
		}
		if pl, ok := try(x.order[(st+j)%nn]); ok {
			best, bestShare, found = pl, share, true
		}
	}
	return best, found
}

// Place decides where one actor goes. It returns ErrInvalid for a
// malformed request, ErrInfeasible (wrapped with detail) when no node can
// ever hold it, and ErrPending (wrapped with the closest node and what it
// lacks) when it must wait for resources.
func (p Planner) Place(s *State, req Request) (Placement, error) {
	if err := req.Validate(); err != nil {
		return Placement{}, err
	}
	s.idx.ensure(s)
	v := &view{s: s}
	return p.place(v, req, searchOpts{})
}

func (p Planner) place(v *view, req Request, o searchOpts) (Placement, error) {
	s := v.s
	if req.Group != "" {
		return p.placeInGroup(s, req)
	}
	if af := req.Affinity; af != nil {
		n := s.d.Nodes[af.Node]
		if !af.Soft {
			if n == nil {
				return Placement{}, infeasible("hard affinity to node %s, which is not in the cluster", af.Node)
			}
			if n.State == NodeDead {
				return Placement{}, infeasible("hard affinity to node %s, which is dead", af.Node)
			}
			if miss := totalShortfall(n, req); len(miss) > 0 {
				return Placement{}, infeasible("hard affinity to node %s, which can never hold %s: short of %s", af.Node, req.Resources, strings.Join(miss, ", "))
			}
			if o.exclude[n.ID] {
				return Placement{}, fmt.Errorf("%w: hard affinity to node %s, already used by this group", ErrPending, af.Node)
			}
			n = v.node(n)
			if !n.schedulable() {
				return Placement{}, fmt.Errorf("%w: hard affinity to node %s, which is %v", ErrPending, af.Node, n.State)
			}
			if gpus, ok := fitNode(n, req, o.anchors[n.ID]); ok {
				return Placement{Node: n.ID, GPUs: gpus, Bundle: AnyBundle}, nil
			}
			return Placement{}, fmt.Errorf("%w: hard affinity to node %s, which lacks %s now", ErrPending, af.Node, strings.Join(freeShortfall(n, req), ", "))
		}
		if n != nil && !o.exclude[n.ID] {
			if gpus, ok := fitNode(v.node(n), req, o.anchors[n.ID]); ok {
				return Placement{Node: n.ID, GPUs: gpus, Bundle: AnyBundle}, nil
			}
		}
	}
	if pl, ok := p.findNode(v, req, o); ok {
		return pl, nil
	}
	return Placement{}, p.diagnose(v, req, o)
}

// gpuPhrase describes k GPUs with the link constraint, for messages.
func gpuPhrase(k int, frac float64, minScore int) string {
	var s string
	switch {
	case frac > 0 && frac < 1:
		s = fmt.Sprintf("a GPU with %g free", frac)
	case k == 1:
		s = "1 free GPU"
	default:
		s = fmt.Sprintf("%d free GPUs", k)
	}
	return s + linkPhrase(k, minScore)
}

// totalGPUPhrase is gpuPhrase for a node's totals: "8 GPUs on one NVLink
// island".
func totalGPUPhrase(k, minScore int) string {
	s := fmt.Sprintf("%d GPUs", k)
	if k == 1 {
		s = "1 GPU"
	}
	return s + linkPhrase(k, minScore)
}

func linkPhrase(k, minScore int) string {
	s := ""
	switch {
	case k > 1 && minScore >= ScoreNVLink:
		s += " on one NVLink island"
	case k > 1 && minScore > 0:
		s += fmt.Sprintf(" linked pairwise with score ≥ %d", minScore)
	}
	return s
}

// gpuCapacity returns how many GPUs of the request n could give from mask
// (the largest clique under the link constraint); for a fraction, the
// largest free share in hundredths.
func gpuCapacity(n *Node, req Request, mask uint64) int {
	if req.Resources.fractionalGPU() {
		best := 0.0
		for i := range n.GPUs {
			if mask&(1<<uint(i)) != 0 && n.GPUs[i].Free > best {
				best = n.GPUs[i].Free
			}
		}
		return int(best * quantum)
	}
	return maxClique(n, mask, req.MinLinkScore)
}

// countShort counts the non-GPU dimensions of r that avail lacks.
func countShort(avail, r Resources) int {
	c := 0
	if r.MilliCPU > avail.MilliCPU {
		c++
	}
	if r.MemoryBytes > avail.MemoryBytes {
		c++
	}
	for k, v := range r.Custom {
		if v > 0 && v > avail.Custom[k]+1e-9 {
			c++
		}
	}
	return c
}

// totalMissCount counts what of req n could never give (0: it could).
// ti, when not nil, is n's precomputed topology information.
func totalMissCount(n *Node, ti *topoInfo, req Request) int {
	c := countShort(n.Total, req.Resources)
	if !labelsMatch(n, req.Labels) {
		c++
	}
	r := req.Resources
	switch k := r.wholeGPUs(); {
	case r.fractionalGPU() && len(n.GPUs) == 0:
		c++
	case k > len(n.GPUs):
		c++
	case k > 1 && req.MinLinkScore > 0:
		size := 0
		if ti != nil {
			size = ti.maxCliqueAll(len(n.GPUs), req.MinLinkScore)
		} else {
			size = maxClique(n, allGPUs(n), req.MinLinkScore)
		}
		if size < k {
			c++
		}
	}
	return c
}

// totalGap measures how far n's totals fall short of req: the sum, over
// the resources it lacks, of the share missing (0 when it has enough, 1
// when it has none). It orders nodes short of equally many kinds.
func totalGap(n *Node, req Request) float64 {
	gap := func(need, have float64) float64 {
		if need <= 0 || need <= have {
			return 0
		}
		return (need - max(have, 0)) / need
	}
	r := req.Resources
	g := gap(float64(r.MilliCPU), float64(n.Total.MilliCPU)) + gap(float64(r.MemoryBytes), float64(n.Total.MemoryBytes))
	keys := make([]string, 0, len(r.Custom))
	for k := range r.Custom {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a fixed order: the sum is the same on every run
	for _, k := range keys {
		g += gap(r.Custom[k], n.Total.Custom[k])
	}
	switch k := r.wholeGPUs(); {
	case k > 0:
		g += gap(float64(k), float64(len(n.GPUs)))
	case r.fractionalGPU() && len(n.GPUs) == 0:
		g++
	}
	return g
}

// freeMissCount counts what of req n lacks now, and returns its GPU
// capacity for the request (see gpuCapacity).
func freeMissCount(n *Node, req Request) (int, int) {
	c := countShort(n.Free, req.Resources)
	if !labelsMatch(n, req.Labels) {
		c++
	}
	r := req.Resources
	capacity := 0
	switch {
	case r.fractionalGPU():
		capacity = gpuCapacity(n, req, ^uint64(0))
		if float64(capacity) < r.GPUs*quantum-1e-6 {
			c++
		}
	case r.wholeGPUs() > 0:
		capacity = gpuCapacity(n, req, n.wholeFreeMask())
		if capacity < r.wholeGPUs() {
			c++
		}
	}
	return c, capacity
}

// totalShortfall says what of req n could never give, even entirely free.
func totalShortfall(n *Node, req Request) []string {
	var miss []string
	if !labelsMatch(n, req.Labels) {
		miss = append(miss, "matching labels")
	}
	miss = append(miss, n.Total.shortfall(withoutGPUs(req.Resources))...)
	r := req.Resources
	all := uint64(1)<<uint(len(n.GPUs)) - 1
	if len(n.GPUs) == 64 {
		all = ^uint64(0)
	}
	switch {
	case r.fractionalGPU() && len(n.GPUs) == 0:
		miss = append(miss, "GPUs (needs a fraction of one, has none)")
	case r.wholeGPUs() > 0:
		if c := maxClique(n, all, req.MinLinkScore); c < r.wholeGPUs() {
			miss = append(miss, fmt.Sprintf("GPUs (needs %s, has %d)", totalGPUPhrase(r.wholeGPUs(), req.MinLinkScore), c))
		}
	}
	return miss
}

// freeShortfall says what of req n lacks right now.
func freeShortfall(n *Node, req Request) []string {
	var miss []string
	if !labelsMatch(n, req.Labels) {
		miss = append(miss, "matching labels")
	}
	miss = append(miss, n.Free.shortfall(withoutGPUs(req.Resources))...)
	r := req.Resources
	if r.GPUs > 0 {
		if _, ok := pickGPUs(n, r, req.MinLinkScore, n.wholeFreeMask(), 0); !ok {
			if r.fractionalGPU() {
				miss = append(miss, fmt.Sprintf("GPUs (needs %s, largest free share %g)", gpuPhrase(0, r.GPUs, 0), float64(gpuCapacity(n, req, ^uint64(0)))/quantum))
			} else {
				miss = append(miss, fmt.Sprintf("GPUs (needs %s, has %d)", gpuPhrase(r.wholeGPUs(), 0, req.MinLinkScore), gpuCapacity(n, req, n.wholeFreeMask())))
			}
		}
	}
	return miss
}

// diagnose explains why req cannot be placed: ErrInfeasible when no
// non-dead node could ever hold it, else ErrPending naming the closest node.
func (p Planner) diagnose(v *view, req Request, o searchOpts) error {
	s := v.s
	// Compare nodes by counts first and format text only for the two nodes
	// named in the message: this path scans every node.
	var best, closest *Node
	bestMiss, bestCap, closestMiss, closestGap := 0, -1, 0, 0.0
	feasible := false
	for i, n0 := range s.idx.order {
		if n0.State == NodeDead {
			continue
		}
		if tm := totalMissCount(n0, s.idx.topo[i], req); tm > 0 {
			// The closest node lacks the fewest kinds of resource, and of
			// those the least of them (8 GPUs of 1000 beat none).
			if closest == nil || tm < closestMiss || (tm == closestMiss && totalGap(n0, req) < closestGap) {
				closest, closestMiss, closestGap = n0, tm, totalGap(n0, req)
			}
			continue
		}
		feasible = true
		if o.exclude[n0.ID] || !n0.schedulable() {
			continue
		}
		n := v.node(n0)
		miss, c := freeMissCount(n, req)
		if best == nil || miss < bestMiss || (miss == bestMiss && c > bestCap) {
			best, bestMiss, bestCap = n, miss, c
		}
	}
	var bestID, closestTotal NodeID
	var bestMissText, closestTotalMiss []string
	if best != nil {
		bestID, bestMissText = best.ID, freeShortfall(best, req)
	}
	if closest != nil {
		closestTotal, closestTotalMiss = closest.ID, totalShortfall(closest, req)
	}
	bestMiss2 := bestMissText
	r := req.Resources
	if !feasible {
		if closestTotal == "" {
			return infeasible("%s: no live node in the cluster", r)
		}
		return infeasible("%s exceeds every node's total; closest: %s, short of %s", r, closestTotal, strings.Join(closestTotalMiss, ", "))
	}
	if bestID == "" {
		return fmt.Errorf("%w: %s: every node that could hold it is draining, suspect or already used", ErrPending, r)
	}
	if len(bestMiss2) == 1 && strings.HasPrefix(bestMiss2[0], "GPUs") && r.wholeGPUs() > 0 {
		return fmt.Errorf("%w: no node has %s; best: %s with %d", ErrPending, gpuPhrase(r.wholeGPUs(), 0, req.MinLinkScore), bestID, bestCap)
	}
	return fmt.Errorf("%w: no node has %s free now; best: %s, short of %s", ErrPending, r, bestID, strings.Join(bestMiss2, ", "))
}

// placeInGroup places an actor inside a bundle of its placement group.
func (p Planner) placeInGroup(s *State, req Request) (Placement, error) {
	g := s.d.Groups[req.Group]
	if g == nil {
		return Placement{}, infeasible("placement group %s does not exist", req.Group)
	}
	lo, hi := 0, len(g.Bundles)
	if req.Bundle != AnyBundle {
		if req.Bundle >= len(g.Bundles) {
			return Placement{}, infeasible("bundle %d of group %s with %d bundles", req.Bundle, req.Group, len(g.Bundles))
		}
		lo, hi = req.Bundle, req.Bundle+1
	}
	r := req.Resources
	everFits, waiting := false, false
	var lastMiss []string
	for i := lo; i < hi; i++ {
		b := &g.Bundles[i]
		if miss := b.Resources.shortfall(withoutGPUs(r)); len(miss) > 0 || !bundleGPUsFit(b, r, true) {
			continue
		}
		everFits = true
		if b.Node == "" {
			waiting = true
			continue
		}
		n := s.d.Nodes[b.Node]
		if n == nil || !n.schedulable() {
			waiting = true
			continue
		}
		if miss := b.Free.shortfall(withoutGPUs(r)); len(miss) > 0 {
			lastMiss = miss
			continue
		}
		if gpus, ok := bundleGPUs(n, b, req); ok {
			return Placement{Node: b.Node, GPUs: gpus, Bundle: i}, nil
		}
		lastMiss = []string{fmt.Sprintf("GPUs (needs %s)", gpuPhrase(r.wholeGPUs(), r.GPUs, req.MinLinkScore))}
	}
	which := "any bundle"
	if req.Bundle != AnyBundle {
		which = fmt.Sprintf("bundle %d", req.Bundle)
	}
	if !everFits {
		return Placement{}, infeasible("%s exceeds %s of placement group %s", r, which, req.Group)
	}
	if waiting && lastMiss == nil {
		return Placement{}, fmt.Errorf("%w: %s of placement group %s is waiting to be reserved", ErrPending, which, req.Group)
	}
	return Placement{}, fmt.Errorf("%w: %s of placement group %s lacks %s", ErrPending, which, req.Group, strings.Join(lastMiss, ", "))
}

// bundleGPUsFit reports whether the bundle's (total or free) GPU shares
// could give r's GPUs.
func bundleGPUsFit(b *Bundle, r Resources, total bool) bool {
	list := b.GPUFree
	if total {
		if b.Node == "" { // not reserved: judge by the requested shape
			if r.fractionalGPU() {
				return b.Resources.GPUs >= r.GPUs
			}
			return b.Resources.wholeGPUs() >= r.wholeGPUs()
		}
		list = b.GPUs
	}
	if r.fractionalGPU() {
		for _, g := range list {
			if g.Fraction+1e-9 >= r.GPUs {
				return true
			}
		}
		return false
	}
	whole := 0
	for _, g := range list {
		if g.Fraction >= 1 {
			whole++
		}
	}
	return whole >= r.wholeGPUs()
}

// bundleGPUs picks r's devices from the bundle's free shares, using the
// node's topology for multi-GPU actors.
func bundleGPUs(n *Node, b *Bundle, req Request) ([]GPUAlloc, bool) {
	r := req.Resources
	switch {
	case r.GPUs == 0:
		return nil, true
	case r.fractionalGPU():
		best, bestFree := -1, 2.0
		for _, g := range b.GPUFree {
			if g.Fraction+1e-9 >= r.GPUs && g.Fraction < bestFree {
				best, bestFree = g.Index, g.Fraction
			}
		}
		if best < 0 {
			return nil, false
		}
		return []GPUAlloc{{Index: best, Fraction: q(r.GPUs)}}, true
	}
	var mask uint64
	for _, g := range b.GPUFree {
		if g.Fraction >= 1 {
			if sl := n.slot(g.Index); sl >= 0 {
				mask |= 1 << uint(sl)
			}
		}
	}
	return pickGPUs(n, r, req.MinLinkScore, mask, 0)
}

// CreateActor decides the placement of a new actor and returns the command
// to commit. When the actor must wait, the command records it as pending
// (Placement nil, PendingReason set). It returns an error, and no command,
// for an invalid spec or an infeasible request (which fails at once).
func (p Planner) CreateActor(s *State, spec ActorSpec, at int64) (*CreateActor, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	pl, err := p.Place(s, spec.Request)
	switch {
	case err == nil:
		return &CreateActor{Spec: spec, Placement: &pl, At: at}, nil
	case errors.Is(err, ErrPending):
		return &CreateActor{Spec: spec, PendingReason: err.Error(), At: at}, nil
	}
	return nil, fmt.Errorf("create actor %s: %w", spec.ID, err)
}

// CreateGroup decides where every bundle of a new placement group goes and
// returns the command to commit; a group that must wait is recorded pending
// (Bundles empty, PendingReason set). Invalid or infeasible specs return an
// error and no command.
func (p Planner) CreateGroup(s *State, spec GroupSpec, at int64) (*CreatePlacementGroup, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	bps, err := p.PlaceGroup(s, spec)
	switch {
	case err == nil:
		return &CreatePlacementGroup{Spec: spec, Bundles: bps, At: at}, nil
	case errors.Is(err, ErrPending):
		return &CreatePlacementGroup{Spec: spec, PendingReason: err.Error(), At: at}, nil
	}
	return nil, fmt.Errorf("create placement group %s: %w", spec.ID, err)
}

// PlaceGroup decides where every bundle of a new group goes (all or
// nothing): bundle i of the result is bundle i of spec.
func (p Planner) PlaceGroup(s *State, spec GroupSpec) ([]BundlePlacement, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s.idx.ensure(s)
	todo := make([]int, len(spec.Bundles))
	for i := range todo {
		todo[i] = i
	}
	return p.planBundles(s, spec, todo, nil)
}

// planBundles places bundles todo of a group whose other bundles are
// already reserved as given by fixed (bundle index → its placement).
func (p Planner) planBundles(s *State, spec GroupSpec, todo []int, fixed map[int]BundlePlacement) ([]BundlePlacement, error) {
	live := 0
	for _, n := range s.idx.order {
		if n.State != NodeDead {
			live++
		}
	}
	if spec.Strategy == StrictSpread && len(spec.Bundles) > live {
		return nil, infeasible("STRICT_SPREAD of %d bundles over %d live nodes", len(spec.Bundles), live)
	}
	// Place big bundles first: they are the hardest to fit.
	order := append([]int(nil), todo...)
	sort.SliceStable(order, func(a, b int) bool {
		return spec.Bundles[order[a]].GPUs > spec.Bundles[order[b]].GPUs
	})
	switch spec.Strategy {
	case StrictPack:
		return p.packOnOneNode(s, spec, order, fixed)
	case Pack:
		if bps, err := p.packOnOneNode(s, spec, order, fixed); err == nil {
			return bps, nil
		}
	}
	v := &view{s: s}
	o := searchOpts{anchors: map[NodeID]uint64{}}
	used := map[NodeID]bool{}
	var usedOrder []NodeID
	note := func(bp BundlePlacement) {
		if !used[bp.Node] {
			used[bp.Node] = true
			usedOrder = append(usedOrder, bp.Node)
		}
		n := s.d.Nodes[bp.Node]
		for _, g := range bp.GPUs {
			if sl := n.slot(g.Index); sl >= 0 {
				o.anchors[bp.Node] |= 1 << uint(sl)
			}
		}
	}
	for _, i := range sortedKeys(fixed) {
		note(fixed[i])
	}
	out := make([]BundlePlacement, 0, len(todo))
	for _, i := range order {
		req := Request{Resources: spec.Bundles[i], MinLinkScore: spec.MinLinkScore}
		var pl Placement
		var err error
		switch spec.Strategy {
		case Pack:
			o.prefer, o.exclude = usedOrder, nil
			pl, err = p.place(v, req, o)
		case Spread:
			req.Strategy = Spread
			o.prefer, o.exclude = nil, used
			pl, err = p.place(v, req, o)
			if err != nil && !errors.Is(err, ErrInfeasible) {
				o.exclude = nil
				pl, err = p.place(v, req, o)
			}
		case StrictSpread:
			req.Strategy = Spread
			o.prefer, o.exclude = nil, used
			pl, err = p.place(v, req, o)
		}
		if err != nil {
			return nil, fmt.Errorf("%v group: bundle %d (%s): %w", spec.Strategy, i, spec.Bundles[i], err)
		}
		if err := v.reserve(s.d.Nodes[pl.Node], spec.Bundles[i], pl.GPUs); err != nil {
			return nil, fmt.Errorf("bundle %d: planner reserved what does not fit: %w", i, err) // a bug, not an input error
		}
		bp := BundlePlacement{Index: i, Node: pl.Node, GPUs: pl.GPUs}
		note(bp)
		out = append(out, bp)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out, nil
}

func sortedKeys(m map[int]BundlePlacement) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// packOnOneNode puts every bundle in order on a single node (the node of
// the fixed bundles when there are some). Whole-GPU bundles get their
// devices from the best-connected set of the combined size, split so each
// bundle's own devices are as close as possible.
func (p Planner) packOnOneNode(s *State, spec GroupSpec, order []int, fixed map[int]BundlePlacement) ([]BundlePlacement, error) {
	var sum Resources
	whole := 0
	for _, i := range order {
		sum = sum.Add(spec.Bundles[i])
		whole += spec.Bundles[i].wholeGPUs()
	}
	sumReq := Request{Resources: withoutGPUs(sum), MinLinkScore: spec.MinLinkScore}
	sumReq.Resources.GPUs = float64(whole)
	if whole == 0 && sum.GPUs > 0 {
		sumReq.Resources.GPUs = 1 // fractions only: needs some GPU
		if sum.GPUs < 1 {
			sumReq.Resources.GPUs = sum.GPUs
		}
	}
	try := func(n *Node) ([]BundlePlacement, bool) {
		if !n.schedulable() || n.Free.shortfall(withoutGPUs(sum)) != nil {
			return nil, false
		}
		return packBundles(n, spec, order, fixed)
	}
	var target NodeID
	for _, i := range sortedKeys(fixed) {
		target = fixed[i].Node
		break
	}
	if target != "" {
		n := s.d.Nodes[target]
		if n == nil {
			return nil, fmt.Errorf("%w: group's node %s is gone", ErrPending, target)
		}
		if bps, ok := try(n); ok {
			return bps, nil
		}
		return nil, fmt.Errorf("%w: %v group: node %s cannot take the remaining bundles (%s)", ErrPending, spec.Strategy, target, sum)
	}
	// Per bucket (nodes with equally many whole free GPUs, fewest first),
	// the nodes that have the CPU and memory are tried in order of least
	// waste, among the first packCandidates of them.
	x := &s.idx
	type cand struct {
		n *Node
		w float64
	}
	var cands []cand
	for b := whole; b <= x.maxGPUs; b++ {
		cands = cands[:0]
		x.buckets[b].each(p.start(len(x.order)), func(i int) bool {
			n := x.order[i]
			if n.schedulable() && n.Free.shortfall(withoutGPUs(sum)) == nil {
				cands = append(cands, cand{n, waste(n, sum)})
			}
			return len(cands) < packCandidates
		})
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].w < cands[j].w })
		for _, c := range cands {
			if bps, ok := try(c.n); ok {
				return bps, nil
			}
		}
	}
	err := p.diagnose(&view{s: s}, sumReq, searchOpts{})
	return nil, fmt.Errorf("%v group of %d bundles needs %s on one node: %w", spec.Strategy, len(order), sum, err)
}

// packBundles fits the bundles on a scratch copy of n.
func packBundles(n0 *Node, spec GroupSpec, order []int, fixed map[int]BundlePlacement) ([]BundlePlacement, bool) {
	n := n0.clone()
	var anchor uint64
	for _, bp := range fixed {
		for _, g := range bp.GPUs {
			if sl := n.slot(g.Index); sl >= 0 {
				anchor |= 1 << uint(sl)
			}
		}
	}
	whole := 0
	for _, i := range order {
		whole += spec.Bundles[i].wholeGPUs()
	}
	pool := n.wholeFreeMask()
	if whole > 0 {
		// The union goes where the node is best connected; each bundle then
		// takes its best subset of the union.
		set, _, ok := bestGPUSet(n, pool, whole, 0, anchor)
		if !ok {
			return nil, false
		}
		pool = 0
		for _, sl := range set {
			pool |= 1 << uint(sl)
		}
	}
	out := make([]BundlePlacement, 0, len(order))
	for _, i := range order {
		r := spec.Bundles[i]
		var gpus []GPUAlloc
		var ok bool
		if r.wholeGPUs() > 0 {
			gpus, ok = pickGPUs(n, r, spec.MinLinkScore, pool, anchor)
			if !ok && spec.MinLinkScore > 0 { // the union split badly: use any free GPUs
				gpus, ok = pickGPUs(n, r, spec.MinLinkScore, n.wholeFreeMask(), anchor)
			}
		} else {
			gpus, ok = pickGPUs(n, r, 0, n.wholeFreeMask(), anchor)
		}
		if !ok || nodeReserve(n, r, gpus) != nil {
			return nil, false
		}
		for _, g := range gpus {
			sl := n.slot(g.Index)
			pool &^= 1 << uint(sl)
			anchor |= 1 << uint(sl)
		}
		out = append(out, BundlePlacement{Index: i, Node: n.ID, GPUs: gpus})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Index < out[b].Index })
	return out, true
}
