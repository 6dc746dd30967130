package envs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
)

// Sentinel errors returned by New and Transcripts.
var (
	// ErrUnknownEnv is returned for a name that is neither an environment
	// nor a preset.
	ErrUnknownEnv = errors.New("unknown environment")
	// ErrBadConfig is returned when a Config field is out of range.
	ErrBadConfig = errors.New("bad environment config")
	// ErrGenerate is returned when no valid episode could be generated from
	// the seed within the attempt limit (e.g. an obstacle rate so high that
	// start and goal are never connected).
	ErrGenerate = errors.New("cannot generate episode")
)

// Config parameterises an environment. Zero fields take the environment's
// default, so Config{} is always valid; fields an environment does not use
// are ignored.
type Config struct {
	// Width and Height of the grid (planpath: 5..10, default 6; sokoban: the
	// room including its wall border, 5..8, default 6).
	Width, Height int
	// ObstacleRate is the probability that a cell is blocked (planpath,
	// default 0.22; sokoban interior walls, default 0.1). A negative value
	// means no obstacles at all; values above 0.6 are rejected.
	ObstacleRate float64
	// TurnBudget is the maximum number of rounds (every role acting once).
	// Default: planpath max(W+H, 2×shortest path), sokoban
	// max(W+H, 2×optimal moves), sudoku4 holes+4, arith steps+2.
	TurnBudget int
	// Moves is how many moves a single planpath/sokoban action may hold
	// (1..4, default 1: one move per round).
	Moves int
	// Holes is the number of empty sudoku4 cells (1..11, default 8).
	Holes int
	// Steps is the number of arithmetic operations of an arith problem
	// (1..4); 0 picks 2 or 3 at random per episode.
	Steps int
	// Single is the single-agent baseline: only the first (proposing) role
	// acts (planpath: planner; sudoku4 and arith: reasoner; sokoban:
	// planner) and its action is executed as if the second role had accepted
	// it; in arith, with no tool, it answers each step's result as a bare
	// number. Observations keep their format; the absent role's slot always
	// shows "-".
	Single bool
	// ToolTeam gives planpath's tool the team reward its suggestion would
	// earn if the planner executed it (the team reward after the planner's
	// move when the planner follows the tool), so the team weight α acts on
	// the tool's reward too. Off (default): the tool's step earns no team
	// reward.
	ToolTeam bool
	// RandomRoute is routepath without its master agent: every round the
	// environment routes the turn to a sub-agent at random (seeded), the
	// routing-off baseline.
	RandomRoute bool
}

// Preset is a named configuration of an environment, so scripts and the
// evaluation command can say "planpath-10x10" instead of spelling fields.
type Preset struct {
	Env    string // environment name, e.g. "planpath"
	Config Config // configuration (zero fields mean defaults)
	Doc    string // one line of description
}

// Spec describes an environment to Register: how to start an episode and
// how long its texts can be, so that a policy's context and generation
// budget can be sized before any episode is played. An environment whose
// episodes implement Expert can warm-start policies (Transcripts).
// Observations and actions use only the characters of Alphabet, which the
// policies' character tokenizer is built from.
type Spec struct {
	// New starts the episode of seed under cfg (zero fields: defaults).
	New func(cfg Config, seed int64) (Env, error)
	// MaxObsLen bounds the length in bytes of any observation under cfg.
	MaxObsLen func(cfg Config) (int, error)
	// MaxActionLen is the length in bytes of the longest well-formed
	// action under cfg.
	MaxActionLen func(cfg Config) (int, error)
}

// ErrRegister reports a Register call with a taken name or an incomplete
// Spec.
var ErrRegister = errors.New("envs: cannot register environment")

