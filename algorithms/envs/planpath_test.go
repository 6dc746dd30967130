package envs

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// planPathFromLayout builds an episode from rows of '.', '#', 'A', 'G'.
func planPathFromLayout(t *testing.T, rows []string, moves, budget int) *planPath {
	t.Helper()
	h, w := len(rows), len(rows[0])
	blocked := make([]bool, w*h)
	agent, goal := -1, -1
	for r, row := range rows {
		for c := 0; c < w; c++ {
			switch row[c] {
			case '#':
				blocked[r*w+c] = true
			case 'A':
				agent = r*w + c
			case 'G':
				goal = r*w + c
			}
		}
	}
	dist := bfsDist(w, h, blocked, goal)
	return &planPath{
		turnState: turnState{roles: planPathRoles, budget: budget},
		w:         w, h: h, moves: moves, blocked: blocked, dist: dist,
		agent: agent, goal: goal, shortest: dist[agent], toolSays: "-", planDid: "-",
	}
}

var testGrid = []string{
	"A.#..",
	"..#..",
	".....",
	".#...",
	"....G",
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPlanPathRewardTable(t *testing.T) {
	cases := []struct {
		name      string
		moves     int
		agent     int // -1: layout start (0,0)
		role      string
		action    string
		team      float64
		local     float64
		valid     bool
		wantAgent int
	}{
		{"step closer on a shortest path", 1, -1, "planner", "R", -0.01 + 0.1, PathLocalGood, true, 1},
		{"step closer, lowercase", 1, -1, "planner", " d\n", -0.01 + 0.1, PathLocalGood, true, 5},
		{"off the grid", 1, -1, "planner", "U", -0.1, LocalBad, false, 0},
		{"garbage", 1, -1, "planner", "go right", -0.1, LocalBad, false, 0},
		{"empty", 1, -1, "planner", "", -0.1, LocalBad, false, 0},
		{"too many moves", 1, -1, "planner", "RD", -0.1, LocalBad, false, 0},
		{"step away (legal, not shortest)", 1, 1, "planner", "L", -0.01 - 0.1, 0, true, 0},
		{"into a wall", 1, 1, "planner", "R", -0.1, LocalBad, false, 1},
		{"two moves, second blocked", 2, -1, "planner", "RR", -0.01 + 0.1 - 0.1, LocalBad, false, 1},
		{"two good moves", 2, -1, "planner", "DD", 2 * (-0.01 + 0.1), PathLocalGood, true, 10},
		// (3,3) -> (4,3) -> goal (4,4): two moves, not from the start, so
		// the path is not the shortest from the start: no bonus.
		{"reach goal off a shortest path", 2, 18, "planner", "DR", 2*(-0.01+0.1) + 1, PathLocalGood, true, 24},
		{"tool optimal suggestion", 1, -1, "tool", "D", 0, PathLocalGood, true, 0},
		{"tool legal detour", 1, 1, "tool", "L", 0, 0, true, 1},
		{"tool into wall", 1, 1, "tool", "R", 0, LocalBad, false, 1},
		{"tool garbage", 1, -1, "tool", "xyz", 0, LocalBad, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planPathFromLayout(t, testGrid, c.moves, 20)
			if c.agent >= 0 {
				p.agent = c.agent
			}
			if c.role == "planner" {
				p.Step("tool", "D")
			}
			st := p.Step(c.role, c.action)
			if !near(st.Team, c.team) || !near(st.Local, c.local) || st.Valid != c.valid || p.agent != c.wantAgent {
				t.Fatalf("got %+v agent %d, want team %.3f local %.3f valid %v agent %d", st, p.agent, c.team, c.local, c.valid, c.wantAgent)
			}
		})
	}
}

func TestPlanPathShortestBonus(t *testing.T) {
	// Shortest path: 8 moves. D D R R D ... : (0,0)->(1,0)->(2,0)->(2,1)->(2,2)->(2,3)->(3,3)->(4,3)->(4,4).
	p := planPathFromLayout(t, testGrid, 1, 20)
	if p.ShortestPath() != 8 {
		t.Fatalf("shortest path = %d, want 8", p.ShortestPath())
	}
	total := 0.0
	for _, m := range "DDRRRDDR" {
		p.Step("tool", "U")
		st := p.Step("planner", string(m))
		total += st.Team
	}
	// 8 moves closer: 8×0.09, +1 goal, +0.5 shortest.
	if !p.Success() || !p.Done() || !near(total, 8*0.09+1.5) || p.Turn() != 8 {
		t.Fatalf("success %v done %v total %.3f turn %d", p.Success(), p.Done(), total, p.Turn())
	}

	// A detour (one step away and back) reaches the goal without the bonus.
	p = planPathFromLayout(t, testGrid, 1, 20)
	total = 0
	for _, m := range "RLDDRRRDDR" {
		p.Step("tool", "U")
		total += p.Step("planner", string(m)).Team
	}
	// R: +0.09, L: -0.11, then 8 × 0.09 and +1 (no bonus).
	if !p.Success() || !near(total, 0.09-0.11+8*0.09+1) {
		t.Fatalf("detour: success %v total %.3f", p.Success(), total)
	}
	// The potential-based shaping telescopes: the sum of shaping terms is
	// ShapingScale × (initial distance) whatever the path.
}

