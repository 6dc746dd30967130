package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/rl"
)

// Local is an rl.Policy and rl.Scorer over a Policy in this process (no
// actor): for evaluation tools and tests.
type Local struct {
	P           *Policy
	Temperature float32 // > 0 overrides the policy's sampling temperature
	Greedy      bool    // argmax decoding
	NoLogProbs  bool    // skip the scoring pass (evaluation)
}

var (
	_ rl.Policy = (*Local)(nil)
	_ rl.Scorer = (*Local)(nil)
)

// Sample implements rl.Sampler.
func (l *Local) Sample(ctx context.Context, prompts []string, k int, seed int64) ([][]rl.Completion, error) {
	return l.P.Sample(ctx, SampleRequest{Prompts: prompts, K: k, Seed: seed, Temperature: l.Temperature, Greedy: l.Greedy, NoLogProbs: l.NoLogProbs})
}

// LogProbs implements rl.Scorer.
func (l *Local) LogProbs(ctx context.Context, prompts []string, completions []rl.Completion) ([][]float32, error) {
	return l.P.LogProbs(ctx, LogProbsRequest{Prompts: prompts, Completions: completions})
}

// Update implements rl.Learner.
func (l *Local) Update(ctx context.Context, batch []rl.Sample) (rl.UpdateStats, error) {
	return l.P.Update(ctx, batch)
}

// EvalSpec describes an evaluation of checkpoints on an environment.
type EvalSpec struct {
	Env       string      // environment or preset name
	EnvConfig envs.Config // overrides of the preset
	// Shared is one checkpoint acting for every role; Roles maps every
	// role to its checkpoint. Exactly one of the two is set, or neither
	// with ModelDir (the pretrained model itself acts for every role).
	Shared string
	Roles  map[string]string
	// ModelDir is the pretrained Hugging Face model the checkpoints were
	// trained from (its tokenizer and chat template), if any.
	ModelDir string
	// Episodes are played on seeds SeedStart .. SeedStart+Episodes-1.
	Episodes  int
	SeedStart int64
	// MaxTurns caps the rounds (0: 64; episodes end on their own budget).
	MaxTurns int
	// Temperature of sampling (0: 1, the trained policy's own distribution).
	Temperature float32
	// Greedy decodes by argmax instead (temperature 0, as the AT-GRPO paper
	// evaluates); Temperature is then ignored.
	Greedy bool
	// SampleSeed seeds the sampling.
	SampleSeed int64
}

// EvalResult is the outcome of EvalCheckpoints.
type EvalResult struct {
	Env         string             `json:"env"`
	Config      envs.Config        `json:"config"`
	Episodes    int                `json:"episodes"`
	SeedStart   int64              `json:"seed_start"`
	SuccessRate float64            `json:"success_rate"`
	MeanReward  float64            `json:"mean_reward"` // mean Σ team reward per episode
	RoleReward  map[string]float64 `json:"role_reward"` // mean Σ (team + local) per episode
	Turns       float64            `json:"turns"`
	Invalid     float64            `json:"invalid"`
	Policies    map[string]string  `json:"policies"` // policy name → checkpoint
}

// EvalCheckpoints loads the checkpoints and plays independent episodes
// (atgrpo.Evaluate: one sampled action per turn, no branching).
func EvalCheckpoints(ctx context.Context, spec EvalSpec) (EvalResult, error) {
	res := EvalResult{Env: spec.Env, Episodes: spec.Episodes, SeedStart: spec.SeedStart, Policies: map[string]string{}}
	if spec.Episodes < 1 {
		return res, fmt.Errorf("%w: episodes %d < 1", ErrInput, spec.Episodes)
	}
	if (spec.Shared != "" && len(spec.Roles) > 0) || (spec.Shared == "" && len(spec.Roles) == 0 && spec.ModelDir == "") {
		return res, fmt.Errorf("%w: give either one shared checkpoint or one checkpoint per role (or a model directory alone)", ErrInput)
	}
	envName, cfg, err := envs.Resolve(spec.Env, spec.EnvConfig)
	if err != nil {
		return res, err
	}
	res.Env, res.Config = envName, cfg
	probe, err := envs.New(envName, cfg, spec.SeedStart)
	if err != nil {
		return res, err
	}
	roles := probe.Roles()
	obs, err := envs.MaxObsLen(envName, cfg)
	if err != nil {
		return res, err
	}
	act, err := envs.MaxActionLen(envName, cfg)
	if err != nil {
		return res, err
	}
	load := func(name, path string) (*Policy, error) {
		p, err := NewPolicy(ctx, Config{Name: name, Checkpoint: path, ModelDir: spec.ModelDir, MaxNewTokens: act + 1})
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", name, err)
		}
		// A character model needs a context of the observation's length; a
		// pretrained model's prompt is checked when it is rendered.
		if need := obs + act + 3; spec.ModelDir == "" && p.model.ContextLen() < need {
			return nil, fmt.Errorf("%w: %s has context %d but %s %dx%d observations need %d tokens (train on this size)",
				ErrCheckpoint, path, p.model.ContextLen(), envName, cfg.Width, cfg.Height, need)
		}
		return p, nil
	}
	var pols *rl.Policies
	if spec.Shared != "" || (len(spec.Roles) == 0 && spec.ModelDir != "") {
		p, err := load(rl.SharedName, spec.Shared)
		if err != nil {
			return res, err
		}
		pols = rl.Shared(&Local{P: p, Temperature: spec.Temperature, Greedy: spec.Greedy, NoLogProbs: true})
		res.Policies[rl.SharedName] = spec.Shared
	} else {
		m := map[string]rl.Policy{}
		for role := range spec.Roles {
			found := false
			for _, r := range roles {
				found = found || r == role
			}
			if !found {
				return res, fmt.Errorf("%w: %s has no role %q (roles: %s)", ErrInput, envName, role, strings.Join(roles, ", "))
			}
		}
		for _, role := range roles {
			path, ok := spec.Roles[role]
			if !ok {
				return res, fmt.Errorf("%w: no checkpoint for role %q (roles: %s)", ErrInput, role, strings.Join(roles, ", "))
			}
			p, err := load(role, path)
			if err != nil {
				return res, err
			}
			m[role] = &Local{P: p, Temperature: spec.Temperature, Greedy: spec.Greedy, NoLogProbs: true}
			res.Policies[role] = path
		}
		pols = rl.PerRole(m)
	}
	maxTurns := spec.MaxTurns
	if maxTurns == 0 {
		maxTurns = 64
	}
	factory := func(i int, _ int64) (envs.Env, error) { return envs.New(envName, cfg, spec.SeedStart+int64(i)) }
	st, err := atgrpo.Evaluate(ctx, pols, factory, spec.Episodes, maxTurns, 1, spec.SampleSeed)
	if err != nil {
		return res, err
	}
	res.SuccessRate, res.MeanReward, res.RoleReward, res.Turns, res.Invalid = st.SuccessRate, st.TeamReturn, st.RoleReward, st.Turns, st.Invalid
	return res, nil
}

// SortedRoles returns m's keys sorted (for stable printing).
func SortedRoles(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
