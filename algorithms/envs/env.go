// Package envs holds the multi-agent, turn-based text environments that the
// training algorithms run on (planpath, sudoku4, sokoban, arith).
//
// Every environment has a fixed cast of roles that act in turn order; each
// role sees a short text observation and answers with a short text action.
// Observations and actions are kept small on purpose: the agents are tiny
// byte-level GPTs with a context of 64 to 128 tokens.
package envs

import (
	"errors"
	"fmt"
	"slices"
)

// Env is one episode of a multi-agent, turn-based text environment.
//
// Implementations are deterministic given their seed, never panic on any
// action text (an unparseable action is an invalid move and is penalised),
// and are cheap to Clone, because tree sampling steps a copy of the
// environment for every candidate action.
type Env interface {
	// Name is the environment's registry name, e.g. "planpath".
	Name() string
	// Roles lists the roles in turn order, e.g. ["planner", "verifier"].
	Roles() []string
	// Observe returns the text prompt the role sees now: its view of the
	// state plus whatever the other roles said that it may see.
	Observe(role string) string
	// Step applies role's action text and returns its rewards. Calling Step
	// for a role out of turn or after Done is an invalid move, not a panic.
	Step(role, action string) Step
	// Turn is the number of completed rounds (every role acted once).
	Turn() int
	// Done reports whether the episode has ended (success, failure or turn
	// budget exhausted).
	Done() bool
	// Success reports whether the team solved the task.
	Success() bool
	// Clone returns an independent deep copy of the episode.
	Clone() Env
}

// Router is an Env whose roles do not all act every round: an action
// decides which role acts next, as JoyAgents-R1's master agent routes each
// turn to one of its sub-agents (see routepath). Roles still lists every
// role in the order the samplers offer them the turn; a role other than
// Next is skipped (it neither observes nor acts) until the turn is routed
// to it. The samplers and evaluations ask State.Acts or ActsNow.
type Router interface {
	Env
	// Next is the role that acts now ("" once Done).
	Next() string
}

// ActsNow reports whether role acts now in e: e is not done and, if e is
// a Router, the turn is routed to role.
func ActsNow(e Env, role string) bool {
	if e.Done() {
		return false
	}
	r, ok := e.(Router)
	return !ok || r.Next() == role
}

// Step is the outcome of one action.
type Step struct {
	Valid bool    // the action parsed and was legal
	Team  float64 // team reward earned by this action (shared by all roles)
	Local float64 // the acting role's own reward for this action
	Done  bool    // the episode ended with this action
	Info  string  // a short human-readable note ("invalid: cell blocked")
}

// Expert produces correct actions for warm-start transcripts: the supervised
// step that lets tiny policies start above zero reward.
type Expert interface {
	// ExpertAction is a correct (ideally optimal) action for role now.
	ExpertAction(role string) string
}

// CommonRoles returns the roles shared by every episode of es, in turn
// order, or an error if es is empty, has no roles, or mixes casts (the
// samplers batch one role's turn across all episodes).
func CommonRoles(es []Env) ([]string, error) {
	if len(es) == 0 {
		return nil, errors.New("no environments")
	}
	roles := es[0].Roles()
	if len(roles) == 0 {
		return nil, fmt.Errorf("%s has no roles", es[0].Name())
	}
	for i, e := range es[1:] {
		if !slices.Equal(e.Roles(), roles) {
			return nil, fmt.Errorf("instance %d has roles %v, instance 0 has %v", i+1, e.Roles(), roles)
		}
	}
	return roles, nil
}
