package envs

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// allSetups is every environment default plus every preset.
func allSetups() []string {
	return append(Names(), Presets()...)
}

func TestNamesAndPresets(t *testing.T) {
	want := []string{"arith", "planpath", "routepath", "sokoban", "sudoku4"}
	if got := Names(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, p := range Presets() {
		pr, ok := LookupPreset(p)
		if !ok {
			t.Fatalf("preset %s not found", p)
		}
		e, err := New(p, Config{}, 7)
		if err != nil {
			t.Fatalf("New(%s): %v", p, err)
		}
		if e.Name() != pr.Env {
			t.Fatalf("preset %s built %s, want %s", p, e.Name(), pr.Env)
		}
	}
	if _, err := New("chess", Config{}, 1); !errors.Is(err, ErrUnknownEnv) {
		t.Fatalf("unknown env error = %v, want ErrUnknownEnv", err)
	}
	bad := []struct {
		name string
		cfg  Config
	}{
		{"planpath", Config{Width: 4}},
		{"planpath", Config{Width: 11, Height: 6}},
		{"planpath", Config{ObstacleRate: 0.9}},
		{"planpath", Config{ObstacleRate: math.NaN()}},
		{"sokoban", Config{ObstacleRate: math.NaN()}},
		{"planpath", Config{Moves: 5}},
		{"sokoban", Config{Width: 9}},
		{"sudoku4", Config{Holes: 12}},
		{"arith", Config{Steps: 5}},
		{"arith", Config{TurnBudget: -1}},
	}
	for _, b := range bad {
		if _, err := New(b.name, b.cfg, 1); !errors.Is(err, ErrBadConfig) {
			t.Errorf("New(%s, %+v) error = %v, want ErrBadConfig", b.name, b.cfg, err)
		}
	}
	// Preset fields are overridden by non-zero Config fields.
	name, cfg, err := Resolve("planpath-10x10", Config{Height: 7, Moves: 2})
	if err != nil || name != "planpath" || cfg.Width != 10 || cfg.Height != 7 || cfg.Moves != 2 {
		t.Fatalf("Resolve override = %s %+v %v", name, cfg, err)
	}
}

// playExpert runs the expert to the end and returns the episode.
func playExpert(t *testing.T, name string, cfg Config, seed int64) Env {
	t.Helper()
	e, err := New(name, cfg, seed)
	if err != nil {
		t.Fatalf("New(%s, seed %d): %v", name, seed, err)
	}
	ex := e.(Expert)
	opt := e.(OptimalRounder).OptimalRounds()
	defer func() {
		if e.Turn() != opt {
			t.Fatalf("%s seed %d: expert took %d rounds, OptimalRounds says %d", name, seed, e.Turn(), opt)
		}
	}()
	for guard := 0; !e.Done(); guard++ {
		if guard > 200 {
			t.Fatalf("%s seed %d: expert episode does not end", name, seed)
		}
		for _, r := range e.Roles() {
			if e.Done() {
				break
			}
			if !ActsNow(e, r) {
				continue
			}
			a := ex.ExpertAction(r)
			st := e.Step(r, a)
			if good := map[string]float64{"planpath": PathLocalGood, "sokoban": PathLocalGood, "routepath": PathLocalGood}[e.Name()]; !st.Valid || st.Local != max(good, LocalGood) {
				t.Fatalf("%s seed %d: expert %s action %q judged %+v (obs %q)", name, seed, r, a, st, e.Observe(r))
			}
		}
	}
	return e
}

func TestExpertSolves100Seeds(t *testing.T) {
	for _, name := range allSetups() {
		for seed := int64(0); seed < 100; seed++ {
			if e := playExpert(t, name, Config{}, 1000+seed); !e.Success() {
				t.Fatalf("%s seed %d: expert did not succeed", name, 1000+seed)
			}
		}
	}
	// The single-agent baseline.
	for _, name := range Names() {
		if name == "routepath" {
			continue // a hierarchy: no single-agent form
		}
		for seed := int64(0); seed < 100; seed++ {
			if e := playExpert(t, name, Config{Single: true}, seed); !e.Success() || len(e.Roles()) != 1 {
				t.Fatalf("%s single seed %d: expert did not succeed alone", name, seed)
			}
		}
	}
	// Multi-move actions too.
	for _, name := range []string{"planpath", "sokoban"} {
		for seed := int64(0); seed < 50; seed++ {
			if e := playExpert(t, name, Config{Moves: 3}, seed); !e.Success() {
				t.Fatalf("%s moves=3 seed %d: expert did not succeed", name, seed)
			}
		}
	}
}

// garbage returns a random action: expert, random plausible, or junk bytes.
func garbage(r *rand.Rand, e Env, role string) string {
	switch r.IntN(4) {
	case 0:
		return e.(Expert).ExpertAction(role)
	case 1:
		return e.(randomActor).randomAction(role, r)
	case 2:
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	default:
		return []string{"", "ok", "no", "?", "UUUUUUUU", "r9c9=9", "1/0", "-", "\x00", "r1c1=1", "L", "9999*9999*99"}[r.IntN(12)]
	}
}

// checkObs fails unless every role's observation is within the bound and
// the alphabet.
func checkObs(t testing.TB, e Env, bound int) {
	t.Helper()
	for _, r := range e.Roles() {
		o := e.Observe(r)
		if len(o) > bound {
			t.Fatalf("%s observation for %s is %d bytes > %d: %q", e.Name(), r, len(o), bound, o)
		}
		for i := 0; i < len(o); i++ {
			if strings.IndexByte(alphabet, o[i]) < 0 {
				t.Fatalf("%s observation for %s has %q outside the alphabet: %q", e.Name(), r, o[i], o)
			}
		}
	}
}

func TestObservationBoundsAndAlphabet(t *testing.T) {
	// The compactness targets: 6x6 planpath ≤ 100 bytes, the others ≤ 120
	// (10x10 planpath needs 123).
	targets := map[string]int{"planpath": 100, "planpath-6x6": 100, "planpath-5x5": 100, "planpath-8x8": 100, "planpath-10x10": 135} // 10×10: 109 grid bytes + 26 of header (n:, m:, t:)
	for _, name := range allSetups() {
		bound, err := MaxObsLen(name, Config{})
		if err != nil {
			t.Fatal(err)
		}
		target, ok := targets[name]
		if !ok {
			target = 120
		}
		if bound > target {
			t.Errorf("%s: MaxObsLen %d > target %d", name, bound, target)
		}
		maxAct, _ := MaxActionLen(name, Config{})
		longest := 0
		r := rand.New(rand.NewPCG(1, 2))
		for seed := int64(0); seed < 150; seed++ {
			e, err := New(name, Config{}, seed)
			if err != nil {
				t.Fatal(err)
			}
			checkObs(t, e, bound)
			for guard := 0; !e.Done() && guard < 40; guard++ {
				for _, role := range e.Roles() {
					if a := e.(Expert).ExpertAction(role); len(a) > maxAct || strings.Trim(a, alphabet) != "" {
						t.Fatalf("%s expert action %q: longer than %d or outside the alphabet", name, a, maxAct)
					}
					e.Step(role, garbage(r, e, role))
					checkObs(t, e, bound)
					for _, rr := range e.Roles() {
						longest = max(longest, len(e.Observe(rr)))
					}
				}
			}
		}
		t.Logf("%s: longest observation %d bytes (bound %d), longest action %d", name, longest, bound, maxAct)
	}
	// The largest configurations stay within their computed bounds.
	extremes := []struct {
		name string
		cfg  Config
	}{
		{"arith", Config{Steps: 4}},
		{"arith", Config{Steps: 1}},
		{"planpath", Config{Width: 10, Height: 10, Moves: 4, ObstacleRate: 0.5}},
		{"sokoban", Config{Width: 8, Height: 8, Moves: 4, ObstacleRate: -1}},
		{"sudoku4", Config{Holes: 11}},
		{"arith", Config{Single: true}},
		{"planpath", Config{Single: true, Moves: 2}},
		{"sokoban", Config{Single: true}},
		{"sudoku4", Config{Single: true}},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, x := range extremes {
		bound, err := MaxObsLen(x.name, x.cfg)
		if err != nil {
			t.Fatal(err)
		}
		maxAct, _ := MaxActionLen(x.name, x.cfg)
		for seed := int64(0); seed < 100; seed++ {
			e, err := New(x.name, x.cfg, seed)
			if err != nil {
				t.Fatalf("%s %+v: %v", x.name, x.cfg, err)
			}
			for guard := 0; !e.Done() && guard < 40; guard++ {
				for _, role := range e.Roles() {
					if a := e.(Expert).ExpertAction(role); len(a) > maxAct {
						t.Fatalf("%s %+v: expert action %q longer than %d", x.name, x.cfg, a, maxAct)
					}
					e.Step(role, garbage(r, e, role))
					checkObs(t, e, bound)
				}
			}
		}
	}
	for _, c := range alphabet {
		if c > 127 {
			t.Fatalf("alphabet has non-ASCII %q", c)
		}
	}
}

// trace plays a fixed pseudo-random action script and records everything.
func trace(t *testing.T, name string, seed int64) string {
	t.Helper()
	e, err := New(name, Config{}, seed)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 9))
	var b strings.Builder
	for guard := 0; !e.Done() && guard < 30; guard++ {
		for _, role := range e.Roles() {
			b.WriteString(e.Observe(role))
			st := e.Step(role, garbage(r, e, role))
			b.WriteString(st.Info)
			b.WriteString(strings.Repeat("|", int(math.Round(st.Team*100))+200))
		}
	}
	return b.String()
}

