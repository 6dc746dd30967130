// Package atgrpo implements AT-GRPO (Agent- and Turn-wise GRPO, "Stronger
// Together: On-Policy Reinforcement Learning for Collaborative LLMs", arXiv
// 2510.11062): GRPO for teams of LLM agents acting in turn in a multi-turn
// environment.
//
// # Tree sampling (the paper's AT-GRPO algorithm: agent- and turn-wise grouping)
//
// Plain GRPO needs G completions of the same prompt to compare; in a
// multi-agent, multi-turn episode every prompt is reached once, so groups
// would have size one. AT-GRPO branches instead: for each environment
// instance e, round t and agent i in turn order,
//
//  1. the agent's policy samples K candidate actions from the same
//     observation o_{e,i,t};
//  2. each candidate c is applied to its own Clone of the environment,
//     giving reward r^c = α·team^c + local^c (α = 1 by default);
//  3. the K candidates form one group with key (e, i, t) and GRPO
//     advantages A^c = (r^c − mean r)/(std r + 1e-6) (grpo.Advantages),
//     and go into the buffer of the policy that acts for role i;
//  4. the episode continues from the best branch c* = argmax_c r^c (ties
//     go to the earliest candidate), i.e. the clone that executed c*.
//
// Candidates for all E instances are requested in one Sampler call per
// (turn, role), with a seed derived from (Config.Seed, step, turn, role).
//
// # Regimes (the paper's role-sharing vs role-specific policies)
//
// Shared: one policy acts for and is trained on every role; the role is
// told apart by the prompt. This package does not rewrite prompts: the
// project's environments (algorithms/envs) already name the acting role in
// Env.Observe. Per-role: a map role → policy; each policy is updated only
// on its own role's buffer, and the updates run concurrently (goroutines
// here; separate policy actors in the actor-graph version).
//
// # Training the policies
//
// Before the update, Prepare applies the options PettingLLMs and Dr. MAS
// add: PettingLLMs' group filter (Config.Filter: drop the lowest-mean, the
// lowest-variance or the equal-reward groups of each policy's buffer) and
// Dr. MAS's agent-wise normalisation (Config.DrMAS: advantages over every
// sample of an agent in one environment instance, all turns pooled, instead
// of per (env, role, turn) group). The learner then runs PPO on its buffer
// (agent.Policy: mini-batches of 16 samples, one optimiser step each, as
// verl runs it).
//
// # Evaluation
//
// Evaluate runs independent (non-tree) episodes: one sample per action on
// the real environment, reporting success rate (with its standard error)
// and mean returns, as the paper evaluates; the policies decide how they
// decode (agent.Team.GreedyPolicies decodes greedily, as the paper does).
package atgrpo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
)

// Sentinel errors.
var (
	// ErrConfig reports an invalid configuration.
	ErrConfig = errors.New("atgrpo: invalid config")
	// ErrPolicy reports a missing or misbehaving policy (rl.ErrPolicy).
	ErrPolicy = rl.ErrPolicy
	// ErrEnv reports environments that cannot be driven together.
	ErrEnv = errors.New("atgrpo: environment")
)

// GroupKey identifies one AT-GRPO group: environment instance, acting
// role (agent) and turn (completed rounds before the action).
type GroupKey struct {
	Env  int
	Role string
	Turn int
}

// String renders the key as "env3/planner/t1" (the Sample.Group value).
func (k GroupKey) String() string { return fmt.Sprintf("env%d/%s/t%d", k.Env, k.Role, k.Turn) }

// Config configures tree sampling and training.
type Config struct {
	K         int                // candidates per (env, role, turn) group; ≥ 1
	Alpha     float64            // weight of the team reward in r = α·team + local
	Envs      int                // environment instances per training step
	MaxTurns  int                // rounds after which an episode is cut off
	Advantage grpo.AdvantageMode // GRPO (std-normalised) or Dr. GRPO (mean-centred)
	Seed      int64              // base seed for all sampling
	// DrMAS replaces the (env, role, turn) group normalisation by Dr. MAS's
	// agent-wise one: each sample is normalised with the mean and std of
	// every sample of its agent (role) in its environment instance, all
	// turns pooled (Dr. MAS's key (prompt uid, agent)).
	DrMAS bool
	// Filter is PettingLLMs' optional group filter, applied to each
	// policy's buffer before its update (the advantages of the kept groups
	// do not change, except under FilterUID and Dr. MAS, which recompute
	// them over the kept samples).
	Filter rl.GroupFilter
	// Grouping and Sampler are the paper's ablations (ablation.go): the
	// key advantages are computed within (default AgentTurn, (env, role,
	// turn)) and tree or independent sampling (default Tree).
	Grouping Grouping
	Sampler  Sampling
	// Resample > 0 is DAPO's dynamic sampling (resample.go): with the
	// "dapo" Filter, which drops the groups whose rewards are all equal,
	// up to Resample more environment instances a step are sampled until
	// the step holds as many groups with reward variance as it first
	// sampled groups. 0: none.
	Resample int

	// envBase numbers a call's environment instances from envBase (the
	// extra instances of Resample), so their group keys stay distinct.
	envBase int
}

