package envs

import (
	"fmt"
	"strings"
)

// Sudoku4: 4×4 Sudoku (rows, columns and 2×2 boxes hold 1..4) with a unique
// solution. A random full grid is built by randomised backtracking, then
// clues are removed in random order, each removal kept only while a solver
// still finds exactly one solution, until Holes cells are empty.
//
// Two roles act each round, in order:
//
//   - "reasoner" proposes one fill "r<row>c<col>=<value>" (1-based, e.g.
//     "r2c1=4"). It changes nothing.
//   - "verifier" sees the proposal and answers "ok" (apply it), "no" (reject
//     it) or its own fill (applied instead: a correction).
//
// The applied fill is checked against the unique solution: a correct fill
// is written and earns team FillReward (+0.1); a wrong value, a filled cell
// or an unparseable answer is not written and costs InvalidPenalty (−0.1).
// Solving the grid earns GoalReward (+1) and ends the episode; so does
// spending TurnBudget rounds (default Holes+4). "no" earns no team reward.
//
// Local rewards: reasoner LocalGood for a correct proposal, LocalBad for a
// wrong, illegal or unparseable one. Verifier LocalGood when its answer
// leads to a correct fill or rightly rejects a wrong proposal, LocalBad
// otherwise.
//
// Observations ('.' empty, rows joined by '/'):
//
//	reasoner: "r 1.3./.4../..2./3... v:ok"     (v: the verifier's last answer)
//	verifier: "v 1.3./.4../..2./3... r:r1c2=2" (r: the current proposal)
//
// Before a role has acted its slot shows "-", an unparseable output "?".
//
// Single-agent baseline (Config.Single): the reasoner acts alone and its
// fill is applied directly, scored like an accepted proposal; v: always
// shows "-".

type sudoku4 struct {
	turnState
	board    [16]byte // 0 empty, else 1..4
	sol      [16]byte
	holes    int
	prop     fill
	propOK   bool   // prop parsed
	propText string // canonical proposal, "-" or "?"
	verdict  string // canonical last verifier answer, "-" or "?"
}

// fill is one cell assignment: cell index 0..15 and value 1..4.
type fill struct {
	cell int
	val  byte
}

func (f fill) String() string {
	return fmt.Sprintf("r%dc%d=%d", f.cell/4+1, f.cell%4+1, f.val)
}

var (
	sudokuRoles       = []string{"reasoner", "verifier"}
	sudokuSingleRoles = []string{"reasoner"}
)

// parseFill reads "r<1-4>c<1-4>=<1-4>" (case and surrounding space ignored).
func parseFill(action string) (fill, bool) {
	s := strings.ToLower(strings.TrimSpace(action))
	if len(s) != 6 || s[0] != 'r' || s[2] != 'c' || s[4] != '=' {
		return fill{}, false
	}
	r, c, v := s[1]-'1', s[3]-'1', s[5]-'0'
	if r > 3 || c > 3 || v < 1 || v > 4 {
		return fill{}, false
	}
	return fill{cell: int(r)*4 + int(c), val: v}, true
}

func newSudoku4(cfg Config, seed int64) (Env, error) {
	holes := cfg.Holes
	if holes == 0 {
		holes = 8
	}
	if holes < 1 || holes > 11 {
		return nil, fmt.Errorf("%w: sudoku4 holes %d outside 1..11", ErrBadConfig, holes)
	}
	budget := cfg.TurnBudget
	if budget == 0 {
		budget = holes + 4
	}
	rng := newRand(seed, 2)
	for attempt := 0; attempt < 200; attempt++ {
		var sol [16]byte
		if !randomFill(&sol, 0, rng) {
			continue // cannot happen for an empty grid; kept for safety
		}
		board := sol
		removed := 0
		for _, cell := range rng.Perm(16) {
			if removed == holes {
				break
			}
			v := board[cell]
			board[cell] = 0
			if countSolutions(&board, 2) == 1 {
				removed++
			} else {
				board[cell] = v
			}
		}
		if removed < holes {
			continue
		}
		return &sudoku4{
			turnState: newTurnState(cfg, sudokuRoles, sudokuSingleRoles, budget),
			board:     board, sol: sol, holes: holes,
			propText: "-", verdict: "-",
		}, nil
	}
	return nil, fmt.Errorf("%w: sudoku4 with %d holes and a unique solution", ErrGenerate, holes)
}

// sudokuOK reports whether v may go in cell given the other cells.
func sudokuOK(b *[16]byte, cell int, v byte) bool {
	r, c := cell/4, cell%4
	br, bc := r/2*2, c/2*2
	for i := 0; i < 4; i++ {
		if b[r*4+i] == v || b[i*4+c] == v || b[(br+i/2)*4+bc+i%2] == v {
			return false
		}
	}
	return true
}

