package envs

import (
	"fmt"
)

// randSource is the part of *rand.Rand the environments draw from.
type randSource interface {
	IntN(n int) int
	Float64() float64
}

// randomActor gives plausible but arbitrary actions, used to make noisy
// warm-start transcripts. Every environment in this package implements it.
type randomActor interface {
	randomAction(role string, r randSource) string
}

// Example is one supervised warm-start example: what a role saw and what it
// answered.
type Example struct {
	Env    string // environment name
	Seed   int64  // episode seed
	Turn   int    // round the action was taken in
	Role   string
	Obs    string
	Action string
	Expert bool // the action is the Expert's (false: a noise action)
}

// TranscriptOptions tunes Transcripts.
type TranscriptOptions struct {
	// Noise is the probability (0..1) that an action is replaced by a random
	// plausible one (a random move, fill or expression). Noise actions are
	// executed, so the transcripts also visit states off the expert's path
	// (e.g. the verifier sees wrong proposals and learns to correct them).
	Noise float64
	// RecordNoise also records the noise actions as examples, so the warm
	// start imitates an imperfect teacher (about Noise of the labels are
	// wrong). When false only expert actions are recorded and the noise
	// only diversifies the states.
	RecordNoise bool
	// NoiseRoles limits the noise to these roles (empty: every role). Noise
	// on the proposing role only (planner, reasoner) with RecordNoise false
	// teaches the checking role to correct mistakes while every recorded
	// label stays correct.
	NoiseRoles []string
	// NoiseSeed seeds the noise stream (mixed with each episode's seed).
	NoiseSeed int64
	// MaxRounds caps an episode's rounds (0: the environment's budget).
	MaxRounds int
}

// TranscriptStats summarises the episodes behind a transcript.
type TranscriptStats struct {
	Episodes  int
	Successes int
	Examples  int
	TeamSum   float64 // summed team reward over all episodes
}

// Transcripts plays one episode per seed with the environment's Expert
// (roles acting in turn order) and returns every (role, observation,
// action) the roles produced, for the supervised warm start.
func Transcripts(name string, cfg Config, seeds []int64, opt TranscriptOptions) ([]Example, TranscriptStats, error) {
	var stats TranscriptStats
	if opt.Noise < 0 || opt.Noise > 1 {
		return nil, stats, fmt.Errorf("%w: transcript noise %.2f outside 0..1", ErrBadConfig, opt.Noise)
	}
	var out []Example
	for _, seed := range seeds {
		env, err := New(name, cfg, seed)
		if err != nil {
			return nil, stats, fmt.Errorf("transcripts: %w", err)
		}
		ex, ok := env.(Expert)
		if !ok {
			return nil, stats, fmt.Errorf("transcripts: %s has no Expert", env.Name())
		}
		for _, r := range opt.NoiseRoles {
			if !contains(env.Roles(), r) {
				return nil, stats, fmt.Errorf("%w: noise role %q is not a %s role %v", ErrBadConfig, r, env.Name(), env.Roles())
			}
		}
		noisy, _ := env.(randomActor)
		rng := newRand(seed^opt.NoiseSeed, 5)
		roles := env.Roles()
		rounds := 0
		for !env.Done() && (opt.MaxRounds == 0 || rounds < opt.MaxRounds) {
			for _, role := range roles {
				if env.Done() {
					break
				}
				if !ActsNow(env, role) {
					continue // a Router routed the turn to another role
				}
				obs := env.Observe(role)
				act, expert := ex.ExpertAction(role), true
				if opt.Noise > 0 && noisy != nil && (len(opt.NoiseRoles) == 0 || contains(opt.NoiseRoles, role)) && rng.Float64() < opt.Noise {
					act, expert = noisy.randomAction(role, rng), false
				}
				if expert || opt.RecordNoise {
					out = append(out, Example{Env: env.Name(), Seed: seed, Turn: env.Turn(), Role: role, Obs: obs, Action: act, Expert: expert})
				}
				st := env.Step(role, act)
				stats.TeamSum += st.Team
			}
			rounds++
		}
		stats.Episodes++
		if env.Success() {
			stats.Successes++
		}
	}
	stats.Examples = len(out)
	return out, stats, nil
}