// DefaultConfig is K = 4, α = 1, 8 environments, at most 32 rounds, GRPO
// advantages.
func DefaultConfig() Config {
	return Config{K: 4, Alpha: 1, Envs: 8, MaxTurns: 32, Advantage: grpo.StdNormalized}
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.K < 1:
		return fmt.Errorf("%w: K = %d, want >= 1", ErrConfig, c.K)
	case c.Envs < 1:
		return fmt.Errorf("%w: Envs = %d, want >= 1", ErrConfig, c.Envs)
	case c.MaxTurns < 1:
		return fmt.Errorf("%w: MaxTurns = %d, want >= 1", ErrConfig, c.MaxTurns)
	case c.Alpha != c.Alpha:
		return fmt.Errorf("%w: Alpha is NaN", ErrConfig)
	}
	if err := c.Filter.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.Resample < 0 {
		return fmt.Errorf("%w: Resample = %d, want >= 0", ErrConfig, c.Resample)
	}
	if c.Resample > 0 && c.Filter.Method != rl.FilterDAPO {
		return fmt.Errorf("%w: resampling (DAPO's dynamic sampling) replaces dropped zero-variance groups: it needs the dapo filter, not %q", ErrConfig, c.Filter.Method)
	}
	if c.Grouping < AgentTurn || c.Grouping > Trajectory || c.Sampler < Tree || c.Sampler > Independent {
		return fmt.Errorf("%w: grouping %d, sampler %d", ErrConfig, c.Grouping, c.Sampler)
	}
	if c.Grouping == Trajectory && c.Sampler != Independent {
		return fmt.Errorf("%w: trajectory-level grouping needs independent sampling (a tree has one trajectory per instance)", ErrConfig)
	}
	return nil
}

// EnvFactory makes environment instance i for a step, seeded.
type EnvFactory func(instance int, seed int64) (envs.Env, error)

// Policies routes roles to policies (see rl.Policies).
type Policies = rl.Policies

// SharedName is the policy name of the shared regime.
const SharedName = rl.SharedName

// Shared is the shared regime: p acts for every role (rl.Shared).
func Shared(p rl.Policy) *Policies { return rl.Shared(p) }

// PerRole is the per-role regime (rl.PerRole).
func PerRole(m map[string]rl.Policy) *Policies { return rl.PerRole(m) }

// Candidate is one branch of a group.
type Candidate struct {
	Completion rl.Completion
	Step       envs.Step // what the cloned environment returned
	Reward     float64   // α·Step.Team + Step.Local
	Advantage  float64
}

// Node is one group: K candidates from the same observation.
type Node struct {
	Key        GroupKey
	Policy     string // name of the policy that sampled it
	Prompt     string
	Candidates []Candidate
	Chosen     int // index of the branch the episode continued from
}

// Rollout is one environment instance's tree-sampled episode.
type Rollout struct {
	Env        int
	Nodes      []Node
	TeamReturn float64 // Σ team reward along the chosen branches
	Success    bool
	Turns      int
}

// checkRoles verifies every env has the same non-empty cast.
func checkRoles(es []envs.Env) ([]string, error) {
	roles, err := envs.CommonRoles(es)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEnv, err)
	}
	return roles, nil
}

// TreeRollouts runs AT-GRPO tree sampling on es (modified in place: each
// ends in the state of its chosen branches) and returns the rollouts and the
// per-policy buffers of samples with advantages. step distinguishes the
// seeds of successive training steps.
func TreeRollouts(ctx context.Context, cfg Config, pols *Policies, es []envs.Env, step int64) ([]Rollout, map[string][]rl.Sample, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if _, err := checkRoles(es); err != nil {
		return nil, nil, err
	}
	if cfg.Sampler == Independent {
		return independentLocal(ctx, cfg, pols, es, step)
	}
	// The same sampler as over environment actors, on a batch that steps es
	// themselves; each es[e] then becomes the instance of its chosen branch.
	b, ep, err := envs.LocalOf(es)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrEnv, err)
	}
	rolls, buffers, final, err := treeRollouts(ctx, cfg, pols, b, ep, step)
	if err != nil {
		return nil, nil, err
	}
	for e, ref := range final {
		es[e] = b.Env(ref)
	}
	return rolls, buffers, nil
}