// randomFill completes b from cell onward with random value order.
func randomFill(b *[16]byte, cell int, rng randSource) bool {
	if cell == 16 {
		return true
	}
	order := [4]byte{1, 2, 3, 4}
	for i := 3; i > 0; i-- {
		j := rng.IntN(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	for _, v := range order {
		if sudokuOK(b, cell, v) {
			b[cell] = v
			if randomFill(b, cell+1, rng) {
				return true
			}
			b[cell] = 0
		}
	}
	return false
}

// countSolutions counts completions of b, stopping at limit. b is restored.
func countSolutions(b *[16]byte, limit int) int {
	cell := -1
	for i, v := range b {
		if v == 0 {
			cell = i
			break
		}
	}
	if cell < 0 {
		return 1
	}
	n := 0
	for v := byte(1); v <= 4 && n < limit; v++ {
		if sudokuOK(b, cell, v) {
			b[cell] = v
			n += countSolutions(b, limit-n)
			b[cell] = 0
		}
	}
	return n
}

func (s *sudoku4) Name() string    { return "sudoku4" }
func (s *sudoku4) Roles() []string { return s.roles }
func (s *sudoku4) Turn() int       { return s.rounds }
func (s *sudoku4) Done() bool      { return s.done }
func (s *sudoku4) Success() bool   { return s.success }

// Clone copies the episode; every field is a value.
func (s *sudoku4) Clone() Env {
	q := *s
	return &q
}

func (s *sudoku4) boardString() string {
	b := make([]byte, 0, 19)
	for i, v := range s.board {
		if i > 0 && i%4 == 0 {
			b = append(b, '/')
		}
		if v == 0 {
			b = append(b, '.')
		} else {
			b = append(b, '0'+v)
		}
	}
	return string(b)
}

// Observe renders the role's prompt (format in the file comment).
func (s *sudoku4) Observe(role string) string {
	switch role {
	case "reasoner":
		return "r " + s.boardString() + " v:" + s.verdict
	case "verifier":
		return "v " + s.boardString() + " r:" + s.propText
	}
	return "? " + s.boardString()
}

// correct reports whether f fills an empty cell with its solution value.
func (s *sudoku4) correct(f fill) bool {
	return s.board[f.cell] == 0 && s.sol[f.cell] == f.val
}

// Step applies the acting role's action (see the file comment for rewards).
func (s *sudoku4) Step(role, action string) Step {
	if why := s.check(role); why != "" {
		return s.refuse(why)
	}
	if s.single {
		// Alone, the reasoner's fill is applied directly; v: stays "-".
		st := Step{Valid: false, Team: InvalidPenalty, Local: LocalBad, Info: "invalid: unparseable fill"}
		if f, ok := parseFill(action); ok {
			st = s.apply(f)
		}
		s.advance()
		st.Done = s.done
		return st
	}
	if role == "reasoner" {
		f, ok := parseFill(action)
		s.prop, s.propOK = f, ok
		st := Step{Valid: ok, Local: LocalBad, Info: "proposed"}
		switch {
		case !ok:
			s.propText = "?"
			st.Info = "invalid: unparseable fill"
		case s.board[f.cell] != 0:
			s.propText = f.String()
			st.Valid, st.Info = false, "invalid: cell already filled"
		default:
			s.propText = f.String()
			if s.correct(f) {
				st.Local = LocalGood
			}
		}
		s.advance()
		st.Done = s.done
		return st
	}

	propGood := s.propOK && s.correct(s.prop)
	act := strings.ToLower(strings.TrimSpace(action))
	var st Step
	switch act {
	case "no":
		s.verdict = "no"
		st = Step{Valid: true, Local: LocalBad, Info: "rejected"}
		if !propGood {
			st.Local = LocalGood
		}
	case "ok":
		s.verdict = "ok"
		if !s.propOK {
			st = Step{Valid: false, Team: InvalidPenalty, Local: LocalBad, Info: "invalid: accepted an unparseable proposal"}
		} else {
			st = s.apply(s.prop)
		}
	default:
		f, ok := parseFill(act)
		if !ok {
			s.verdict = "?"
			st = Step{Valid: false, Team: InvalidPenalty, Local: LocalBad, Info: "invalid: unparseable answer"}
		} else {
			s.verdict = f.String()
			st = s.apply(f)
		}
	}
	s.advance()
	st.Done = s.done
	return st
}

// apply writes a fill if it is correct and scores it.
func (s *sudoku4) apply(f fill) Step {
	if s.board[f.cell] != 0 {
		return Step{Valid: false, Team: InvalidPenalty, Local: LocalBad, Info: "invalid: cell already filled"}
	}
	if s.sol[f.cell] != f.val {
		return Step{Valid: true, Team: InvalidPenalty, Local: LocalBad, Info: "wrong value"}
	}
	s.board[f.cell] = f.val
	st := Step{Valid: true, Team: FillReward, Local: LocalGood, Info: "filled"}
	if s.board == s.sol {
		st.Team += GoalReward
		st.Info = "solved"
		s.success, s.done = true, true
	}
	return st
}

// ExpertAction: the reasoner fills the most constrained empty cell (fewest
// candidates, first in row-major order) with its solution value; the
// verifier says "ok" to a correct proposal and otherwise answers with the
// reasoner's expert fill (a correction).
func (s *sudoku4) ExpertAction(role string) string {
	if role == "verifier" && s.propOK && s.correct(s.prop) {
		return "ok"
	}
	best, bestN := -1, 5
	for cell, v := range s.board {
		if v != 0 {
			continue
		}
		n := 0
		for c := byte(1); c <= 4; c++ {
			if sudokuOK(&s.board, cell, c) {
				n++
			}
		}
		if n < bestN {
			best, bestN = cell, n
		}
	}
	if best < 0 {
		return "ok" // solved: nothing left to fill
	}
	return fill{cell: best, val: s.sol[best]}.String()
}

// Solution returns the unique solution, row-major, values 1..4.
func (s *sudoku4) Solution() [16]byte { return s.sol }

// randomAction is a plausible but arbitrary action for noisy transcripts.
func (s *sudoku4) randomAction(role string, r randSource) string {
	if role == "verifier" && r.IntN(3) == 0 {
		return []string{"ok", "no"}[r.IntN(2)]
	}
	return fill{cell: r.IntN(16), val: byte(1 + r.IntN(4))}.String()
}

// OptimalRounds is the number of holes: one correct fill per round.
func (s *sudoku4) OptimalRounds() int { return s.holes }
