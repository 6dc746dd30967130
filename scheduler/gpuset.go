package scheduler

import "math/bits"

// exactSearchLimit is the largest number of candidate sets searched
// exhaustively (C(8,4) = 70, C(12,6) = 924, C(16,4) = 1,820); beyond it
// (C(16,8) = 12,870) a greedy search with local improvement is used.
const exactSearchLimit = 5000

// binomial returns C(n, k), capped at limit+1 so it never overflows.
func binomial(n, k, limit int) int {
	if k < 0 || k > n {
		return 0
	}
	if k > n-k {
		k = n - k
	}
	c := 1
	for i := 1; i <= k; i++ {
		c = c * (n - k + i) / i
		if c > limit {
			return limit + 1
		}
	}
	return c
}

// setSearch finds the k GPUs of one node with the best total pairwise link
// score. The score of a set is the sum of scores over its pairs plus the
// scores from each member to the anchor GPUs (GPUs the same placement group
// already holds on the node, so a group's bundles stay close together).
// Ties go to the set least connected to the free GPUs left behind (so the
// remaining GPUs stay well connected for the next request), then to the
// lexicographically smallest set.
type setSearch struct {
	n        *Node
	cands    []int // candidate slots, ascending
	candMask uint64
	k        int
	minScore int
	adj      []uint64 // adj[slot]: slots whose link to it scores ≥ minScore
	anchorSc []int    // anchorSc[slot]: score from slot to the anchor set

	cur       []int
	best      []int
	bestScore int
	bestOut   int
	found     bool
}

// bestGPUSet chooses k slots among cand (a bitmask) on n. Every chosen pair
// must score at least minScore (0 means no constraint). It returns the slots
// in ascending order, the set's score, and false when no such set exists.
func bestGPUSet(n *Node, cand uint64, k int, minScore int, anchor uint64) ([]int, int, bool) {
	m := bits.OnesCount64(cand)
	if k <= 0 || k > m {
		return nil, 0, k == 0
	}
	s := &setSearch{n: n, candMask: cand, k: k, minScore: minScore}
	s.cands = make([]int, 0, m)
	for c := cand; c != 0; c &= c - 1 {
		s.cands = append(s.cands, bits.TrailingZeros64(c))
	}
	s.anchorSc = make([]int, len(n.GPUs))
	if anchor != 0 && n.Topology != nil {
		for _, c := range s.cands {
			for a := anchor; a != 0; a &= a - 1 {
				s.anchorSc[c] += n.Topology[c][bits.TrailingZeros64(a)]
			}
		}
	}
	if minScore > 0 {
		s.adj = adjacency(n, cand, minScore)
	}
	if binomial(m, k, exactSearchLimit) <= exactSearchLimit {
		s.cur = make([]int, 0, k)
		s.exact(0, cand, 0)
	} else {
		s.greedy()
	}
	if !s.found {
		return nil, 0, false
	}
	return s.best, s.bestScore, true
}

// adjacency returns, for each slot in cand, the mask of slots in cand whose
// link to it scores at least minScore.
func adjacency(n *Node, cand uint64, minScore int) []uint64 {
	adj := make([]uint64, len(n.GPUs))
	for a := cand; a != 0; a &= a - 1 {
		i := bits.TrailingZeros64(a)
		for b := cand; b != 0; b &= b - 1 {
			j := bits.TrailingZeros64(b)
			if i != j && n.score(i, j) >= minScore {
				adj[i] |= 1 << uint(j)
			}
		}
	}
	return adj
}

// outside returns the total score from set to the candidates not in it.
func (s *setSearch) outside(set []int) int {
	if s.n.Topology == nil {
		return 0
	}
	var in uint64
	for _, c := range set {
		in |= 1 << uint(c)
	}
	t := 0
	for _, c := range set {
		row := s.n.Topology[c]
		for r := s.candMask &^ in; r != 0; r &= r - 1 {
			t += row[bits.TrailingZeros64(r)]
		}
	}
	return t
}

// consider records set if it beats the best so far.
func (s *setSearch) consider(set []int, score int) {
	if s.found && score < s.bestScore {
		return
	}
	out := s.outside(set)
	if s.found && score == s.bestScore && out >= s.bestOut {
		return // equal or worse tie-break; enumeration order keeps the lexicographically smallest
	}
	s.found = true
	s.bestScore, s.bestOut = score, out
	s.best = append(s.best[:0], set...)
}

// exact enumerates every k-subset in lexicographic order. allowed is the mask
// of slots compatible (minScore) with everything chosen so far.
func (s *setSearch) exact(start int, allowed uint64, score int) {
	if len(s.cur) == s.k {
		s.consider(s.cur, score)
		return
	}
	need := s.k - len(s.cur)
	for i := start; i <= len(s.cands)-need; i++ {
		c := s.cands[i]
		if allowed&(1<<uint(c)) == 0 {
			continue
		}
		inc := s.anchorSc[c]
		for _, p := range s.cur {
			inc += s.n.score(c, p)
		}
		next := allowed
		if s.adj != nil {
			next &= s.adj[c]
		}
		s.cur = append(s.cur, c)
		s.exact(i+1, next, score+inc)
		s.cur = s.cur[:len(s.cur)-1]
	}
}

