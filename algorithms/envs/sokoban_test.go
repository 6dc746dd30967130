package envs

import (
	"testing"
)

// sokobanFromLayout builds an episode from full room rows ('#', '.', 'A'
// player, 'B' box, 'G' goal).
func sokobanFromLayout(t *testing.T, rows []string) *sokoban {
	t.Helper()
	h, w := len(rows), len(rows[0])
	s := &sokoban{turnState: turnState{roles: sokobanRoles, budget: 20}, w: w, h: h, moves: 1,
		wall: make([]bool, w*h), propText: "-", checkText: "-"}
	for r, row := range rows {
		for c := 0; c < w; c++ {
			i := r*w + c
			switch row[c] {
			case '#':
				s.wall[i] = true
			case 'A':
				s.player = i
			case 'B':
				s.box = i
			case 'G':
				s.goal = i
			}
		}
	}
	s.dist = s.buildDist()
	return s
}

// naiveSolve is an independent BFS over (player, box) states returning the
// optimal move count (-1 if none).
func naiveSolve(s *sokoban, player, box int) int {
	type st struct{ p, b int }
	dist := map[st]int{{player, box}: 0}
	queue := []st{{player, box}}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur.b == s.goal {
			return dist[cur]
		}
		for d := 0; d < 4; d++ {
			r, c := cur.p/s.w+dirDR[d], cur.p%s.w+dirDC[d]
			to := r*s.w + c
			if s.wall[to] {
				continue
			}
			nb := cur.b
			if to == cur.b {
				nb = (r+dirDR[d])*s.w + c + dirDC[d]
				if s.wall[nb] {
					continue
				}
			}
			n := st{to, nb}
			if _, ok := dist[n]; !ok {
				dist[n] = dist[cur] + 1
				queue = append(queue, n)
			}
		}
	}
	return -1
}

var testRoom = []string{
	"######",
	"#A...#",
	"#.B..#",
	"#....#",
	"#..G.#",
	"######",
}

func TestSokobanRewardTable(t *testing.T) {
	const w = 6
	at := func(r, c int) int { return r*w + c }
	cases := []struct {
		name          string
		player, box   int
		action        string
		team          float64
		valid, done   bool
		success       bool
		wantP, wantB  int
		wantLocalSign int // -1 bad, 0 legal, 1 optimal, 2 don't check
	}{
		{"walk", at(1, 1), at(2, 2), "R", -0.01, true, false, false, at(1, 2), at(2, 2), 2},
		{"push toward goal", at(1, 2), at(2, 2), "D", -0.01 + 0.1, true, false, false, at(2, 2), at(3, 2), 1},
		{"walk into wall", at(1, 1), at(2, 2), "U", -0.1, false, false, false, at(1, 1), at(2, 2), -1},
		{"push box into wall", at(3, 2), at(4, 2), "D", -0.1, false, false, false, at(3, 2), at(4, 2), -1},
		{"garbage", at(1, 1), at(2, 2), "up", -0.1, false, false, false, at(1, 1), at(2, 2), -1},
		{"solve", at(4, 1), at(4, 2), "R", -0.01 + 0.1 + 1, true, true, true, at(4, 2), at(4, 3), 1},
		{"push into dead corner side", at(2, 3), at(2, 2), "L", -0.01 - 0.1, true, true, false, at(2, 2), at(2, 1), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := sokobanFromLayout(t, testRoom)
			s.player, s.box = c.player, c.box
			s.Step("planner", "U")
			st := s.Step("checker", c.action)
			if !near(st.Team, c.team) || st.Valid != c.valid || st.Done != c.done || s.Success() != c.success ||
				s.player != c.wantP || s.box != c.wantB {
				t.Fatalf("got %+v success %v player %d box %d", st, s.Success(), s.player, s.box)
			}
			want := map[int]float64{-1: LocalBad, 0: 0, 1: PathLocalGood}
			if l, ok := want[c.wantLocalSign]; ok && !near(st.Local, l) {
				t.Fatalf("local %.2f, want %.2f", st.Local, l)
			}
		})
	}
}

func TestSokobanCheckerOkExecutesProposal(t *testing.T) {
	s := sokobanFromLayout(t, testRoom)
	s.Step("planner", "r")
	if got, want := s.Observe("checker"), "c a00 b11 g32 p:R A.../.B../..../..G."; got != want {
		t.Fatalf("checker obs %q, want %q", got, want)
	}
	st := s.Step("checker", "ok")
	if !st.Valid || s.player != 8 || !near(st.Team, -0.01) {
		t.Fatalf("ok did not execute the proposal: %+v player %d", st, s.player)
	}
	if got, want := s.Observe("planner"), "p a01 b11 g32 c:ok .A../.B../..../..G."; got != want {
		t.Fatalf("planner obs %q, want %q", got, want)
	}
	s.Step("planner", "??")
	st = s.Step("checker", "ok")
	if st.Valid || !near(st.Team, InvalidPenalty) || !near(st.Local, LocalBad) {
		t.Fatalf("ok on a garbage proposal: %+v", st)
	}
	// A correction overrides the proposal.
	s.Step("planner", "L")
	st = s.Step("checker", "D")
	if !st.Valid || s.box != 20 || !near(st.Team, 0.09) {
		t.Fatalf("correction: %+v box %d", st, s.box)
	}
}

func TestSokobanSolvableAndSolverAgrees(t *testing.T) {
	for seed := int64(0); seed < 200; seed++ {
		e, err := New("sokoban", Config{}, seed)
		if err != nil {
			t.Fatal(err)
		}
		s := e.(*sokoban)
		opt := naiveSolve(s, s.player, s.box)
		if opt < 2 || opt != s.OptimalMoves() {
			t.Fatalf("seed %d: naive optimum %d, solver %d", seed, opt, s.OptimalMoves())
		}
		if s.budget < opt {
			t.Fatalf("seed %d: budget %d below the optimum %d", seed, s.budget, opt)
		}
		// The optimal first moves are exactly those whose successor is one
		// move closer.
		_, first := s.solve(s.player, s.box)
		for d := 0; d < 4; d++ {
			p2, b2, ok := s.move(s.player, s.box, d)
			want := ok && naiveSolve(s, p2, b2) == opt-1
			if first[d] != want {
				t.Fatalf("seed %d dir %c: solver says optimal=%v, naive %v", seed, dirLetters[d], first[d], want)
			}
		}
		// The expert solves in exactly the optimal number of rounds.
		n := 0
		for !s.Done() {
			for _, r := range s.Roles() {
				s.Step(r, s.ExpertAction(r))
			}
			n++
		}
		if !s.Success() || n != opt {
			t.Fatalf("seed %d: expert success %v in %d rounds, optimum %d", seed, s.Success(), n, opt)
		}
	}
}

// TestSokobanDistTableMatchesNaive compares the backward distance table with
// an independent forward BFS from every state of a few rooms.
func TestSokobanDistTableMatchesNaive(t *testing.T) {
	for _, seed := range []int64{3, 11} {
		e, _ := New("sokoban", Config{}, seed)
		s := e.(*sokoban)
		n := s.w * s.h
		for p := 0; p < n; p++ {
			for b := 0; b < n; b++ {
				if s.wall[p] || s.wall[b] || p == b {
					continue
				}
				if got, want := int(s.dist[p*n+b]), naiveSolve(s, p, b); got != want {
					t.Fatalf("seed %d player %d box %d: table %d, naive %d", seed, p, b, got, want)
				}
			}
		}
	}
}
