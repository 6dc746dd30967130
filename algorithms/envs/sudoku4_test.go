package envs

import (
	"testing"
)

// validSudoku4 checks rows, columns and boxes of a full grid independently
// of sudokuOK.
func validSudoku4(g [16]byte) bool {
	for i := 0; i < 4; i++ {
		var row, col, box [5]bool
		for j := 0; j < 4; j++ {
			r := g[i*4+j]
			c := g[j*4+i]
			b := g[(i/2*2+j/2)*4+i%2*2+j%2]
			if r < 1 || r > 4 || c < 1 || c > 4 || b < 1 || b > 4 || row[r] || col[c] || box[b] {
				return false
			}
			row[r], col[c], box[b] = true, true, true
		}
	}
	return true
}

// bruteSolutions counts completions by trying every value in every hole
// (4^holes combinations), independently of the backtracking solver.
func bruteSolutions(board [16]byte) int {
	var holes []int
	for i, v := range board {
		if v == 0 {
			holes = append(holes, i)
		}
	}
	n := 0
	total := 1 << (2 * len(holes))
	for code := 0; code < total; code++ {
		g := board
		x := code
		for _, h := range holes {
			g[h] = byte(x%4) + 1
			x /= 4
		}
		if validSudoku4(g) {
			n++
		}
	}
	return n
}

func TestSudoku4UniqueSolutions(t *testing.T) {
	for _, holes := range []int{4, 8, 10} {
		for seed := int64(0); seed < 40; seed++ {
			e, err := New("sudoku4", Config{Holes: holes}, seed)
			if err != nil {
				t.Fatal(err)
			}
			s := e.(*sudoku4)
			if !validSudoku4(s.sol) {
				t.Fatalf("seed %d: solution %v is not a sudoku", seed, s.sol)
			}
			empty := 0
			for i, v := range s.board {
				if v == 0 {
					empty++
				} else if v != s.sol[i] {
					t.Fatalf("seed %d: clue differs from solution", seed)
				}
			}
			if empty != holes {
				t.Fatalf("seed %d: %d holes, want %d", seed, empty, holes)
			}
			b := s.board
			if countSolutions(&b, 5) != 1 || b != s.board {
				t.Fatalf("seed %d: solver count != 1 or board modified", seed)
			}
			if holes <= 8 && bruteSolutions(s.board) != 1 {
				t.Fatalf("seed %d: brute force finds %d solutions", seed, bruteSolutions(s.board))
			}
		}
	}
	// The solver does count several solutions when they exist.
	var empty [16]byte
	if n := countSolutions(&empty, 1000); n != 288 {
		t.Fatalf("empty 4x4 grid has %d solutions, want 288", n)
	}
}