func TestDeterminism(t *testing.T) {
	for _, name := range Names() {
		distinct := map[string]bool{}
		for seed := int64(0); seed < 20; seed++ {
			a, b := trace(t, name, seed), trace(t, name, seed)
			if a != b {
				t.Fatalf("%s seed %d: two runs differ", name, seed)
			}
			e, _ := New(name, Config{}, seed)
			distinct[e.Observe(e.Roles()[0])] = true
		}
		if len(distinct) < 15 {
			t.Fatalf("%s: only %d distinct episodes from 20 seeds", name, len(distinct))
		}
	}
}

func TestCloneIsIndependent(t *testing.T) {
	for _, name := range Names() {
		for seed := int64(0); seed < 20; seed++ {
			e, _ := New(name, Config{}, seed)
			ex := e.(Expert)
			// Advance a round so proposal slots hold something.
			for _, r := range e.Roles() {
				e.Step(r, ex.ExpertAction(r))
			}
			if e.Done() {
				continue
			}
			snap := map[string]string{}
			for _, r := range e.Roles() {
				snap[r] = e.Observe(r)
			}
			turn := e.Turn()
			c := e.Clone()
			rng := rand.New(rand.NewPCG(uint64(seed), 3))
			for guard := 0; !c.Done() && guard < 30; guard++ {
				for _, r := range c.Roles() {
					c.Step(r, garbage(rng, c, r))
				}
			}
			for _, r := range e.Roles() {
				if got := e.Observe(r); got != snap[r] {
					t.Fatalf("%s seed %d: stepping the clone changed the original's %s view:\n%q\n%q", name, seed, r, snap[r], got)
				}
			}
			if e.Turn() != turn || e.Done() {
				t.Fatalf("%s seed %d: stepping the clone changed the original's turn/done", name, seed)
			}
			// The original still plays to success on its own.
			for guard := 0; !e.Done() && guard < 50; guard++ {
				for _, r := range e.Roles() {
					e.Step(r, ex.ExpertAction(r))
				}
			}
			if !e.Success() {
				t.Fatalf("%s seed %d: original did not finish after its clone was played", name, seed)
			}
		}
	}
}