// mu guards the following: the registry, written by Register (usually from
// init functions, like actors.Register, so that worker processes running
// the same binary know the same environments) and read by everything else.
var (
	mu    sync.RWMutex
	specs = map[string]Spec{
		"planpath":  {New: newPlanPath, MaxObsLen: planPathMaxObs, MaxActionLen: planPathMaxAction},
		"sudoku4":   {New: newSudoku4, MaxObsLen: sudoku4MaxObs, MaxActionLen: sudoku4MaxAction},
		"sokoban":   {New: newSokoban, MaxObsLen: sokobanMaxObs, MaxActionLen: sokobanMaxAction},
		"arith":     {New: newArith, MaxObsLen: arithMaxObsLen, MaxActionLen: arithMaxAction},
		"routepath": {New: newRoutePath, MaxObsLen: routePathMaxObs, MaxActionLen: routePathMaxAction},
	}
)

// Register adds environment name, so that New, Transcripts, the
// environment host actors and the trainer accept it. Call it from an init
// function of the program (every process of a job then knows it).
func Register(name string, s Spec) error {
	if name == "" || s.New == nil || s.MaxObsLen == nil || s.MaxActionLen == nil {
		return fmt.Errorf("%w %q: a name, New, MaxObsLen and MaxActionLen are required", ErrRegister, name)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, taken := specs[name]; taken {
		return fmt.Errorf("%w %q: the name is taken", ErrRegister, name)
	}
	if _, taken := presets[name]; taken {
		return fmt.Errorf("%w %q: a preset has that name", ErrRegister, name)
	}
	specs[name] = s
	return nil
}

// MustRegister is Register that panics on error, for init functions.
func MustRegister(name string, s Spec) {
	if err := Register(name, s); err != nil {
		panic(err)
	}
}

// lookup returns the Spec of an environment (not preset) name.
func lookup(name string) (Spec, bool) {
	mu.RLock()
	defer mu.RUnlock()
	s, ok := specs[name]
	return s, ok
}

var presets = map[string]Preset{
	"planpath-5x5":   {Env: "planpath", Config: Config{Width: 5, Height: 5}, Doc: "5x5 grid, 22% blocked"},
	"planpath-6x6":   {Env: "planpath", Config: Config{Width: 6, Height: 6}, Doc: "6x6 grid, 22% blocked (the AT-GRPO table's size)"},
	"planpath-8x8":   {Env: "planpath", Config: Config{Width: 8, Height: 8}, Doc: "8x8 grid, 22% blocked"},
	"planpath-10x10": {Env: "planpath", Config: Config{Width: 10, Height: 10}, Doc: "10x10 grid, 22% blocked"},
	"sudoku4-easy":   {Env: "sudoku4", Config: Config{Holes: 5}, Doc: "4x4 sudoku, 5 empty cells"},
	"sudoku4-hard":   {Env: "sudoku4", Config: Config{Holes: 10}, Doc: "4x4 sudoku, 10 empty cells"},
	"sokoban-6x6":    {Env: "sokoban", Config: Config{Width: 6, Height: 6}, Doc: "6x6 room, one box"},
	"arith-2":        {Env: "arith", Config: Config{Steps: 2}, Doc: "two-step word problems"},
	"arith-3":        {Env: "arith", Config: Config{Steps: 3}, Doc: "three-step word problems"},
}

// Names lists the environment names accepted by New, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(specs))
	for n := range specs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Presets lists the preset names accepted by New, sorted.
func Presets() []string {
	out := make([]string, 0, len(presets))
	for n := range presets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LookupPreset returns the named preset.
func LookupPreset(name string) (Preset, bool) {
	p, ok := presets[name]
	return p, ok
}

// Resolve maps an environment or preset name to the environment name and the
// configuration New would use: cfg's non-zero fields override the preset's.
func Resolve(name string, cfg Config) (string, Config, error) {
	if _, ok := lookup(name); ok {
		return name, cfg, nil
	}
	p, ok := presets[name]
	if !ok {
		return "", Config{}, fmt.Errorf("%w %q (environments: %s; presets: %s)", ErrUnknownEnv, name,
			strings.Join(Names(), ", "), strings.Join(Presets(), ", "))
	}
	return p.Env, merge(p.Config, cfg), nil
}

// merge returns base with every non-zero field of over applied.
func merge(base, over Config) Config {
	if over.Width != 0 {
		base.Width = over.Width
	}
	if over.Height != 0 {
		base.Height = over.Height
	}
	if over.ObstacleRate != 0 {
		base.ObstacleRate = over.ObstacleRate
	}
	if over.TurnBudget != 0 {
		base.TurnBudget = over.TurnBudget
	}
	if over.Moves != 0 {
		base.Moves = over.Moves
	}
	if over.Holes != 0 {
		base.Holes = over.Holes
	}
	if over.Steps != 0 {
		base.Steps = over.Steps
	}
	if over.Single {
		base.Single = true
	}
	if over.ToolTeam {
		base.ToolTeam = true
	}
	if over.RandomRoute {
		base.RandomRoute = true
	}
	return base
}

// New starts the episode of environment (or preset) name with the given
// seed. The same name, cfg and seed always give the same episode.
func New(name string, cfg Config, seed int64) (Env, error) {
	envName, cfg, err := Resolve(name, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.TurnBudget < 0 {
		return nil, fmt.Errorf("%w: %s turn budget %d < 0", ErrBadConfig, envName, cfg.TurnBudget)
	}
	spec, _ := lookup(envName)
	e, err := spec.New(cfg, seed)
	if err != nil {
		return nil, fmt.Errorf("new %s (seed %d): %w", envName, seed, err)
	}
	return e, nil
}

// alphabet is every byte an observation or action of any environment may
// contain (actions meaning the well-formed ones the experts produce).
const alphabet = " #*+,-./0123456789:=?ABDGLRUabcdefghijklmnopqrstuvwxyz"

// Alphabet lists, in byte order, every character any observation or
// well-formed action of any environment can contain, so a character
// tokenizer can be built from it. Observations never echo raw action text:
// an unparseable action is shown as "?".
func Alphabet() string { return alphabet }

// MaxObsLen is an upper bound on the length in bytes of any observation of
// environment (or preset) name under cfg.
func MaxObsLen(name string, cfg Config) (int, error) {
	envName, cfg, err := Resolve(name, cfg)
	if err != nil {
		return 0, err
	}
	spec, _ := lookup(envName)
	return spec.MaxObsLen(cfg)
}

// MaxActionLen is the length in bytes of the longest well-formed action of
// environment (or preset) name under cfg; a policy needs to generate no more.
func MaxActionLen(name string, cfg Config) (int, error) {
	envName, cfg, err := Resolve(name, cfg)
	if err != nil {
		return 0, err
	}
	spec, _ := lookup(envName)
	return spec.MaxActionLen(cfg)
}

// The built-in environments' bounds.

func planPathMaxObs(cfg Config) (int, error) {
	c, err := planPathConfig(cfg)
	if err != nil {
		return 0, err
	}
	// "p a14 g52 n:UDLR m:" + moves + "*" + " t:" + moves + " " +
	// grid rows joined by '/' (the planner's is the longer).
	return 19 + c.moves + 1 + 3 + c.moves + 1 + c.w*c.h + c.h - 1, nil
}

func planPathMaxAction(cfg Config) (int, error) {
	c, err := planPathConfig(cfg)
	if err != nil {
		return 0, err
	}
	return c.moves, nil
}

func sokobanMaxObs(cfg Config) (int, error) {
	c, err := sokobanConfig(cfg)
	if err != nil {
		return 0, err
	}
	iw, ih := c.w-2, c.h-2
	// "p a12 b22 g33 c:" + moves + " " + interior rows.
	return 16 + max(2, c.moves) + 1 + iw*ih + ih - 1, nil
}

func sokobanMaxAction(cfg Config) (int, error) {
	c, err := sokobanConfig(cfg)
	if err != nil {
		return 0, err
	}
	return max(2, c.moves), nil
}

func sudoku4MaxObs(Config) (int, error)    { return 2 + 19 + 3 + 6, nil } // "r " board " v:" fill
func sudoku4MaxAction(Config) (int, error) { return 6, nil }

func arithMaxObsLen(cfg Config) (int, error) {
	k := cfg.Steps
	if k == 0 {
		k = 3
	}
	return arithMaxObs(k), nil
}

func arithMaxAction(Config) (int, error) { return maxExprLen, nil }

// newRand returns the deterministic generator for a seed; salt separates
// independent streams drawn from one seed.
func newRand(seed int64, salt uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15^salt))
}

// Reward scales of the environments (the grid ones follow AT-GRPO's
// Plan-Path shaping). Each environment's file comment says which it uses.
const (
	// StepCost is charged for every executed move.
	StepCost = -0.01
	// InvalidPenalty is charged for an illegal or unparseable action.
	InvalidPenalty = -0.1
	// ShapingScale multiplies the potential difference φ(s')−φ(s) with
	// φ = −Manhattan distance (γ = 1), so one step closer earns +0.1.
	ShapingScale = 0.1
	// GoalReward is earned when the task is solved.
	GoalReward = 1.0
	// ShortestBonus is added when planpath reaches the goal along a
	// shortest path.
	ShortestBonus = 0.5
	// LocalGood is a role's local reward for a correct/optimal output,
	// LocalBad for a wrong, illegal or unparseable one; a legal but
	// suboptimal output earns 0.
	LocalGood = 0.1
	LocalBad  = -0.1
	// PathLocalGood is the local reward of a shortest-path move in planpath
	// and sokoban. It exceeds the largest swing of the Manhattan shaping
	// (0.09 − (−0.11) = 0.2), so with team weight α ≤ 1 the one-step reward
	// α·team + local of a shortest-path move is always above that of any
	// other move, even a detour that moves away in Manhattan distance; the
	// shaping alone would rank a greedy step into a dead end higher.
	PathLocalGood = 0.3
	// FillReward is sudoku4's team reward for a correct fill and arith's
	// for a correct intermediate step; a wrong one costs InvalidPenalty.
	FillReward = 0.1
)

// turnState is the turn bookkeeping shared by every environment: two roles
// acting in order, rounds counted, and a turn budget.
type turnState struct {
	roles   []string
	single  bool // single-agent baseline: one role acts alone
	next    int  // index into roles of the role to act
	rounds  int
	budget  int
	done    bool
	success bool
}

// newTurnState starts the turn bookkeeping with the multi-agent or, for
// cfg.Single, the single-agent cast.
func newTurnState(cfg Config, multi, single []string, budget int) turnState {
	if cfg.Single {
		return turnState{roles: single, single: true, budget: budget}
	}
	return turnState{roles: multi, budget: budget}
}

// check returns a non-empty reason when role may not act now.
func (t *turnState) check(role string) string {
	if t.done {
		return "invalid: episode over"
	}
	if role != t.roles[t.next] {
		if !contains(t.roles, role) {
			return "invalid: unknown role"
		}
		return "invalid: not your turn"
	}
	return ""
}

// advance moves the turn to the next role, closing the round (and the
// episode, when the budget is spent) after the last role.
func (t *turnState) advance() {
	t.next++
	if t.next == len(t.roles) {
		t.next = 0
		t.rounds++
		if t.rounds >= t.budget {
			t.done = true
		}
	}
}

// refuse is the Step for an out-of-turn, unknown-role or after-the-end call:
// it changes nothing and costs the caller its local penalty.
func (t *turnState) refuse(reason string) Step {
	return Step{Valid: false, Local: LocalBad, Done: t.done, Info: reason}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// OptimalRounder is implemented by every environment in this package: the
// fewest rounds a perfect team needs to solve the episode from its start,
// for efficiency metrics (rounds used / optimal) and for choosing budgets.
type OptimalRounder interface {
	OptimalRounds() int
}

// ceilDiv is ⌈a/b⌉ for positive b.
func ceilDiv(a, b int) int { return (a + b - 1) / b }