func TestParseFill(t *testing.T) {
	good := map[string]fill{"r1c1=1": {0, 1}, "r2c1=4": {4, 4}, " R4C4=2 ": {15, 2}}
	for in, want := range good {
		if got, ok := parseFill(in); !ok || got != want {
			t.Errorf("parseFill(%q) = %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "r0c1=1", "r1c5=1", "r1c1=5", "r1c1=0", "r1c1-1", "r1c1=12", "x1c1=1", "ok"} {
		if _, ok := parseFill(in); ok {
			t.Errorf("parseFill(%q) accepted", in)
		}
	}
	if s := (fill{cell: 6, val: 3}).String(); s != "r2c3=3" {
		t.Fatalf("fill string %q", s)
	}
}

// sudokuFixture: solution 1234/3412/2143/4321 with the given cells empty.
func sudokuFixture(emptyCells ...int) *sudoku4 {
	sol := [16]byte{1, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 1}
	board := sol
	for _, c := range emptyCells {
		board[c] = 0
	}
	return &sudoku4{turnState: turnState{roles: sudokuRoles, budget: 10}, board: board, sol: sol, holes: len(emptyCells), propText: "-", verdict: "-"}
}

func TestSudoku4RewardTable(t *testing.T) {
	cases := []struct {
		name                 string
		prop, answer         string
		propLocal            float64
		team, local          float64
		valid, filled, solve bool
	}{
		{"correct proposal accepted", "r1c1=1", "ok", LocalGood, FillReward, LocalGood, true, true, false},
		{"wrong proposal accepted", "r1c1=2", "ok", LocalBad, InvalidPenalty, LocalBad, true, false, false},
		{"wrong proposal rejected", "r1c1=2", "no", LocalBad, 0, LocalGood, true, false, false},
		{"correct proposal rejected", "r1c1=1", "no", LocalGood, 0, LocalBad, true, false, false},
		{"wrong proposal corrected", "r1c1=3", "r1c1=1", LocalBad, FillReward, LocalGood, true, true, false},
		{"wrong correction", "r1c1=3", "r1c1=4", LocalBad, InvalidPenalty, LocalBad, true, false, false},
		{"filled cell proposed, accepted", "r1c2=2", "ok", LocalBad, InvalidPenalty, LocalBad, false, false, false},
		{"garbage proposal accepted", "hello", "ok", LocalBad, InvalidPenalty, LocalBad, false, false, false},
		{"garbage proposal rejected", "hello", "no", LocalBad, 0, LocalGood, true, false, false},
		{"garbage answer", "r1c1=1", "yes!", LocalGood, InvalidPenalty, LocalBad, false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := sudokuFixture(0, 5)
			ps := s.Step("reasoner", c.prop)
			if !near(ps.Local, c.propLocal) || ps.Team != 0 {
				t.Fatalf("proposal step %+v, want local %.2f team 0", ps, c.propLocal)
			}
			st := s.Step("verifier", c.answer)
			if !near(st.Team, c.team) || !near(st.Local, c.local) || st.Valid != c.valid {
				t.Fatalf("answer step %+v, want team %.2f local %.2f valid %v", st, c.team, c.local, c.valid)
			}
			if (s.board[0] == 1) != c.filled {
				t.Fatalf("cell filled = %v, want %v", s.board[0] == 1, c.filled)
			}
			if s.Done() || s.Turn() != 1 {
				t.Fatalf("done %v turn %d", s.Done(), s.Turn())
			}
		})
	}
	// The last correct fill solves: FillReward + GoalReward.
	s := sudokuFixture(5)
	s.Step("reasoner", "r2c2=4")
	st := s.Step("verifier", "ok")
	if !near(st.Team, FillReward+GoalReward) || !st.Done || !s.Success() {
		t.Fatalf("solving step %+v success %v", st, s.Success())
	}
}

func TestSudoku4ObservationAndExpert(t *testing.T) {
	s := sudokuFixture(0, 1, 5)
	if got, want := s.Observe("reasoner"), "r ..34/3.12/2143/4321 v:-"; got != want {
		t.Fatalf("reasoner obs %q, want %q", got, want)
	}
	// Cells 0 and 1 each have 2 candidates given the board? Cell 0: row has
	// 3,4; col has 3,2,4: candidates {1}. Expert picks the single.
	if a := s.ExpertAction("reasoner"); a != "r1c1=1" {
		t.Fatalf("expert reasoner %q, want r1c1=1", a)
	}
	s.Step("reasoner", "r1c2=1")
	if got, want := s.Observe("verifier"), "v ..34/3.12/2143/4321 r:r1c2=1"; got != want {
		t.Fatalf("verifier obs %q, want %q", got, want)
	}
	if a := s.ExpertAction("verifier"); a != "r1c1=1" {
		t.Fatalf("expert verifier correction %q, want r1c1=1", a)
	}
	s.Step("verifier", "no")
	if got, want := s.Observe("reasoner"), "r ..34/3.12/2143/4321 v:no"; got != want {
		t.Fatalf("reasoner obs %q, want %q", got, want)
	}
}