func TestTurnOrderAndAfterDone(t *testing.T) {
	for _, name := range Names() {
		e, _ := New(name, Config{}, 3)
		roles := e.Roles()
		before := e.Observe(roles[0]) + e.Observe(roles[1])
		for _, bad := range []string{roles[1], "nobody", ""} {
			st := e.Step(bad, "U")
			if st.Valid || st.Local != LocalBad || st.Team != 0 {
				t.Fatalf("%s: out-of-turn step by %q = %+v", name, bad, st)
			}
		}
		if after := e.Observe(roles[0]) + e.Observe(roles[1]); after != before || e.Turn() != 0 {
			t.Fatalf("%s: out-of-turn steps changed the state", name)
		}
		e = playExpert(t, name, Config{}, 3)
		st := e.Step(roles[0], "U")
		if st.Valid || !st.Done || st.Team != 0 {
			t.Fatalf("%s: step after done = %+v", name, st)
		}
	}
}

func TestTurnBudgetEndsEpisode(t *testing.T) {
	for _, name := range Names() {
		e, _ := New(name, Config{TurnBudget: 3}, 5)
		for i := 0; i < 3; i++ {
			if e.Done() {
				t.Fatalf("%s: done after %d rounds of garbage", name, i)
			}
			for _, r := range e.Roles() {
				e.Step(r, "!!")
			}
		}
		if !e.Done() || e.Success() || e.Turn() != 3 {
			t.Fatalf("%s: after the 3-round budget done=%v success=%v turn=%d", name, e.Done(), e.Success(), e.Turn())
		}
	}
}