// EvalStats summarises independent evaluation episodes.
type EvalStats struct {
	Episodes    int
	SuccessRate float64
	StdErr      float64            // standard error of SuccessRate: √(p(1−p)/n)
	TeamReturn  float64            // mean Σ team reward per episode
	RoleReward  map[string]float64 // mean Σ (α·team + local) per episode, by role
	Turns       float64            // mean rounds per episode
	Invalid     float64            // fraction of actions that were invalid
	// Solved[i] reports whether episode i (seed i of the range) succeeded:
	// two evaluations on the same range can be compared grid by grid.
	Solved []bool
}

// StdErr is the standard error √(p(1−p)/n) of a success rate p measured
// on n independent episodes (0 for n < 1).
func StdErr(p float64, n int) float64 {
	if n < 1 {
		return 0
	}
	return math.Sqrt(p * (1 - p) / float64(n))
}

// Evaluate plays n independent episodes (one sampled action per turn, no
// branching) and reports success rate and mean returns; alpha weighs the
// team reward in RoleReward.
func Evaluate(ctx context.Context, pols *Policies, newEnv EnvFactory, n, maxTurns int, alpha float64, seed int64) (EvalStats, error) {
	if n < 1 || maxTurns < 1 {
		return EvalStats{}, fmt.Errorf("%w: evaluate needs n >= 1 and maxTurns >= 1, got %d, %d", ErrConfig, n, maxTurns)
	}
	es := make([]envs.Env, n)
	for i := range es {
		e, err := newEnv(i, rl.DeriveSeed(seed, int64(i)))
		if err != nil {
			return EvalStats{}, fmt.Errorf("evaluate: make env %d: %w", i, err)
		}
		es[i] = e
	}
	roles, err := checkRoles(es)
	if err != nil {
		return EvalStats{}, err
	}
	st := EvalStats{Episodes: n, RoleReward: map[string]float64{}}
	actions, invalid := 0, 0
	for round := 0; round < maxTurns; round++ {
		active := 0
		for ri, role := range roles {
			_, pol, err := pols.For(role)
			if err != nil {
				return EvalStats{}, err
			}
			var idx []int
			var prompts []string
			for e, env := range es {
				if envs.ActsNow(env, role) {
					idx = append(idx, e)
					prompts = append(prompts, env.Observe(role))
				}
			}
			if len(idx) == 0 {
				continue // (a Router may give the turn to the next role)
			}
			active += len(idx)
			out, err := pol.Sample(ctx, prompts, 1, rl.DeriveSeed(seed, -1, int64(round), int64(ri)))
			if err != nil {
				return EvalStats{}, fmt.Errorf("%w: evaluate sampling for role %s: %w", ErrPolicy, role, err)
			}
			if len(out) != len(prompts) {
				return EvalStats{}, fmt.Errorf("%w: %d candidate lists for %d prompts", ErrPolicy, len(out), len(prompts))
			}
			for j, e := range idx {
				if len(out[j]) < 1 {
					return EvalStats{}, fmt.Errorf("%w: no completion for role %s", ErrPolicy, role)
				}
				s := es[e].Step(role, out[j][0].Text)
				actions++
				if !s.Valid {
					invalid++
				}
				st.TeamReturn += s.Team
				st.RoleReward[role] += alpha*s.Team + s.Local
			}
		}
		if active == 0 {
			break
		}
	}
	st.Solved = make([]bool, n)
	for i, env := range es {
		st.Solved[i] = env.Success()
		if env.Success() {
			st.SuccessRate++
		}
		st.Turns += float64(env.Turn())
	}
	fn := float64(n)
	st.SuccessRate /= fn
	st.StdErr = StdErr(st.SuccessRate, n)
	st.TeamReturn /= fn
	st.Turns /= fn
	for r := range st.RoleReward {
		st.RoleReward[r] /= fn
	}
	if actions > 0 {
		st.Invalid = float64(invalid) / float64(actions)
	}
	return st, nil
}

// Trainer runs AT-GRPO training steps.
type Trainer struct {
	Config   Config
	Policies *Policies
	NewEnv   EnvFactory
	// Refs optionally maps a policy name to a frozen reference policy whose
	// log-probs fill Sample.RefLogProbs (for the learner's KL term).
	Refs map[string]rl.Scorer

	step int64
}

// StepStats reports one training step.
type StepStats struct {
	Step         int64
	Groups       int                       // number of (env, role, turn) groups
	Samples      int                       // Σ group sizes = Groups·K
	MeanReward   float64                   // mean reward over every branch
	ChosenReward float64                   // mean reward of the chosen branches
	TeamReturn   float64                   // mean team return along the tree path
	SuccessRate  float64                   // of the tree path (optimistic: best-of-K at every turn)
	SampledZero  float64                   // share of all sampled candidates whose group advantage is 0
	Resampled    int                       // environment instances sampled beyond Config.Envs (Config.Resample)
	Filter       rl.FilterStats            // what the group filter kept (all of it without a filter)
	ZeroAdv      float64                   // share of the trained samples whose advantage is 0
	Adv          grpo.AdvStats             // over the trained samples
	Updates      map[string]rl.UpdateStats // by policy name
}

