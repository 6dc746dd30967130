package envs

import (
	"fmt"
	"strconv"
	"strings"
)

// Arith: short multi-step arithmetic word problems with exact integer
// answers, e.g. "ann has 7 pens, buys 5, then gives away 3. how many?"
// (start 2..20, Steps operations: add 1..12, subtract, double/triple, keep
// a half/third/quarter; every intermediate value is a whole number in
// 1..60).
//
// Two roles act each round, in order:
//
//   - "reasoner" writes the expression for the next step, e.g. "7+5" then
//     "12-3" (integers of 1..4 digits and + - * /, standard precedence,
//     at most 12 bytes; a bare number is allowed). It changes nothing.
//   - "tool" plays a calculator/verifier: it sees only the expression and
//     answers its value ("12"), or "?" if the expression is malformed.
//
// Team reward on the tool's step: when the expression is well formed and the
// tool's value equals it, the value is checked against the problem: the
// current step's result advances the solution and earns FillReward (+0.1),
// the final answer (last step, or reached early) earns GoalReward (+1) and
// ends the episode with success; anything else (wrong step, wrong
// calculation, malformed expression) costs InvalidPenalty (−0.1). The
// episode also ends after TurnBudget rounds (default Steps+2).
//
// Local rewards: reasoner LocalGood when its expression's value is the
// current step's result or the final answer, 0 when well formed but wrong,
// LocalBad when malformed; tool LocalGood when its answer is the
// expression's true value ("?" for a malformed one), LocalBad otherwise.
//
// Observations:
//
//	reasoner: "r2 ann has 7 pens, buys 5, then gives away 3. how many? t:7+5=12"
//	tool:     "t 12-3="
//
// r2 = working on step 2; t: shows the last expression and the tool's
// answer ("-" before the first round, "?" for unparseable parts).
//
// Single-agent baseline (Config.Single): the reasoner alone answers each
// step's result as a bare number ("12", then "9"), doing the tool's
// arithmetic itself; t: shows its last number.

// maxExprLen is the longest accepted expression; the expert's are at most
// 5 bytes ("60-12"), the slack lets a reasoner fold steps together.
const maxExprLen = 12

// arithMaxObs bounds an arith observation for problems of k steps: "r1 " +
// text (opening ≤ 17, each ", phrase" ≤ 17, "then " 5, ". how many?" 11) +
// " t:" + expression + "=" + answer (≤ 5): 108 bytes for 3 steps, 125 for 4.
func arithMaxObs(k int) int { return 3 + 17 + 17*k + 5 + 11 + 3 + maxExprLen + 1 + 5 }

type arith struct {
	turnState
	text     string
	start    int
	ops      []arithOp // immutable after generation: shared by clones
	vals     []int     // vals[i] = result after step i; immutable
	step     int       // index of the step being solved
	exprText string    // canonical last expression, "-" or "?"
	exprOK   bool
	exprVal  int
	toolText string // canonical last tool answer, "-" or "?"
}

// arithOp is one operation of a problem.
type arithOp struct {
	op byte // '+', '-', '*', '/'
	n  int
}

var (
	arithRoles       = []string{"reasoner", "tool"}
	arithSingleRoles = []string{"reasoner"}
)

var (
	arithNames = []string{"ann", "bob", "cat", "dan", "eve", "kim", "lee", "max", "sam", "tom", "zoe"}
	arithItems = []string{"apples", "pens", "cards", "coins", "eggs", "books", "shells", "stamps"}
)