func TestTranscripts(t *testing.T) {
	seeds := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, name := range Names() {
		ex, st, err := Transcripts(name, Config{}, seeds, TranscriptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Episodes != 10 || st.Successes != 10 || st.Examples != len(ex) || len(ex) < 20 {
			t.Fatalf("%s clean transcripts: %+v (%d examples)", name, st, len(ex))
		}
		for _, x := range ex {
			if !x.Expert || x.Obs == "" || x.Action == "" || x.Env != name {
				t.Fatalf("%s: bad clean example %+v", name, x)
			}
		}
		// Replaying the examples reproduces the observations.
		again, _, _ := Transcripts(name, Config{}, seeds, TranscriptOptions{})
		for i := range ex {
			if ex[i] != again[i] {
				t.Fatalf("%s: transcripts not deterministic at %d", name, i)
			}
		}

		noisy, nst, err := Transcripts(name, Config{}, seeds, TranscriptOptions{Noise: 0.3, RecordNoise: true, NoiseSeed: 1})
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for _, x := range noisy {
			if !x.Expert {
				bad++
			}
		}
		if bad == 0 || bad == len(noisy) || nst.Examples != len(noisy) {
			t.Fatalf("%s noisy transcripts: %d of %d noise examples", name, bad, len(noisy))
		}
		clean, _, _ := Transcripts(name, Config{}, seeds, TranscriptOptions{Noise: 0.3, NoiseSeed: 1})
		for _, x := range clean {
			if !x.Expert {
				t.Fatalf("%s: RecordNoise=false recorded a noise action", name)
			}
		}
		if len(clean) != len(noisy)-bad {
			t.Fatalf("%s: %d expert examples without noise labels, want %d", name, len(clean), len(noisy)-bad)
		}
	}
	if _, _, err := Transcripts("planpath", Config{}, seeds, TranscriptOptions{Noise: 2}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("noise 2 error = %v", err)
	}
	if _, _, err := Transcripts("planpath", Config{}, seeds, TranscriptOptions{Noise: 0.1, NoiseRoles: []string{"pilot"}}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("unknown noise role error = %v", err)
	}
	// Noise on the proposer only: every noise example is the proposer's, and
	// the checking role gets correction examples with correct labels.
	for name, roles := range map[string][2]string{"sudoku4": {"reasoner", "verifier"}, "sokoban": {"planner", "checker"}} {
		ex, _, err := Transcripts(name, Config{}, seeds, TranscriptOptions{Noise: 0.5, NoiseRoles: []string{roles[0]}, RecordNoise: true})
		if err != nil {
			t.Fatal(err)
		}
		corrections := 0
		for _, x := range ex {
			if !x.Expert && x.Role != roles[0] {
				t.Fatalf("%s: noise on %s outside NoiseRoles", name, x.Role)
			}
			if x.Role == roles[1] && x.Action != "ok" {
				corrections++
			}
		}
		if corrections == 0 {
			t.Fatalf("%s: no %s corrections in noisy-proposer transcripts", name, roles[1])
		}
	}
}

// fuzzEnv steps an environment with the lines of script as actions; a line
// starting with '!' is sent as the wrong role. It checks the invariants that
// must hold whatever the agents say.
// Odd seeds play the single-agent baseline.
func fuzzEnv(t *testing.T, name string, seed int64, script string) {
	cfg := Config{Moves: 2, Single: seed%2 != 0}
	e, err := New(name, cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	bound, _ := MaxObsLen(name, cfg)
	roles := e.Roles()
	next := 0
	for _, line := range strings.Split(script, "\n") {
		role := roles[next]
		if strings.HasPrefix(line, "!") {
			role = "nobody"
			if len(roles) > 1 {
				role = roles[1-next]
			}
		}
		wasDone, turn := e.Done(), e.Turn()
		st := e.Step(role, line)
		if math.IsNaN(st.Team) || math.IsNaN(st.Local) || math.Abs(st.Team) > 2 || math.Abs(st.Local) > 1 {
			t.Fatalf("%s: reward out of range %+v", name, st)
		}
		if wasDone && (st.Valid || st.Team != 0) {
			t.Fatalf("%s: action after done counted: %+v", name, st)
		}
		if e.Turn() < turn || st.Done != e.Done() {
			t.Fatalf("%s: turn went back or Done mismatch", name)
		}
		if role == roles[next] && !wasDone {
			next = (next + 1) % len(roles)
		}
		checkObs(t, e, bound)
		checkObs(t, e.Clone(), bound)
	}
}

var fuzzSeeds = []string{
	"U\nR\nD\nL",
	"ok\nno\nr1c1=1\nr2c2=2",
	"7+5\n12\n12-3\n9",
	"!U\n\x00\xff\n????\nUUUUUUUU",
	"r9c9=9\nok\n1/0\n-\n--1\n99999",
	"",
	"ok\nok\nok\nok\nok\nok\nok\nok\nok\nok\nok\nok\nok\nok",
	"DR\nRD\nLL\nUU\nDD\nRR",
}

func addSeeds(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(int64(i), s)
	}
}

func FuzzStepPlanPath(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, seed int64, script string) { fuzzEnv(t, "planpath", seed, script) })
}