func TestPlanPathObservation(t *testing.T) {
	p := planPathFromLayout(t, testGrid, 1, 20)
	if got, want := p.Observe("tool"), "t a00 g44 n:-D-R p:- A.#../..#../...../.#.../....G"; got != want {
		t.Fatalf("tool obs %q, want %q", got, want)
	}
	p.Step("tool", "D")
	if got, want := p.Observe("planner"), "p a00 g44 n:-D-R m:- t:D A.#../..#../...../.#.../....G"; got != want {
		t.Fatalf("planner obs %q, want %q", got, want)
	}
	p.Step("planner", "D")
	p.Step("tool", "#!")
	if got, want := p.Observe("planner"), "p a10 g44 n:UD-R m:- t:? ..#../A.#../...../.#.../....G"; got != want {
		t.Fatalf("planner obs %q, want %q", got, want)
	}
	if got, want := p.Observe("tool"), "t a10 g44 n:UD-R p:D ..#../A.#../...../.#.../....G"; got != want {
		t.Fatalf("tool obs %q, want %q", got, want)
	}
	// The planner's expert ignores a broken suggestion and plays BFS.
	if a := p.ExpertAction("planner"); a != "D" {
		t.Fatalf("planner expert after bad suggestion = %q, want D", a)
	}
	// A move into a wall is shown with '*' (the agent stayed), to both roles,
	// until the planner's next action.
	p.Step("planner", "L")
	if got, want := p.Observe("tool"), "t a10 g44 n:UD-R p:L* ..#../A.#../...../.#.../....G"; got != want {
		t.Fatalf("tool obs after a blocked move %q, want %q", got, want)
	}
	p.Step("tool", "R")
	if got, want := p.Observe("planner"), "p a10 g44 n:UD-R m:L* t:R ..#../A.#../...../.#.../....G"; got != want {
		t.Fatalf("planner obs after a blocked move %q, want %q", got, want)
	}
}

func TestPlanPathGenerationReachable(t *testing.T) {
	blockedCells, cells := 0, 0
	for w := 5; w <= 10; w++ {
		for seed := int64(0); seed < 60; seed++ {
			e, err := New("planpath", Config{Width: w, Height: 15 - w}, seed)
			if err != nil {
				t.Fatal(err)
			}
			p := e.(*planPath)
			if p.blocked[p.agent] || p.blocked[p.goal] || p.agent == p.goal {
				t.Fatalf("%dx%d seed %d: bad start/goal", w, 15-w, seed)
			}
			// Independent reachability check: flood fill from the start.
			seen := map[int]bool{p.agent: true}
			stack := []int{p.agent}
			for len(stack) > 0 {
				c := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				for d := 0; d < 4; d++ {
					n := neighbor(p.w, p.h, c, d)
					if n >= 0 && !p.blocked[n] && !seen[n] {
						seen[n] = true
						stack = append(stack, n)
					}
				}
			}
			if !seen[p.goal] || p.shortest < manhattan(p.w, p.agent, p.goal) {
				t.Fatalf("%dx%d seed %d: goal unreachable or BFS shorter than Manhattan", w, 15-w, seed)
			}
			if p.budget != max(p.w+p.h, 2*p.shortest) {
				t.Fatalf("default budget %d", p.budget)
			}
			for _, b := range p.blocked {
				cells++
				if b {
					blockedCells++
				}
			}
		}
	}
	// Resampling for reachability biases the rate down a little; it must
	// stay near 0.22.
	if rate := float64(blockedCells) / float64(cells); rate < 0.18 || rate > 0.25 {
		t.Fatalf("obstacle rate %.3f, want about 0.22", rate)
	}
	// No obstacles at all with a negative rate.
	e, _ := New("planpath", Config{ObstacleRate: -1}, 3)
	if strings.Contains(e.Observe("tool"), "#") {
		t.Fatalf("negative rate still has obstacles: %q", e.Observe("tool"))
	}
}