func newArith(cfg Config, seed int64) (Env, error) {
	if cfg.Steps < 0 || cfg.Steps > 4 {
		return nil, fmt.Errorf("%w: arith steps %d outside 1..4", ErrBadConfig, cfg.Steps)
	}
	rng := newRand(seed, 4)
	k := cfg.Steps
	if k == 0 {
		k = 2 + rng.IntN(2)
	}
	budget := cfg.TurnBudget
	if budget == 0 {
		budget = k + 2
	}
	var (
		start   int
		ops     []arithOp
		vals    []int
		phrases []string
	)
	// Redraw problems whose start or an intermediate value equals the final
	// answer: a team could "solve" them without doing every step.
	for {
		start, ops, vals, phrases = arithProblem(rng, k)
		if arithDistinctAnswer(start, vals) {
			break
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s has %d %s", arithNames[rng.IntN(len(arithNames))], start, arithItems[rng.IntN(len(arithItems))])
	for i, p := range phrases {
		b.WriteString(", ")
		if i == len(phrases)-1 && i > 0 {
			b.WriteString("then ")
		}
		b.WriteString(p)
	}
	b.WriteString(". how many?")
	return &arith{
		turnState: newTurnState(cfg, arithRoles, arithSingleRoles, budget),
		text:      b.String(), start: start, ops: ops, vals: vals,
		exprText: "-", toolText: "-",
	}, nil
}

func (o arithOp) apply(v int) int {
	switch o.op {
	case '+':
		return v + o.n
	case '-':
		return v - o.n
	case '*':
		return v * o.n
	}
	return v / o.n
}

func (a *arith) Name() string    { return "arith" }
func (a *arith) Roles() []string { return a.roles }
func (a *arith) Turn() int       { return a.rounds }
func (a *arith) Done() bool      { return a.done }
func (a *arith) Success() bool   { return a.success }

// Clone copies the mutable state; ops and vals are never mutated.
func (a *arith) Clone() Env {
	q := *a
	return &q
}

// Answer is the problem's exact final answer.
func (a *arith) Answer() int { return a.vals[len(a.vals)-1] }

// Text is the word problem.
func (a *arith) Text() string { return a.text }

// Observe renders the role's prompt (format in the file comment).
func (a *arith) Observe(role string) string {
	switch role {
	case "reasoner":
		return "r" + string(digit(min(a.step+1, 9))) + " " + a.text + " t:" + a.lastRound()
	case "tool":
		return "t " + a.exprText + "="
	}
	return "? " + a.text
}

// lastRound is "expr=value" of the last completed round (single agent: the
// last number answered), or "-".
func (a *arith) lastRound() string {
	if a.single {
		return a.exprText
	}
	if a.toolText == "-" {
		return "-"
	}
	return a.exprText + "=" + a.toolText
}

// goodValue reports whether v is the current step's result or the answer.
func (a *arith) goodValue(v int) bool {
	return v == a.vals[a.step] || v == a.Answer()
}

// Step applies the acting role's action (see the file comment for rewards).
func (a *arith) Step(role, action string) Step {
	if why := a.check(role); why != "" {
		return a.refuse(why)
	}
	if a.single {
		return a.stepSingle(action)
	}
	if role == "reasoner" {
		expr, val, ok := parseExpr(action)
		a.exprOK, a.exprVal = ok, val
		st := Step{Valid: ok, Info: "wrote expression"}
		switch {
		case !ok:
			a.exprText = "?"
			st.Local, st.Info = LocalBad, "invalid: malformed expression"
		case a.goodValue(val):
			a.exprText = expr
			st.Local = LocalGood
		default:
			a.exprText = expr
		}
		a.toolText = "-"
		a.advance()
		st.Done = a.done
		return st
	}

	ans := strings.TrimSpace(action)
	var st Step
	if ans == "?" {
		a.toolText = "?"
		st = Step{Valid: true, Team: InvalidPenalty, Local: LocalBad, Info: "tool: malformed"}
		if !a.exprOK {
			st.Local = LocalGood
		}
	} else if v, ok := parseInt(ans); !ok {
		a.toolText = "?"
		st = Step{Valid: false, Team: InvalidPenalty, Local: LocalBad, Info: "invalid: unparseable answer"}
	} else {
		a.toolText = strconv.Itoa(v)
		st = Step{Valid: true, Team: InvalidPenalty, Local: LocalBad, Info: "wrong"}
		if a.exprOK && v == a.exprVal {
			st.Local = LocalGood
			switch {
			case v == a.Answer():
				a.step = len(a.vals) - 1
				st.Team, st.Info = GoalReward, "solved"
				a.success, a.done = true, true
			case v == a.vals[a.step]:
				a.step++
				st.Team, st.Info = FillReward, "step done"
			default:
				st.Info = "wrong step"
			}
		}
	}
	a.advance()
	st.Done = a.done
	return st
}

// stepSingle is the single-agent baseline's step: with no tool, the
// reasoner answers each step's result as a bare number (doing the tool's
// arithmetic itself). A correct step earns FillReward, the final answer
// GoalReward; a wrong number costs InvalidPenalty (local 0), anything that
// is not a bare number InvalidPenalty and LocalBad.
func (a *arith) stepSingle(action string) Step {
	st := Step{Valid: false, Team: InvalidPenalty, Local: LocalBad, Info: "invalid: not a number"}
	if v, ok := parseInt(strings.TrimSpace(action)); ok {
		a.exprText = strconv.Itoa(v)
		st = Step{Valid: true, Team: InvalidPenalty, Info: "wrong"}
		switch {
		case v == a.Answer():
			a.step = len(a.vals) - 1
			st.Team, st.Local, st.Info = GoalReward, LocalGood, "solved"
			a.success, a.done = true, true
		case v == a.vals[a.step]:
			a.step++
			st.Team, st.Local, st.Info = FillReward, LocalGood, "step done"
		}
	} else {
		a.exprText = "?"
	}
	a.advance()
	st.Done = a.done
	return st
}

// ExpertAction: the reasoner writes "<previous result><op><operand>" for the
// current step (the first step starts from the problem's number); the tool
// answers the expression's value, or "?" if it is malformed.
func (a *arith) ExpertAction(role string) string {
	if role == "tool" {
		if !a.exprOK {
			return "?"
		}
		return strconv.Itoa(a.exprVal)
	}
	if a.single {
		return strconv.Itoa(a.vals[a.step])
	}
	prev := a.start
	if a.step > 0 {
		prev = a.vals[a.step-1]
	}
	o := a.ops[min(a.step, len(a.ops)-1)]
	return strconv.Itoa(prev) + string(o.op) + strconv.Itoa(o.n)
}

// randomAction is a plausible but arbitrary action for noisy transcripts.
func (a *arith) randomAction(role string, r randSource) string {
	if role == "tool" || a.single {
		return strconv.Itoa(r.IntN(61))
	}
	return strconv.Itoa(1+r.IntN(30)) + string("+-*/"[r.IntN(4)]) + strconv.Itoa(1+r.IntN(12))
}

// parseInt reads an optional '-' and 1..4 digits.
func parseInt(s string) (int, bool) {
	if len(s) == 0 || len(s) > 5 {
		return 0, false
	}
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 4 {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// parseExpr reads an expression of integers (1..4 digits) joined by
// + - * / with the usual precedence, spaces ignored. Division must be exact
// and by non-zero. It returns the canonical text (spaces removed) and value.
func parseExpr(action string) (string, int, bool) {
	s := strings.ReplaceAll(strings.TrimSpace(action), " ", "")
	if len(s) == 0 || len(s) > maxExprLen {
		return "", 0, false
	}
	var nums []int
	var ops []byte
	i := 0
	for {
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == i || j-i > 4 {
			return "", 0, false
		}
		n, _ := strconv.Atoi(s[i:j])
		nums = append(nums, n)
		if j == len(s) {
			break
		}
		if !strings.ContainsRune("+-*/", rune(s[j])) {
			return "", 0, false
		}
		ops = append(ops, s[j])
		i = j + 1
	}
	// First fold * and / left to right, then + and -.
	terms := []int{nums[0]}
	var addOps []byte
	for k, op := range ops {
		n := nums[k+1]
		switch op {
		case '*':
			terms[len(terms)-1] *= n
		case '/':
			t := terms[len(terms)-1]
			if n == 0 || t%n != 0 {
				return "", 0, false
			}
			terms[len(terms)-1] = t / n
		default:
			terms = append(terms, n)
			addOps = append(addOps, op)
		}
	}
	v := terms[0]
	for k, op := range addOps {
		if op == '+' {
			v += terms[k+1]
		} else {
			v -= terms[k+1]
		}
	}
	return s, v, true
}

// OptimalRounds is the number of steps: one operation per round.
func (a *arith) OptimalRounds() int { return len(a.ops) }

// arithProblem draws a start value and k operations with their phrases.
func arithProblem(rng randSource, k int) (start int, ops []arithOp, vals []int, phrases []string) {
	v := 2 + rng.IntN(19)
	start = v
	ops = make([]arithOp, 0, k)
	vals = make([]int, 0, k)
	phrases = make([]string, 0, k)
	for len(ops) < k {
		var o arithOp
		var phrase string
		switch rng.IntN(4) {
		case 0:
			o = arithOp{'+', 1 + rng.IntN(12)}
			if v+o.n > 60 {
				continue
			}
			phrase = [...]string{"buys %d", "gets %d more", "finds %d"}[rng.IntN(3)]
			phrase = fmt.Sprintf(phrase, o.n)
		case 1:
			if v < 2 {
				continue
			}
			o = arithOp{'-', 1 + rng.IntN(min(v-1, 12))}
			phrase = [...]string{"gives away %d", "loses %d", "sells %d"}[rng.IntN(3)]
			phrase = fmt.Sprintf(phrase, o.n)
		case 2:
			o = arithOp{'*', 2 + rng.IntN(2)}
			if v*o.n > 60 {
				continue
			}
			phrase = map[int]string{2: "doubles them", 3: "triples them"}[o.n]
		default:
			o = arithOp{'/', 2 + rng.IntN(3)}
			if v%o.n != 0 {
				continue
			}
			phrase = map[int]string{2: "keeps half", 3: "keeps a third", 4: "keeps a quarter"}[o.n]
		}
		v = o.apply(v)
		ops = append(ops, o)
		vals = append(vals, v)
		phrases = append(phrases, phrase)
	}
	return start, ops, vals, phrases
}

// arithDistinctAnswer reports whether the final value differs from the start
// and from every intermediate value.
func arithDistinctAnswer(start int, vals []int) bool {
	ans := vals[len(vals)-1]
	if start == ans {
		return false
	}
	for _, v := range vals[:len(vals)-1] {
		if v == ans {
			return false
		}
	}
	return true
}
