package envs

import (
	"fmt"
	"strings"
)

// Plan-Path (AT-GRPO's grid navigation task).
//
// A W×H grid has each cell blocked with probability ObstacleRate; start and
// goal are free, distinct and connected (checked by BFS; the seed's random
// stream is redrawn until they are). Two roles act each round, in order:
//
//   - "tool" plays the paper's tool agent (a BFS path checker): it sees the
//     grid and the planner's last executed move, and outputs a suggested
//     next move sequence (1..Moves letters of U/D/L/R). It changes nothing.
//   - "planner" sees the grid and the tool's suggestion and outputs the
//     move sequence that is executed (1..Moves letters).
//
// Team reward, per executed move (AT-GRPO shaping): StepCost (−0.01), plus
// ShapingScale × (φ(s')−φ(s)) with φ = −Manhattan(agent, goal) and γ = 1
// (so ±0.1 per step closer/farther), InvalidPenalty (−0.1) for a move into a
// wall or off the grid (the agent stays, the rest of the action is dropped)
// or an unparseable action, GoalReward (+1) on reaching the goal and
// ShortestBonus (+0.5) if the valid moves taken equal the BFS shortest path
// length. The tool's step earns no team reward (Config.ToolTeam: the team
// reward its suggestion would earn if the planner executed it).
//
// Local rewards judge each role's own output against BFS: PathLocalGood
// (+0.3) when every move is legal and brings the agent one step nearer the
// goal in BFS distance, 0 when legal but not shortest, LocalBad (−0.1) when
// any move is illegal or the action is unparseable. (+0.3 outweighs the
// Manhattan shaping, so a one-step reward team+local ranks a BFS-optimal
// detour around a wall above a greedy step into a dead end.)
//
// The episode ends on reaching the goal (success) or after TurnBudget
// rounds (default max(W+H, 2×shortest path)).
//
// Observations (6×6 example; '.' free, '#' blocked, 'A' agent, 'G' goal;
// a14 = agent at row 1 col 4, g52 = goal at row 5 col 2, 0-based):
//
//	tool:    "t a14 g52 n:UD-R p:L* ..#.../..#.A./....../#...#./..G.../......"
//	planner: "p a14 g52 n:UD-R m:L* t:D ..#.../..#.A./....../#...#./..G.../......"
//
// n: spells the agent's four neighbours in U, D, L, R order, the letter
// where the cell is free and '-' where it is blocked or off the grid: the
// same grid, read out around the agent (a tiny model finds the cells above
// and below hard to read from the flattened rows). p: shows the tool the
// planner's last action in canonical form, with '*' when it hit a wall (the
// agent stayed where the move was refused), "-" before its first action and
// "?" when it was unparseable. m: shows the planner its own last action only
// when it hit a wall ("L*"), otherwise "-": it sees what it tried and what
// happened, and a refused move changes the observation (a history of good
// moves would let imitation copy the previous move instead of reading the
// grid). t: shows the tool's last suggestion ("-" before it, "?" when
// unparseable).
//
// Single-agent baseline (Config.Single): the planner acts alone, with the
// same rewards; its t: slot always shows "-".

// planPathConfig validates cfg and fills planpath defaults.
func planPathConfig(cfg Config) (gridCfg, error) {
	return gridConfig("planpath", "obstacle", cfg, 0.22, 10)
}

type planPath struct {
	turnState
	w, h     int
	moves    int
	blocked  []bool // immutable after generation: shared by clones
	dist     []int  // BFS distance to goal; immutable, shared by clones
	agent    int
	goal     int
	shortest int    // BFS distance start→goal
	taken    int    // valid moves executed
	toolSays string // canonical tool suggestion, "-" or "?"
	planDid  string // canonical last planner action, "-" or "?"
	planHit  bool   // the last planner action hit a wall
	toolDirs []int  // parsed tool suggestion (nil when invalid); immutable
	toolTeam bool   // Config.ToolTeam
}

var (
	planPathRoles       = []string{"tool", "planner"}
	planPathSingleRoles = []string{"planner"}
)