// With Config.ToolTeam the tool earns the team reward the planner earns
// when it then plays the tool's suggestion (goal, shortest bonus, walls,
// garbage included), and the suggestion moves nothing.
func TestPlanPathToolTeam(t *testing.T) {
	for _, c := range []struct {
		moves int
		path  string // the planner's moves, one action each
		tool  []string
	}{
		{1, "DDRRRDDR", nil}, // the shortest path: +1.5 at the goal
		{1, "RLDDRRRDDR", nil},
		{2, "DD", []string{"DD", "RR", "xyz", "UU", "RR"}},
		{1, "R", []string{"R", "R", "", "L"}},
	} {
		p := planPathFromLayout(t, testGrid, c.moves, 20)
		p.toolTeam = true
		for i, m := range c.path {
			action := string(m)
			if c.moves == 2 {
				action = c.path
			}
			// Off-path suggestions first, on a clone, then the one played.
			for _, s := range c.tool {
				q := p.Clone().(*planPath)
				agent := q.agent
				got := q.Step("tool", s).Team
				want := q.Clone().(*planPath).Step("planner", s).Team
				if !near(got, want) || q.agent != agent {
					t.Errorf("%q turn %d: tool %q team %.3f, the planner's move %.3f (agent %d -> %d)", c.path, i, s, got, want, agent, q.agent)
				}
			}
			q := p.Clone().(*planPath)
			q.Step("tool", action)
			want := q.Step("planner", action).Team
			if got := p.Step("tool", action).Team; !near(got, want) {
				t.Errorf("%q turn %d: tool %q team %.3f, planner %.3f", c.path, i, action, got, want)
			}
			p.Step("planner", action)
			if c.moves == 2 {
				break
			}
		}
	}
	// Off by default (and through envs.New): the tool earns no team reward.
	e, err := New("planpath", Config{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	a := e.(Expert).ExpertAction("tool")
	if st := e.Step("tool", a); st.Team != 0 {
		t.Fatalf("default tool team reward %v", st.Team)
	}
	e, _ = New("planpath", Config{ToolTeam: true}, 1)
	if st := e.Step("tool", a); st.Team <= 0 {
		t.Fatalf("ToolTeam: the expert's suggestion earns team %v, want > 0", st.Team)
	}
}

// The situation of an observation recurs across grids: the same local
// neighbourhood, goal direction and messages on two different grids give the
// same key, and a different neighbour gives another.
func TestPlanPathSituationRecursAcrossGrids(t *testing.T) {
	a := planPathFromLayout(t, testGrid, 1, 20)
	other := []string{
		"A.#..#",
		"..#...",
		"##....",
		"......",
		".....G",
		"......",
	}
	b := planPathFromLayout(t, other, 1, 20)
	for _, role := range []string{"tool", "planner"} {
		if role == "planner" {
			a.Step("tool", "D")
			b.Step("tool", "D")
		}
		sa, err := Situation("planpath", role, a.Observe(role))
		if err != nil {
			t.Fatal(err)
		}
		sb, err := PlanPathSituation(b.Observe(role))
		if err != nil {
			t.Fatal(err)
		}
		if a.Observe(role) == b.Observe(role) || sa != sb {
			t.Fatalf("%s: situations %q and %q of different grids with the same neighbourhood", role, sa, sb)
		}
		want := map[string]string{"tool": "t ---/-A./-.. d:DR p:-", "planner": "p ---/-A./-.. d:DR m:- t:D"}[role]
		if sa != want {
			t.Fatalf("%s: situation %q, want %q", role, sa, want)
		}
	}
	// The agent one step right on the first grid: another neighbourhood.
	c := planPathFromLayout(t, testGrid, 1, 20)
	c.agent = 1
	if s, _ := PlanPathSituation(c.Observe("tool")); s == "t ---/-A./-.. d:DR p:-" || s != "t ---/.A#/..# d:DR p:-" {
		t.Fatalf("moved agent: %q", s)
	}
	for _, bad := range []string{"", "p a00 g11", "x a99 g11 n:---- p:- A./..", "t a00 g11 n:---- p:- ../.A"} {
		if _, err := PlanPathSituation(bad); !errors.Is(err, ErrSituation) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := Situation("sokoban", "planner", "x"); !errors.Is(err, ErrSituation) || HasSituation("sokoban") || !HasSituation("planpath") {
		t.Fatalf("sokoban: %v", err)
	}
}

func FuzzPlanPathSituation(f *testing.F) {
	p, _ := New("planpath", Config{}, 3)
	f.Add(p.Observe("tool"))
	f.Add(p.Observe("planner"))
	f.Add("t a00 g11 n:---- p:- A./..")
	f.Add("p a9 g11 x y z")
	f.Fuzz(func(t *testing.T, obs string) {
		s, err := PlanPathSituation(obs)
		if err == nil && !strings.Contains(s, " d:") {
			t.Fatalf("%q: situation %q without a direction", obs, s)
		}
	})
}
