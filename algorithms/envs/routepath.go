package envs

import (
	"fmt"
	"strings"
)

// Route-Path: Plan-Path with JoyAgents-R1's hierarchy, a master agent that
// routes every turn to one of two specialised sub-agents. Routing matters:
// each sub-agent can move along one axis only, so the master has to read
// the grid and give the turn to the one whose axis holds a shortest-path
// move.
//
// The grid, the start, the goal, the turn budget and the team rewards are
// Plan-Path's (the same seed gives the same grid). One move per round. Roles:
//
//   - "master" answers "h" or "v": the sub-agent that acts this round.
//     Local reward: PathLocalGood when the chosen axis holds a move one step
//     nearer the goal in BFS distance, 0 when it holds only legal moves,
//     LocalBad when it holds none. Any other answer is invalid: the round
//     is lost (team InvalidPenalty, local LocalBad) and the master acts
//     again next round. It earns no team reward.
//   - "h" moves left or right ("L" or "R"), "v" up or down ("U" or "D");
//     the move is executed with Plan-Path's team reward, judged against BFS
//     for the local reward as the planner's is. A letter off the sub-agent's
//     axis is invalid (team InvalidPenalty, local LocalBad, no move).
//
// Only the role the turn is routed to acts (Router: Next); a round is the
// master's route and the chosen sub-agent's move.
//
// Config.RandomRoute takes the master away: the environment routes every
// round to "h" or "v" at random (seeded), the routing-off baseline of the
// same sub-agents.
//
// Observations (6×6 example, as Plan-Path's without the messages):
//
//	master: "m a14 g52 n:UD-R ..#.../..#.A./....../#...#./..G.../......"
//	h:      "h a14 g52 n:UD-R ..#.../..#.A./....../#...#./..G.../......"
type routePath struct {
	w, h     int
	blocked  []bool // immutable after generation: shared by clones
	dist     []int  // BFS distance to goal; immutable, shared by clones
	agent    int
	goal     int
	shortest int
	taken    int
	rounds   int
	budget   int
	next     string // the role that acts now
	done     bool
	success  bool
	random   bool  // Config.RandomRoute
	seed     int64 // of the random routes
	roles    []string
}

var (
	routePathRoles       = []string{"master", "h", "v"}
	routePathRandomRoles = []string{"h", "v"}
)

func newRoutePath(cfg Config, seed int64) (Env, error) {
	if cfg.Single {
		return nil, fmt.Errorf("%w: routepath has no single-agent form", ErrBadConfig)
	}
	if cfg.Moves > 1 {
		return nil, fmt.Errorf("%w: routepath moves one cell a round (moves %d)", ErrBadConfig, cfg.Moves)
	}
	base, err := newPlanPath(Config{Width: cfg.Width, Height: cfg.Height, ObstacleRate: cfg.ObstacleRate, TurnBudget: cfg.TurnBudget}, seed)
	if err != nil {
		return nil, err
	}
	p := base.(*planPath)
	r := &routePath{w: p.w, h: p.h, blocked: p.blocked, dist: p.dist, agent: p.agent, goal: p.goal, shortest: p.shortest,
		budget: p.budget, random: cfg.RandomRoute, seed: seed, roles: routePathRoles}
	if r.random {
		r.roles = routePathRandomRoles
	}
	r.route()
	return r, nil
}

func (r *routePath) Name() string    { return "routepath" }
func (r *routePath) Roles() []string { return r.roles }
func (r *routePath) Turn() int       { return r.rounds }
func (r *routePath) Done() bool      { return r.done }
func (r *routePath) Success() bool   { return r.success }

// Next implements Router.
func (r *routePath) Next() string {
	if r.done {
		return ""
	}
	return r.next
}

// Clone copies the mutable state; blocked and dist are never mutated.
func (r *routePath) Clone() Env {
	q := *r
	return &q
}

// route gives the new round's turn: to the master, or under RandomRoute to
// a sub-agent drawn from (seed, round).
func (r *routePath) route() {
	if !r.random {
		r.next = "master"
		return
	}
	r.next = routePathRandomRoles[splitmix(uint64(r.seed)^uint64(r.rounds+1)*0x9e3779b97f4a7c15)&1]
}

// splitmix is SplitMix64's finaliser: a stateless hash, so clones draw the
// same routes.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// endRound closes the round (and the episode on the goal or the budget).
func (r *routePath) endRound() {
	r.rounds++
	if r.rounds >= r.budget {
		r.done = true
	}
	if !r.done {
		r.route()
	}
}

// axis is the directions of a sub-agent: up and down for "v", left and
// right for "h".
func axis(role string) []int {
	switch role {
	case "h":
		return []int{2, 3}
	case "v":
		return []int{0, 1}
	}
	return nil
}