func newPlanPath(cfg Config, seed int64) (Env, error) {
	c, err := planPathConfig(cfg)
	if err != nil {
		return nil, err
	}
	rng := newRand(seed, 1)
	n := c.w * c.h
	for attempt := 0; attempt < 1000; attempt++ {
		blocked := make([]bool, n)
		free := make([]int, 0, n)
		for i := range blocked {
			blocked[i] = rng.Float64() < c.rate
			if !blocked[i] {
				free = append(free, i)
			}
		}
		if len(free) < 2 {
			continue
		}
		si := rng.IntN(len(free))
		gi := rng.IntN(len(free) - 1)
		if gi >= si {
			gi++
		}
		start, goal := free[si], free[gi]
		dist := bfsDist(c.w, c.h, blocked, goal)
		if dist[start] < 1 {
			continue
		}
		budget := c.budget
		if budget == 0 {
			budget = max(c.w+c.h, 2*dist[start])
		}
		return &planPath{
			turnState: newTurnState(cfg, planPathRoles, planPathSingleRoles, budget),
			w:         c.w, h: c.h, moves: c.moves,
			blocked: blocked, dist: dist,
			agent: start, goal: goal, shortest: dist[start],
			toolSays: "-", planDid: "-", toolTeam: cfg.ToolTeam,
		}, nil
	}
	return nil, fmt.Errorf("%w: planpath %dx%d rate %.2f: start and goal never connected", ErrGenerate, c.w, c.h, c.rate)
}

func (p *planPath) Name() string    { return "planpath" }
func (p *planPath) Roles() []string { return p.roles }
func (p *planPath) Turn() int       { return p.rounds }
func (p *planPath) Done() bool      { return p.done }
func (p *planPath) Success() bool   { return p.success }

// Clone copies the mutable state; blocked, dist and toolDirs are never
// mutated after they are set, so sharing them keeps the copy independent.
func (p *planPath) Clone() Env {
	q := *p
	return &q
}

// ShortestPath is the BFS length of the shortest start→goal path.
func (p *planPath) ShortestPath() int { return p.shortest }

// Observe renders the role's prompt (format in the file comment).
func (p *planPath) Observe(role string) string {
	var b strings.Builder
	b.Grow(32 + 2*p.moves + p.w*p.h + p.h)
	switch role {
	case "tool":
		b.WriteString("t ")
	case "planner":
		b.WriteString("p ")
	default:
		b.WriteString("? ")
	}
	b.WriteByte('a')
	b.WriteByte(digit(p.agent / p.w))
	b.WriteByte(digit(p.agent % p.w))
	b.WriteString(" g")
	b.WriteByte(digit(p.goal / p.w))
	b.WriteByte(digit(p.goal % p.w))
	b.WriteString(" n:")
	for d := 0; d < 4; d++ {
		if n := neighbor(p.w, p.h, p.agent, d); n >= 0 && !p.blocked[n] {
			b.WriteByte(dirLetters[d])
		} else {
			b.WriteByte('-')
		}
	}
	if role == "tool" {
		b.WriteString(" p:")
		b.WriteString(p.planDid)
		if p.planHit {
			b.WriteByte('*')
		}
	} else {
		// The planner's own last action only when it hit a wall: a
		// history of good moves would let imitation copy the previous
		// move instead of reading the grid.
		b.WriteString(" m:")
		if p.planHit {
			b.WriteString(p.planDid)
			b.WriteByte('*')
		} else {
			b.WriteByte('-')
		}
		b.WriteString(" t:")
		b.WriteString(p.toolSays)
	}
	b.WriteByte(' ')
	for r := 0; r < p.h; r++ {
		if r > 0 {
			b.WriteByte('/')
		}
		for c := 0; c < p.w; c++ {
			i := r*p.w + c
			switch {
			case i == p.agent:
				b.WriteByte('A')
			case i == p.goal:
				b.WriteByte('G')
			case p.blocked[i]:
				b.WriteByte('#')
			default:
				b.WriteByte('.')
			}
		}
	}
	return b.String()
}

// judge scores a move list from the agent's cell against BFS: PathLocalGood if
// all moves are legal and shortest, 0 if legal, LocalBad if any is illegal.
func (p *planPath) judge(dirs []int) float64 {
	if dirs == nil {
		return LocalBad
	}
	cur := p.agent
	optimal := true
	for _, d := range dirs {
		n := neighbor(p.w, p.h, cur, d)
		if n < 0 || p.blocked[n] {
			return LocalBad
		}
		if cur == p.goal || p.dist[n] != p.dist[cur]-1 {
			optimal = false
		}
		cur = n
	}
	if optimal {
		return PathLocalGood
	}
	return 0
}

