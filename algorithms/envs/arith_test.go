package envs

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseExpr(t *testing.T) {
	good := []struct {
		in, canon string
		val       int
	}{
		{"7+5", "7+5", 12},
		{" 7 + 5 ", "7+5", 12},
		{"12-3*2", "12-3*2", 6},
		{"12/4*3", "12/4*3", 9},
		{"2*3+4*5", "2*3+4*5", 26},
		{"10-2-3", "10-2-3", 5},
		{"9", "9", 9},
		{"0-7", "0-7", -7},
		{"9999*9999*99", "9999*9999*99", 9999 * 9999 * 99},
	}
	for _, g := range good {
		canon, v, ok := parseExpr(g.in)
		if !ok || canon != g.canon || v != g.val {
			t.Errorf("parseExpr(%q) = %q %d %v, want %q %d", g.in, canon, v, ok, g.canon, g.val)
		}
	}
	for _, in := range []string{"", "+1", "1+", "1++2", "8/3", "8/0", "12345", "(1+2)", "1.5", "a+b", "1+2+3+4+5+6+7", "-3"} {
		if _, _, ok := parseExpr(in); ok {
			t.Errorf("parseExpr(%q) accepted", in)
		}
	}
}

// solveText computes a problem's answer from its words alone.
func solveText(t *testing.T, text string) int {
	t.Helper()
	body, ok := strings.CutSuffix(text, ". how many?")
	if !ok {
		t.Fatalf("no question in %q", text)
	}
	parts := strings.Split(body, ", ")
	f := strings.Fields(parts[0]) // name has N items
	v, err := strconv.Atoi(f[2])
	if err != nil || f[1] != "has" {
		t.Fatalf("bad opening %q", parts[0])
	}
	for _, p := range parts[1:] {
		p = strings.TrimPrefix(p, "then ")
		words := strings.Fields(p)
		n, _ := strconv.Atoi(words[len(words)-1])
		switch {
		case p == "doubles them":
			v *= 2
		case p == "triples them":
			v *= 3
		case p == "keeps half":
			v /= 2
		case p == "keeps a third":
			v /= 3
		case p == "keeps a quarter":
			v /= 4
		case strings.HasPrefix(p, "buys "), strings.HasPrefix(p, "finds "), strings.HasPrefix(p, "gets ") && strings.HasSuffix(p, " more"):
			if strings.HasPrefix(p, "gets ") {
				n, _ = strconv.Atoi(words[1])
			}
			v += n
		case strings.HasPrefix(p, "gives away "), strings.HasPrefix(p, "loses "), strings.HasPrefix(p, "sells "):
			v -= n
		default:
			t.Fatalf("unknown phrase %q in %q", p, text)
		}
	}
	return v
}

func TestArithAnswersMatchText(t *testing.T) {
	steps := map[int]int{}
	for seed := int64(0); seed < 500; seed++ {
		e, err := New("arith", Config{}, seed)
		if err != nil {
			t.Fatal(err)
		}
		a := e.(*arith)
		if got := solveText(t, a.Text()); got != a.Answer() {
			t.Fatalf("seed %d: %q answers %d, env says %d", seed, a.Text(), got, a.Answer())
		}
		steps[len(a.ops)]++
		if !arithDistinctAnswer(a.start, a.vals) {
			t.Fatalf("seed %d: the answer %d appears before the last step: start %d, %v", seed, a.Answer(), a.start, a.vals)
		}
		v := a.start
		for i, o := range a.ops {
			v = o.apply(v)
			if v != a.vals[i] || v < 1 || v > 60 {
				t.Fatalf("seed %d: step %d value %d (recorded %d)", seed, i, v, a.vals[i])
			}
		}
	}
	if steps[2] < 150 || steps[3] < 150 || len(steps) != 2 {
		t.Fatalf("step counts %v, want a mix of 2 and 3", steps)
	}
	for k := 1; k <= 4; k++ {
		e, _ := New("arith", Config{Steps: k}, 1)
		if n := len(e.(*arith).ops); n != k {
			t.Fatalf("Steps %d gave %d operations", k, n)
		}
	}
}

// arithFixture: 7 +5 -3 = 9.
func arithFixture() *arith {
	return &arith{
		turnState: turnState{roles: arithRoles, budget: 4},
		text:      "ann has 7 pens, buys 5, then gives away 3. how many?",
		start:     7, ops: []arithOp{{'+', 5}, {'-', 3}}, vals: []int{12, 9},
		exprText: "-", toolText: "-",
	}
}

func TestArithRewardTable(t *testing.T) {
	cases := []struct {
		name            string
		expr, tool      string
		exprLocal       float64
		team, toolLocal float64
		toolValid       bool
		wantStep        int
		success         bool
	}{
		{"correct step", "7+5", "12", LocalGood, FillReward, LocalGood, true, 1, false},
		{"bare number step", "12", "12", LocalGood, FillReward, LocalGood, true, 1, false},
		{"whole answer at once", "7+5-3", "9", LocalGood, GoalReward, LocalGood, true, 1, true},
		{"tool miscalculates", "7+5", "13", LocalGood, InvalidPenalty, LocalBad, true, 0, false},
		{"wrong step, right arithmetic", "7-5", "2", 0, InvalidPenalty, LocalGood, true, 0, false},
		{"malformed expression, tool flags it", "7+", "?", LocalBad, InvalidPenalty, LocalGood, true, 0, false},
		{"malformed expression, tool guesses", "seven", "12", LocalBad, InvalidPenalty, LocalBad, true, 0, false},
		{"tool garbage", "7+5", "twelve", LocalGood, InvalidPenalty, LocalBad, false, 0, false},
		{"tool says ? to a good expression", "7+5", "?", LocalGood, InvalidPenalty, LocalBad, true, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := arithFixture()
			rs := a.Step("reasoner", c.expr)
			if !near(rs.Local, c.exprLocal) || rs.Team != 0 {
				t.Fatalf("reasoner step %+v, want local %.2f", rs, c.exprLocal)
			}
			st := a.Step("tool", c.tool)
			if !near(st.Team, c.team) || !near(st.Local, c.toolLocal) || st.Valid != c.toolValid ||
				a.Success() != c.success || (!c.success && a.step != c.wantStep) {
				t.Fatalf("tool step %+v step %d success %v", st, a.step, a.Success())
			}
		})
	}
	// Two correct rounds solve it: 0.1 then 1.
	a := arithFixture()
	if got, want := a.Observe("reasoner"), "r1 ann has 7 pens, buys 5, then gives away 3. how many? t:-"; got != want {
		t.Fatalf("reasoner obs %q, want %q", got, want)
	}
	a.Step("reasoner", "7+5")
	if got, want := a.Observe("tool"), "t 7+5="; got != want {
		t.Fatalf("tool obs %q, want %q", got, want)
	}
	a.Step("tool", "12")
	if got, want := a.Observe("reasoner"), "r2 ann has 7 pens, buys 5, then gives away 3. how many? t:7+5=12"; got != want {
		t.Fatalf("reasoner obs %q, want %q", got, want)
	}
	if e := a.ExpertAction("reasoner"); e != "12-3" {
		t.Fatalf("expert %q, want 12-3", e)
	}
	a.Step("reasoner", "12-3")
	st := a.Step("tool", "9")
	if !near(st.Team, GoalReward) || !st.Done || !a.Success() || a.Turn() != 2 {
		t.Fatalf("final step %+v success %v turn %d", st, a.Success(), a.Turn())
	}
}
