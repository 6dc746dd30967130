package scheduler

import (
	"math/rand"
	"reflect"
	"testing"
)

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestGreedyOnLargeNodes covers nodes too big for the exhaustive search
// (C(32,8) and C(64,16) sets): the greedy search must still find the
// structure (a whole NVLink island).
func TestGreedyOnLargeNodes(t *testing.T) {
	cases := []struct {
		name string
		topo [][]int
		used []int
		k    int
		want []int
	}{
		{"32gpu/8-one-island", IslandsTopology(4, 8, 2, ScoreCrossCPU), nil, 8, seq(0, 8)},
		{"32gpu/8-skips-broken-island", IslandsTopology(4, 8, 2, ScoreCrossCPU), []int{3}, 8, seq(8, 16)},
		{"32gpu/16-two-islands", IslandsTopology(4, 8, 2, ScoreCrossCPU), []int{3}, 16, seq(8, 24)},
		{"64gpu/16-one-island", IslandsTopology(4, 16, 1, ScoreSameCPU), []int{0, 17}, 16, seq(32, 48)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(SimNode("n", 1, 1, tc.topo), 0)
			if binomial(len(tc.topo)-len(tc.used), tc.k, exactSearchLimit) <= exactSearchLimit {
				t.Fatal("case does not exercise the greedy search")
			}
			mask := n.wholeFreeMask()
			for _, u := range tc.used {
				mask &^= 1 << uint(u)
			}
			set, _, ok := bestGPUSet(n, mask, tc.k, 0, 0)
			if !ok || !reflect.DeepEqual(set, tc.want) {
				t.Fatalf("set %v, want %v", set, tc.want)
			}
		})
	}
}

// TestExactSearchIsOptimal checks the exhaustive search against a brute
// force over bitmasks on random topologies, and that the greedy search
// never returns an invalid set or a better-than-optimal score.
func TestExactSearchIsOptimal(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	scores := []int{ScoreCrossCPU, ScoreSameCPU, ScorePCIeHostBridge, ScorePCIeMultiSwitch, ScorePCIeSingleSwitch, ScorePCIeSameBoard, ScoreNVLink, 2 * ScoreNVLink}
	for trial := 0; trial < 200; trial++ {
		g := 2 + rng.Intn(9)
		m := make([][]int, g)
		for i := range m {
			m[i] = make([]int, g)
		}
		for i := 0; i < g; i++ {
			for j := i + 1; j < g; j++ {
				v := scores[rng.Intn(len(scores))]
				m[i][j], m[j][i] = v, v
			}
		}
		n := newNode(SimNode("n", 1, 1, m), 0)
		cand := uint64(rng.Int63n(1<<uint(g)-1) + 1)
		k := 1 + rng.Intn(g)
		minScore := 0
		if rng.Intn(3) == 0 {
			minScore = ScorePCIeSingleSwitch
		}
		best, found := -1, false
		for sub := cand; sub != 0; sub = (sub - 1) & cand {
			if popcount(sub) != k {
				continue
			}
			sc, ok := 0, true
			for i := 0; i < g; i++ {
				for j := i + 1; j < g; j++ {
					if sub&(1<<uint(i)) != 0 && sub&(1<<uint(j)) != 0 {
						sc += m[i][j]
						ok = ok && m[i][j] >= minScore
					}
				}
			}
			if ok && sc > best {
				best, found = sc, true
			}
		}
		set, sc, ok := bestGPUSet(n, cand, k, minScore, 0)
		if ok != found || (ok && sc != best) {
			t.Fatalf("trial %d: exact search %v score %d ok %v; brute force %d ok %v", trial, set, sc, ok, best, found)
		}
		if found && k <= popcount(cand) {
			s := &setSearch{n: n, k: k, candMask: cand, minScore: minScore, anchorSc: make([]int, g)}
			for c := 0; c < g; c++ {
				if cand&(1<<uint(c)) != 0 {
					s.cands = append(s.cands, c)
				}
			}
			if minScore > 0 {
				s.adj = adjacency(n, cand, minScore)
			}
			s.greedy()
			if s.found && s.bestScore > best {
				t.Fatalf("trial %d: greedy score %d beats the optimum %d", trial, s.bestScore, best)
			}
		}
		ti := newTopoInfo(n)
		for _, ms := range []int{0, 1, ScoreSameCPU, ScorePCIeSingleSwitch, 55, ScoreNVLink, 150, 1000} {
			if got, want := ti.maxCliqueAll(g, ms), maxClique(n, allGPUs(n), ms); got != want {
				t.Fatalf("trial %d: table clique at %d = %d, search %d", trial, ms, got, want)
			}
		}
		if mc := maxClique(n, cand, minScore); found != (mc >= k) {
			t.Fatalf("trial %d: maxClique %d vs k %d found %v", trial, mc, k, found)
		}
	}
}

func popcount(x uint64) int {
	c := 0
	for ; x != 0; x &= x - 1 {
		c++
	}
	return c
}

func BenchmarkGPUSet(b *testing.B) {
	cases := []struct {
		name string
		topo [][]int
		k    int
	}{
		{"exact/4of8", IslandsTopology(2, 4, 2, ScoreCrossCPU), 4},
		{"exact/2of8", PCIeTopology(2, 2, 2), 2},
		{"exact/6of12", IslandsTopology(3, 4, 1, ScoreCrossCPU), 6},
		{"greedy/8of16", IslandsTopology(4, 4, 1, ScoreCrossCPU), 8},
		{"greedy/8of32", IslandsTopology(4, 8, 2, ScoreCrossCPU), 8},
		{"greedy/16of64", IslandsTopology(4, 16, 1, ScoreSameCPU), 16},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			n := newNode(SimNode("n", 1, 1, tc.topo), 0)
			mask := n.wholeFreeMask()
			for i := 0; i < b.N; i++ {
				if _, _, ok := bestGPUSet(n, mask, tc.k, 0, 0); !ok {
					b.Fatal("no set")
				}
			}
		})
	}
}