func FuzzStepSudoku4(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, seed int64, script string) { fuzzEnv(t, "sudoku4", seed, script) })
}

func FuzzStepSokoban(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, seed int64, script string) { fuzzEnv(t, "sokoban", seed, script) })
}

func FuzzStepArith(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, seed int64, script string) { fuzzEnv(t, "arith", seed, script) })
}

func TestSingleAgentRewards(t *testing.T) {
	p := planPathFromLayout(t, testGrid, 1, 20)
	p.turnState = newTurnState(Config{Single: true}, planPathRoles, planPathSingleRoles, 20)
	if st := p.Step("planner", "R"); !near(st.Team, 0.09) || !near(st.Local, PathLocalGood) || p.Turn() != 1 {
		t.Fatalf("planpath single step %+v turn %d", st, p.Turn())
	}
	if st := p.Step("tool", "R"); st.Valid || st.Info != "invalid: unknown role" {
		t.Fatalf("tool in single mode: %+v", st)
	}
	if got, want := p.Observe("planner"), "p a01 g44 n:-DL- m:- t:- .A#../..#../...../.#.../....G"; got != want {
		t.Fatalf("single planner obs %q, want %q", got, want)
	}

	s := sudokuFixture(0, 5)
	s.turnState = newTurnState(Config{Single: true}, sudokuRoles, sudokuSingleRoles, 10)
	if st := s.Step("reasoner", "r1c1=2"); !near(st.Team, InvalidPenalty) || !near(st.Local, LocalBad) || s.board[0] != 0 {
		t.Fatalf("sudoku single wrong fill %+v", st)
	}
	if st := s.Step("reasoner", "r1c1=1"); !near(st.Team, FillReward) || !near(st.Local, LocalGood) || s.board[0] != 1 {
		t.Fatalf("sudoku single right fill %+v", st)
	}
	if st := s.Step("reasoner", "zz"); st.Valid || !near(st.Team, InvalidPenalty) {
		t.Fatalf("sudoku single garbage %+v", st)
	}
	if got, want := s.Observe("reasoner"), "r 1234/3.12/2143/4321 v:-"; got != want {
		t.Fatalf("sudoku single obs %q, want %q", got, want)
	}

	k := sokobanFromLayout(t, testRoom)
	k.turnState = newTurnState(Config{Single: true}, sokobanRoles, sokobanSingleRoles, 20)
	k.player = 8
	if st := k.Step("planner", "D"); !near(st.Team, 0.09) || k.box != 20 {
		t.Fatalf("sokoban single push %+v box %d", st, k.box)
	}
	if st := k.Step("planner", "ok"); st.Valid || !near(st.Team, InvalidPenalty) {
		t.Fatalf("sokoban single 'ok' %+v", st)
	}

	a := arithFixture()
	a.turnState = newTurnState(Config{Single: true}, arithRoles, arithSingleRoles, 4)
	if st := a.Step("reasoner", "7+5"); st.Valid || !near(st.Team, InvalidPenalty) || !near(st.Local, LocalBad) {
		t.Fatalf("arith single expression %+v", st)
	}
	if st := a.Step("reasoner", "13"); !st.Valid || !near(st.Team, InvalidPenalty) || st.Local != 0 || a.step != 0 {
		t.Fatalf("arith single wrong number %+v", st)
	}
	if st := a.Step("reasoner", "12"); !near(st.Team, FillReward) || !near(st.Local, LocalGood) || a.step != 1 {
		t.Fatalf("arith single right number %+v", st)
	}
	if got, want := a.Observe("reasoner"), "r2 ann has 7 pens, buys 5, then gives away 3. how many? t:12"; got != want {
		t.Fatalf("arith single obs %q, want %q", got, want)
	}
	if st := a.Step("reasoner", "9"); !near(st.Team, GoalReward) || !a.Success() {
		t.Fatalf("arith single answer %+v", st)
	}
}