// Step applies the acting role's action (see the file comment for rewards).
func (p *planPath) Step(role, action string) Step {
	if why := p.check(role); why != "" {
		return p.refuse(why)
	}
	dirs, ok := parseMoves(action, p.moves)
	if role == "tool" {
		st := Step{Valid: ok, Local: p.judge(dirs), Info: "suggested"}
		if ok {
			p.toolDirs, p.toolSays = dirs, movesString(dirs)
			if st.Local < 0 {
				st.Valid = false
				st.Info = "invalid: suggestion hits a wall"
			}
		} else {
			p.toolDirs, p.toolSays = nil, "?"
			st.Info = "invalid: unparseable suggestion"
		}
		if p.toolTeam {
			st.Team = p.moveTeam(dirs, ok)
		}
		p.advance()
		st.Done = p.done
		return st
	}
	st := Step{Valid: true, Local: p.judge(dirs), Info: "moved"}
	p.planHit = false
	if !ok {
		p.planDid = "?"
		st.Valid, st.Team, st.Info = false, InvalidPenalty, "invalid: unparseable move"
	} else {
		p.planDid = movesString(dirs)
		for _, d := range dirs {
			n := neighbor(p.w, p.h, p.agent, d)
			if n < 0 || p.blocked[n] {
				st.Valid, st.Info = false, "invalid: blocked"
				p.planHit = true
				st.Team += InvalidPenalty
				break
			}
			before := manhattan(p.w, p.agent, p.goal)
			after := manhattan(p.w, n, p.goal)
			st.Team += StepCost + ShapingScale*float64(before-after)
			p.agent = n
			p.taken++
			if p.agent == p.goal {
				st.Team += GoalReward
				st.Info = "goal"
				if p.taken == p.shortest {
					st.Team += ShortestBonus
					st.Info = "goal by a shortest path"
				}
				p.success, p.done = true, true
				break
			}
		}
	}
	p.advance()
	st.Done = p.done
	return st
}

// moveTeam is the team reward the planner's Step would earn for dirs (ok:
// they parsed), without moving: the tool's team reward under
// Config.ToolTeam.
func (p *planPath) moveTeam(dirs []int, ok bool) float64 {
	if !ok {
		return InvalidPenalty
	}
	team, agent, taken := 0.0, p.agent, p.taken
	for _, d := range dirs {
		n := neighbor(p.w, p.h, agent, d)
		if n < 0 || p.blocked[n] {
			return team + InvalidPenalty
		}
		team += StepCost + ShapingScale*float64(manhattan(p.w, agent, p.goal)-manhattan(p.w, n, p.goal))
		agent = n
		taken++
		if agent == p.goal {
			team += GoalReward
			if taken == p.shortest {
				team += ShortestBonus
			}
			break
		}
	}
	return team
}

// ExpertAction is the optimal action: the tool suggests the first Moves
// steps of a BFS shortest path (ties broken U, D, L, R); the planner repeats
// the tool's suggestion when it is optimal and otherwise plays its own
// shortest-path moves.
func (p *planPath) ExpertAction(role string) string {
	if role == "planner" && p.toolDirs != nil && p.judge(p.toolDirs) == PathLocalGood {
		return p.toolSays
	}
	return movesString(p.bestMoves())
}

// bestMoves is the BFS shortest path prefix of up to Moves steps.
func (p *planPath) bestMoves() []int {
	var out []int
	cur := p.agent
	for len(out) < p.moves && cur != p.goal {
		found := false
		for d := 0; d < 4; d++ {
			n := neighbor(p.w, p.h, cur, d)
			if n >= 0 && !p.blocked[n] && p.dist[n] == p.dist[cur]-1 {
				out = append(out, d)
				cur = n
				found = true
				break
			}
		}
		if !found {
			break
		}
	}
	if len(out) == 0 {
		out = append(out, 0) // at the goal already (episode over): any letter
	}
	return out
}

// randomAction is a plausible but arbitrary action for noisy transcripts.
func (p *planPath) randomAction(role string, r randSource) string {
	n := 1 + r.IntN(p.moves)
	b := make([]byte, n)
	for i := range b {
		b[i] = dirLetters[r.IntN(4)]
	}
	return string(b)
}

// OptimalRounds is ⌈shortest path / Moves⌉.
func (p *planPath) OptimalRounds() int { return ceilDiv(p.shortest, p.moves) }