// Observe renders the role's prompt (format in the comment above).
func (r *routePath) Observe(role string) string {
	var b strings.Builder
	b.Grow(17 + r.w*r.h + r.h)
	switch role {
	case "master":
		b.WriteString("m ")
	case "h", "v":
		b.WriteString(role)
		b.WriteByte(' ')
	default:
		b.WriteString("? ")
	}
	b.WriteByte('a')
	b.WriteByte(digit(r.agent / r.w))
	b.WriteByte(digit(r.agent % r.w))
	b.WriteString(" g")
	b.WriteByte(digit(r.goal / r.w))
	b.WriteByte(digit(r.goal % r.w))
	b.WriteString(" n:")
	for d := 0; d < 4; d++ {
		if n := neighbor(r.w, r.h, r.agent, d); n >= 0 && !r.blocked[n] {
			b.WriteByte(dirLetters[d])
		} else {
			b.WriteByte('-')
		}
	}
	b.WriteByte(' ')
	for row := 0; row < r.h; row++ {
		if row > 0 {
			b.WriteByte('/')
		}
		for c := 0; c < r.w; c++ {
			i := row*r.w + c
			switch {
			case i == r.agent:
				b.WriteByte('A')
			case i == r.goal:
				b.WriteByte('G')
			case r.blocked[i]:
				b.WriteByte('#')
			default:
				b.WriteByte('.')
			}
		}
	}
	return b.String()
}

// judgeAxis is the master's local reward for routing to role.
func (r *routePath) judgeAxis(role string) float64 {
	best := LocalBad
	for _, d := range axis(role) {
		n := neighbor(r.w, r.h, r.agent, d)
		if n < 0 || r.blocked[n] {
			continue
		}
		if r.dist[n] == r.dist[r.agent]-1 {
			return PathLocalGood
		}
		best = 0
	}
	return best
}

// Step applies the routed role's action (rewards in the comment above).
func (r *routePath) Step(role, action string) Step {
	switch {
	case r.done:
		return Step{Valid: false, Local: LocalBad, Done: true, Info: "invalid: episode over"}
	case !contains(r.roles, role):
		return Step{Valid: false, Local: LocalBad, Info: "invalid: unknown role"}
	case role != r.next:
		return Step{Valid: false, Local: LocalBad, Info: "invalid: not routed to " + role}
	}
	a := strings.TrimSpace(action)
	if role == "master" {
		if a != "h" && a != "v" {
			r.endRound()
			return Step{Team: InvalidPenalty, Local: LocalBad, Done: r.done, Info: "invalid: route h or v; the round is lost"}
		}
		r.next = a
		return Step{Valid: true, Local: r.judgeAxis(a), Info: "routed to " + a}
	}
	dirs, ok := parseMoves(a, 1)
	st := Step{Valid: true, Info: "moved"}
	switch {
	case !ok:
		st = Step{Team: InvalidPenalty, Local: LocalBad, Info: "invalid: unparseable move"}
	case dirs[0] != axis(role)[0] && dirs[0] != axis(role)[1]:
		st = Step{Team: InvalidPenalty, Local: LocalBad, Info: "invalid: off " + role + "'s axis"}
	default:
		d := dirs[0]
		n := neighbor(r.w, r.h, r.agent, d)
		if n < 0 || r.blocked[n] {
			st = Step{Team: InvalidPenalty, Local: LocalBad, Info: "invalid: blocked"}
			break
		}
		if r.dist[n] == r.dist[r.agent]-1 {
			st.Local = PathLocalGood
		}
		st.Team = StepCost + ShapingScale*float64(manhattan(r.w, r.agent, r.goal)-manhattan(r.w, n, r.goal))
		r.agent = n
		r.taken++
		if r.agent == r.goal {
			st.Team += GoalReward
			st.Info = "goal"
			if r.taken == r.shortest {
				st.Team += ShortestBonus
				st.Info = "goal by a shortest path"
			}
			r.success, r.done = true, true
		}
	}
	r.endRound()
	st.Done = r.done
	return st
}

// ExpertAction is the optimal action: the master routes to the axis of the
// first BFS shortest-path move (ties U, D, L, R, as Plan-Path's expert); a
// sub-agent plays its axis's move nearest the goal in BFS distance (the
// first letter of its axis when it has no legal move).
func (r *routePath) ExpertAction(role string) string {
	if role == "master" {
		for d := 0; d < 4; d++ {
			n := neighbor(r.w, r.h, r.agent, d)
			if n >= 0 && !r.blocked[n] && r.dist[n] == r.dist[r.agent]-1 {
				if d < 2 {
					return "v"
				}
				return "h"
			}
		}
		return "h"
	}
	ax := axis(role)
	if ax == nil {
		return "h"
	}
	best, bestDist := ax[0], -1
	for _, d := range ax {
		n := neighbor(r.w, r.h, r.agent, d)
		if n >= 0 && !r.blocked[n] && (bestDist < 0 || r.dist[n] < bestDist) {
			best, bestDist = d, r.dist[n]
		}
	}
	return string(dirLetters[best])
}

// randomAction is a plausible but arbitrary action for noisy transcripts.
func (r *routePath) randomAction(role string, rng randSource) string {
	if role == "master" {
		return routePathRandomRoles[rng.IntN(2)]
	}
	if ax := axis(role); ax != nil {
		return string(dirLetters[ax[rng.IntN(2)]])
	}
	return "h"
}

// ShortestPath is the BFS length of the shortest start→goal path.
func (r *routePath) ShortestPath() int { return r.shortest }

func routePathMaxObs(cfg Config) (int, error) {
	c, err := planPathConfig(cfg)
	if err != nil {
		return 0, err
	}
	// "m a14 g52 n:UDLR " + grid rows joined by '/'.
	return 17 + c.w*c.h + c.h - 1, nil
}

func routePathMaxAction(Config) (int, error) { return 1, nil }

// OptimalRounds is the shortest path's length: one move a round.
func (r *routePath) OptimalRounds() int { return r.shortest }