// greedy grows a set from every seed GPU by adding the GPU that adds the
// most score (ties to the GPU best connected to the candidates still
// unchosen, so a whole island is preferred to the rest of a broken one),
// then improves the best result by single swaps until none helps.
func (s *setSearch) greedy() {
	g := len(s.n.GPUs)
	pot := make([]int, g) // score from each candidate to all candidates
	for _, c := range s.cands {
		for _, r := range s.cands {
			pot[c] += s.pair(c, r)
		}
	}
	gain := make([]int, g) // anchor score + score to the set being grown
	set := make([]int, 0, s.k)
	var bestSet []int
	bestScore := -1
	for _, seed := range s.cands {
		copy(gain, s.anchorSc)
		set = set[:0]
		var in uint64
		score := 0
		add := func(c int) {
			score += gain[c]
			set = append(set, c)
			in |= 1 << uint(c)
			for _, r := range s.cands {
				gain[r] += s.pair(r, c)
			}
		}
		add(seed)
		for len(set) < s.k {
			bestC, bestInc, bestPot := -1, -1, -1
			for _, c := range s.cands {
				if in&(1<<uint(c)) != 0 || (s.adj != nil && s.adj[c]&in != in) {
					continue
				}
				inc := gain[c]
				p := pot[c] - (inc - s.anchorSc[c])
				if inc > bestInc || (inc == bestInc && p > bestPot) {
					bestC, bestInc, bestPot = c, inc, p
				}
			}
			if bestC < 0 {
				break
			}
			add(bestC)
		}
		if len(set) < s.k {
			continue
		}
		sorted := append([]int(nil), set...)
		sortInts(sorted)
		s.consider(sorted, score)
		if score > bestScore {
			bestScore, bestSet = score, sorted
		}
	}
	if bestSet != nil {
		improved, score := s.improve(bestSet, bestScore)
		sortInts(improved)
		s.consider(improved, score)
	}
}

// pair is the link score of two different slots (0 for i == j).
func (s *setSearch) pair(i, j int) int {
	if i == j {
		return 0
	}
	return s.n.score(i, j)
}

// improve applies the best single swap (member out, non-member in) while one
// raises the score, at most 4k rounds.
func (s *setSearch) improve(set []int, score int) ([]int, int) {
	set = append([]int(nil), set...)
	var in uint64
	gain := append([]int(nil), s.anchorSc...) // anchor + score to the whole set
	for _, p := range set {
		in |= 1 << uint(p)
		for _, r := range s.cands {
			gain[r] += s.pair(r, p)
		}
	}
	for round := 0; round < 4*s.k; round++ {
		bestGain, bi, bc := 0, -1, -1
		for i, out := range set {
			rest := in &^ (1 << uint(out))
			for _, c := range s.cands {
				if in&(1<<uint(c)) != 0 || (s.adj != nil && s.adj[c]&rest != rest) {
					continue
				}
				if d := (gain[c] - s.pair(c, out)) - gain[out]; d > bestGain {
					bestGain, bi, bc = d, i, c
				}
			}
		}
		if bi < 0 {
			break
		}
		out := set[bi]
		for _, r := range s.cands {
			gain[r] += s.pair(r, bc) - s.pair(r, out)
		}
		in = in&^(1<<uint(out)) | 1<<uint(bc)
		set[bi] = bc
		score += bestGain
	}
	return set, score
}

// maxClique returns the size of the largest subset of cand whose every pair
// scores at least minScore (Bron–Kerbosch with pivoting on bitmasks).
func maxClique(n *Node, cand uint64, minScore int) int {
	if minScore <= 0 || bits.OnesCount64(cand) <= 1 {
		return bits.OnesCount64(cand)
	}
	var c cliqueSearch
	for a := cand; a != 0; a &= a - 1 {
		i := bits.TrailingZeros64(a)
		for b := cand; b != 0; b &= b - 1 {
			j := bits.TrailingZeros64(b)
			if i != j && n.score(i, j) >= minScore {
				c.adj[i] |= 1 << uint(j)
			}
		}
	}
	c.bk(0, cand, 0)
	return c.best
}

// cliqueSearch holds the adjacency on the stack (no allocation per call).
type cliqueSearch struct {
	adj  [MaxGPUsPerNode]uint64
	best int
}

func (c *cliqueSearch) bk(r int, p, x uint64) {
	if p == 0 && x == 0 {
		if r > c.best {
			c.best = r
		}
		return
	}
	if r+bits.OnesCount64(p) <= c.best {
		return
	}
	piv := bits.TrailingZeros64(p | x)
	for m := p &^ c.adj[piv]; m != 0; m &= m - 1 {
		v := bits.TrailingZeros64(m)
		c.bk(r+1, p&c.adj[v], x&c.adj[v])
		p &^= 1 << uint(v)
		x |= 1 << uint(v)
	}
}

// pickFraction chooses the GPU slot for a fractional request of frac: the
// fitting GPU with the least free (best fit, so shared GPUs fill up before
// whole ones are broken); among entirely free GPUs, the one least connected
// to the others (keeping well-connected GPUs for multi-GPU requests).
func pickFraction(n *Node, frac float64) (int, bool) {
	best, bestFree := -1, 2.0
	for i := range n.GPUs {
		f := n.GPUs[i].Free
		if f+1e-9 >= frac && f < 1 && f < bestFree {
			best, bestFree = i, f
		}
	}
	if best >= 0 {
		return best, true
	}
	set, _, ok := bestGPUSet(n, n.wholeFreeMask(), 1, 0, 0)
	if !ok || len(set) == 0 {
		return -1, false
	}
	return set[0], true
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