// TestOneStepRewardRanksOptimalMoves checks, over many states of planpath
// and sokoban, that the executing role's one-step reward team + local
// (AT-GRPO's α = 1) ranks every shortest-path move above every other move,
// as PathLocalGood promises.
func TestOneStepRewardRanksOptimalMoves(t *testing.T) {
	for _, name := range []string{"planpath", "sokoban"} {
		checked := 0
		for seed := int64(0); seed < 150; seed++ {
			e, _ := New(name, Config{}, seed)
			ex := e.(Expert)
			for !e.Done() {
				roles := e.Roles()
				e.Step(roles[0], ex.ExpertAction(roles[0]))
				exec := roles[1]
				best := ex.ExpertAction(exec)
				if best == "ok" {
					best = ex.ExpertAction(roles[0]) // the proposal it accepts
				}
				minOpt, maxOther := math.Inf(1), math.Inf(-1)
				for _, m := range []string{"U", "D", "L", "R"} {
					c := e.Clone()
					st := c.Step(exec, m)
					r := st.Team + st.Local
					if st.Local > 0 {
						minOpt = min(minOpt, r)
					} else {
						maxOther = max(maxOther, r)
					}
				}
				if minOpt <= maxOther {
					t.Fatalf("%s seed %d: an optimal move scores %.2f, another move %.2f (obs %q)", name, seed, minOpt, maxOther, e.Observe(exec))
				}
				checked++
				e.Step(exec, best)
			}
		}
		t.Logf("%s: %d states checked", name, checked)
	}
}