// Prepare turns a step's tree rollouts and buffers into the buffers the
// policies train on (the group filter, then Dr. MAS or, after FilterUID,
// group advantages recomputed over the kept samples) and the step's
// statistics (without Updates). The input buffers are not modified.
func Prepare(cfg Config, step int64, rolls []Rollout, buffers map[string][]rl.Sample) (StepStats, map[string][]rl.Sample, error) {
	st := StepStats{Step: step, Updates: map[string]rl.UpdateStats{}}
	zero := 0
	if cfg.Resample > 0 {
		st.Resampled = max(0, countInstances(rolls)-cfg.Envs)
	}
	for _, r := range rolls {
		st.TeamReturn += r.TeamReturn
		if r.Success {
			st.SuccessRate++
		}
		for _, n := range r.Nodes {
			st.Groups++
			st.ChosenReward += n.Candidates[n.Chosen].Reward
			for _, c := range n.Candidates {
				st.Samples++
				st.MeanReward += c.Reward
				if c.Advantage == 0 {
					zero++
				}
			}
		}
	}
	if len(rolls) > 0 {
		st.TeamReturn /= float64(len(rolls))
		st.SuccessRate /= float64(len(rolls))
	}
	if st.Samples > 0 {
		st.MeanReward /= float64(st.Samples)
		st.ChosenReward /= float64(st.Groups)
		st.SampledZero = float64(zero) / float64(st.Samples)
	}
	out := buffers
	if cfg.Filter.Active() {
		var err error
		if out, st.Filter, err = rl.FilterBuffers(cfg.Filter, buffers); err != nil {
			return st, nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	} else {
		for _, b := range buffers {
			st.Filter.Samples += len(b)
			st.Filter.SamplesKept += len(b)
		}
		st.Filter.Groups, st.Filter.GroupsKept = st.Groups, st.Groups
	}
	if cfg.DrMAS || (cfg.Filter.Active() && cfg.Filter.Method == rl.FilterUID) {
		re := make(map[string][]rl.Sample, len(out))
		for name, b := range out {
			b = append([]rl.Sample(nil), b...)
			if err := rl.AssignAdvantages(b, cfg.Advantage, cfg.DrMAS); err != nil {
				return st, nil, err
			}
			re[name] = b
		}
		out = re
	}
	var advs []float64
	for _, name := range sortedNames(out) {
		for _, s := range out[name] {
			advs = append(advs, s.Advantage)
		}
	}
	st.Adv = grpo.SummarizeAdvantages(advs)
	st.ZeroAdv = st.Adv.Zero
	return st, out, nil
}

func sortedNames(m map[string][]rl.Sample) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Step runs one training step: Config.Envs fresh environments → tree
// rollouts → per-policy buffers with group advantages → Prepare (group
// filter, Dr. MAS) → one Learner.Update per policy (concurrently) →
// statistics.
func (t *Trainer) Step(ctx context.Context) (StepStats, error) {
	cfg := t.Config
	if err := cfg.Validate(); err != nil {
		return StepStats{}, err
	}
	if t.NewEnv == nil {
		return StepStats{}, fmt.Errorf("%w: trainer has no environment factory", ErrConfig)
	}
	step := t.step
	es := make([]envs.Env, cfg.Envs)
	for i := range es {
		e, err := t.NewEnv(i, rl.DeriveSeed(cfg.Seed, step, int64(i), 1))
		if err != nil {
			return StepStats{}, fmt.Errorf("step %d: make env %d: %w", step, i, err)
		}
		es[i] = e
	}
	rolls, buffers, err := TreeRollouts(ctx, cfg, t.Policies, es, step)
	if err != nil {
		return StepStats{}, fmt.Errorf("step %d: %w", step, err)
	}
	if cfg.Resample > 0 {
		if rolls, buffers, err = Resample(ctx, cfg, t.Policies, t.NewEnv, step, rolls, buffers); err != nil {
			return StepStats{}, fmt.Errorf("step %d: %w", step, err)
		}
	}
	st, buffers, err := Prepare(cfg, step, rolls, buffers)
	if err != nil {
		return st, fmt.Errorf("step %d: %w", step, err)
	}
	if err := rl.FillRefs(ctx, t.Refs, buffers); err != nil {
		return st, fmt.Errorf("step %d: %w", step, err)
	}
	upd, err := rl.UpdateAll(ctx, t.Policies, buffers)
	st.Updates = upd
	if err != nil {
		return st, fmt.Errorf("step %d: %w", step, err)
	}
	t.step++
	return st, nil
}
