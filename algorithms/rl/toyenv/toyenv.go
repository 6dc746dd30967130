// Package toyenv holds two tiny multi-agent environments implementing
// envs.Env, used to test the RL algorithms without a language model:
//
//   - Table: a scripted environment whose rewards are a fixed table keyed
//     by action text, for checking samplers against hand-computed results.
//   - Relay: a two-role coordination task (planner → executor) that a
//     tabular policy can learn in a few dozen GRPO steps, for checking that
//     training raises the reward.
package toyenv

import (
	"fmt"
	"math/rand"
	"strings"

	"troupe/algorithms/envs"
)

// Table is a scripted environment: roles act in order for Rounds rounds;
// each action's rewards come from Rewards (unknown actions are invalid
// with Local −1); an action listed in Win ends the episode successfully.
// Observe(role) is "role:" followed by the comma-joined action history, so
// every distinct history is a distinct prompt.
type Table struct {
	Cast    []string
	Rewards map[string]envs.Step
	Win     map[string]bool
	Rounds  int

	hist    []string
	next    int
	rounds  int
	done    bool
	success bool
}

// NewTable returns a Table environment.
func NewTable(roles []string, rounds int, rewards map[string]envs.Step, win ...string) *Table {
	w := map[string]bool{}
	for _, a := range win {
		w[a] = true
	}
	return &Table{Cast: roles, Rewards: rewards, Win: w, Rounds: rounds}
}

// Name implements envs.Env.
func (t *Table) Name() string { return "table" }

// Roles implements envs.Env.
func (t *Table) Roles() []string { return t.Cast }

// Observe implements envs.Env.
func (t *Table) Observe(role string) string { return role + ":" + strings.Join(t.hist, ",") }

// Step implements envs.Env.
func (t *Table) Step(role, action string) envs.Step {
	if t.done {
		return envs.Step{Done: true, Info: "invalid: episode over"}
	}
	if role != t.Cast[t.next] {
		return envs.Step{Local: -1, Info: fmt.Sprintf("invalid: %s out of turn", role)}
	}
	st, ok := t.Rewards[action]
	if !ok {
		st = envs.Step{Local: -1, Info: "invalid: unknown action"}
	} else {
		st.Valid = true
	}
	t.hist = append(t.hist, action)
	t.next++
	if t.next == len(t.Cast) {
		t.next = 0
		t.rounds++
	}
	if t.Win[action] {
		t.done, t.success = true, true
	}
	if t.rounds >= t.Rounds {
		t.done = true
	}
	st.Done = t.done
	return st
}

// Turn implements envs.Env.
func (t *Table) Turn() int { return t.rounds }

// Done implements envs.Env.
func (t *Table) Done() bool { return t.done }

// Success implements envs.Env.
func (t *Table) Success() bool { return t.success }

// Clone implements envs.Env.
func (t *Table) Clone() envs.Env {
	c := *t
	c.hist = append([]string(nil), t.hist...)
	return &c
}

// Relay action sets: the planner names a target, the executor moves to one.
var (
	PlannerActions  = []string{"p0", "p1", "p2", "p3"}
	ExecutorActions = []string{"m0", "m1", "m2", "m3"}
)

// Relay is a two-role coordination task. A hidden goal g ∈ {0..3} is drawn
// from the seed; only the planner sees it ("planner: goal 2"). The planner
// says a plan "pK" (Local +1 when K = g); the executor sees only the plan
// ("executor: plan p2") and moves "mJ": the team earns 1 and the episode
// ends in success when J = g, and the executor earns Local +0.5 for
// following the plan (J = K). Anything else is invalid (Local −1). Two
// rounds at most. A random team succeeds with probability 1 − (3/4)² ≈ 0.44;
// a trained one always.
type Relay struct {
	goal    int
	plan    int
	next    int
	rounds  int
	done    bool
	success bool
}

// NewRelay returns a Relay episode with the goal drawn from seed.
func NewRelay(seed int64) *Relay {
	return &Relay{goal: rand.New(rand.NewSource(seed)).Intn(4), plan: -1}
}

// Name implements envs.Env.
func (r *Relay) Name() string { return "relay" }

// Roles implements envs.Env.
func (r *Relay) Roles() []string { return []string{"planner", "executor"} }

// Observe implements envs.Env.
func (r *Relay) Observe(role string) string {
	if role == "planner" {
		return fmt.Sprintf("planner: goal %d", r.goal)
	}
	if r.plan < 0 {
		return "executor: plan none"
	}
	return fmt.Sprintf("executor: plan p%d", r.plan)
}

func index(actions []string, a string) int {
	for i, x := range actions {
		if x == strings.TrimSpace(a) {
			return i
		}
	}
	return -1
}

// Step implements envs.Env.
func (r *Relay) Step(role, action string) envs.Step {
	if r.done {
		return envs.Step{Done: true, Info: "invalid: episode over"}
	}
	want := []string{"planner", "executor"}[r.next]
	if role != want {
		return envs.Step{Local: -1, Info: "invalid: " + role + " out of turn"}
	}
	var st envs.Step
	if role == "planner" {
		r.plan = index(PlannerActions, action)
		switch {
		case r.plan < 0:
			st = envs.Step{Local: -1, Info: "invalid: not a plan"}
		case r.plan == r.goal:
			st = envs.Step{Valid: true, Local: 1, Info: "good plan"}
		default:
			st = envs.Step{Valid: true, Info: "wrong plan"}
		}
		r.next = 1
	} else {
		m := index(ExecutorActions, action)
		switch {
		case m < 0:
			st = envs.Step{Local: -1, Info: "invalid: not a move"}
		default:
			st.Valid = true
			if m == r.plan {
				st.Local = 0.5
			}
			if m == r.goal {
				st.Team = 1
				r.done, r.success = true, true
			}
		}
		r.next = 0
		r.rounds++
		if r.rounds >= 2 {
			r.done = true
		}
	}
	st.Done = r.done
	return st
}

// Turn implements envs.Env.
func (r *Relay) Turn() int { return r.rounds }

// Done implements envs.Env.
func (r *Relay) Done() bool { return r.done }

// Success implements envs.Env.
func (r *Relay) Success() bool { return r.success }

// Clone implements envs.Env.
func (r *Relay) Clone() envs.Env { c := *r; return &c }

// Goal exposes the hidden goal (for tests).
func (r *Relay) Goal() int { return r.goal }

// ExpertAction implements envs.Expert.
func (r *Relay) ExpertAction(role string) string {
	if role == "planner" {
		return PlannerActions[r.goal]
	}
	if r.plan < 0 {
		return ExecutorActions[0]
	}
	return ExecutorActions[r.plan]
}
