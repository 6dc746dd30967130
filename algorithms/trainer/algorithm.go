package trainer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"troupe/algorithms/agent"
	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/joyagents"
	"troupe/algorithms/rl"
)

// Algorithm is a multi-agent RL algorithm over a Trainer's team of policy
// actors. The Trainer calls Start once, after the warm start and the first
// evaluations; then, each RL step, Rollout with the current policies and
// Update on what it returned; Stop when the run ends.
type Algorithm interface {
	// Name is the algorithm's name in logs and errors ("atgrpo").
	Name() string
	// Start prepares the algorithm to train t.Team() (its own actors,
	// environment hosts, compiled graphs).
	Start(ctx context.Context, t *Trainer) error
	// Rollout samples one step's episodes with the current policies.
	Rollout(ctx context.Context) (Rollouts, error)
	// Update trains the policies on r, the last Rollout, and returns the
	// step's statistics (Kind "step", Step the 1-based step).
	Update(ctx context.Context, r Rollouts) (StepRecord, error)
	// Stop releases what Start made.
	Stop(ctx context.Context)
}

// Rollouts are what an Algorithm's Rollout returns and its Update consumes;
// only the algorithm that made them reads them.
type Rollouts any

// Evaluator is implemented by an Algorithm whose policies read something
// beside their weights when they act (JoyAgents-R1's memory): evaluation
// then runs through EvalPolicies, which returns the wrapped policies and a
// count of the actions taken and the ones answered without sampling.
type Evaluator interface {
	EvalPolicies(p *rl.Policies) (*rl.Policies, func() (actions, reused int64), error)
}

// ErrAlgorithm reports an unknown algorithm or options it cannot run with.
var ErrAlgorithm = errors.New("trainer: bad algorithm")

// algorithms are the built-in algorithms by Options.Algo, each made from the
// run's options (and checking them before any actor is spawned).
var algorithms = map[string]func(o Options) (Algorithm, error){
	"atgrpo":    newATGRPO,
	"grpo":      newGRPO,
	"joyagents": newJoyAgents,
}

// Algorithms lists the names Options.Algo accepts.
func Algorithms() []string {
	names := make([]string, 0, len(algorithms))
	for n := range algorithms {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewAlgorithm returns the built-in algorithm o.Algo names, configured from
// o.
func NewAlgorithm(o Options) (Algorithm, error) {
	mk, ok := algorithms[o.Algo]
	if !ok {
		return nil, fmt.Errorf("%w: unknown algorithm %q (%s)", ErrAlgorithm, o.Algo, strings.Join(Algorithms(), ", "))
	}
	return mk(o)
}

// ATGRPO is AT-GRPO: tree sampling (K branches at every turn of every
// agent), groups by (environment, agent, turn), PPO-clipped updates of each
// role's policy through the team's compiled update graph.
type ATGRPO struct {
	// Filter is PettingLLMs' group filter.
	Filter rl.GroupFilter
	// DrMAS normalises advantages per (environment instance, agent).
	DrMAS bool
	// Grouping, Sampler and Advantage are the ablations (ablations.go);
	// zero values are AT-GRPO's.
	Grouping  atgrpo.Grouping
	Sampler   atgrpo.Sampling
	Advantage grpo.AdvantageMode
	// Resample > 0 is DAPO's dynamic sampling (atgrpo.Config.Resample).
	Resample int

	name   string
	tr     *agent.ATGRPO
	stop   func()
	single bool
}

func newATGRPO(o Options) (Algorithm, error) {
	method, err := rl.ParseFilterMethod(o.ATGRPO.Filter)
	if err != nil {
		return nil, err
	}
	a := &ATGRPO{Filter: rl.GroupFilter{Method: method, Ratio: o.ATGRPO.FilterRatio}, DrMAS: o.DrMAS, name: "atgrpo"}
	if err := a.Filter.Validate(); err != nil {
		return nil, err
	}
	if a.Grouping, a.Sampler, a.Advantage, err = atgrpoVariant(o); err != nil {
		return nil, err
	}
	if a.Resample, a.Filter, err = dapoResample(o, a.Filter); err != nil {
		return nil, err
	}
	return a, nil
}

// newGRPO is GRPO for a single agent: the single-agent form of the
// environment (envs.Config.Single) with AT-GRPO's turn-wise groups.
func newGRPO(o Options) (Algorithm, error) {
	a, err := newATGRPO(o)
	if err != nil {
		return nil, err
	}
	g := a.(*ATGRPO)
	g.name, g.single = "grpo", true
	return g, nil
}

// Name implements Algorithm.
func (a *ATGRPO) Name() string { return a.name }

// SingleAgent reports whether the run uses the single-agent environment.
func (a *ATGRPO) SingleAgent() bool { return a.single }

// Start implements Algorithm; with Options.EnvActors it spawns the
// environment host actors.
func (a *ATGRPO) Start(ctx context.Context, t *Trainer) error {
	o := t.Options()
	a.tr = &agent.ATGRPO{
		Config: atgrpo.Config{K: o.K, Alpha: 1, Envs: o.Envs, MaxTurns: t.Budget(), Advantage: a.Advantage, Seed: o.Seed,
			DrMAS: a.DrMAS, Filter: a.Filter, Grouping: a.Grouping, Sampler: a.Sampler, Resample: a.Resample},
		Team:   t.Team(),
		NewEnv: t.NewEnv(-1),
	}
	if o.EnvActors > 0 {
		pool, err := envs.SpawnPool(ctx, t.Runtime(), o.EnvActors, envs.HostConfig{Env: o.Env, Config: t.EnvConfig()}, t.restartOptions()...)
		if err != nil {
			return err
		}
		a.stop = func() { pool.Kill(context.Background()) }
		a.tr.Envs = pool
	}
	return nil
}

// Rollout implements Algorithm.
func (a *ATGRPO) Rollout(ctx context.Context) (Rollouts, error) { return a.tr.Rollout(ctx) }

// Update implements Algorithm.
func (a *ATGRPO) Update(ctx context.Context, r Rollouts) (StepRecord, error) {
	ro, ok := r.(*agent.ATGRPORollouts)
	if !ok {
		return StepRecord{}, fmt.Errorf("%w: AT-GRPO cannot update on %T", ErrAlgorithm, r)
	}
	s, err := a.tr.Train(ctx, ro)
	rec := StepRecord{Kind: "step", Step: int(s.Step) + 1, Reward: s.MeanReward, Success: s.SuccessRate, TeamReturn: s.TeamReturn,
		Samples: s.Samples, ZeroAdv: s.ZeroAdv, SampledZero: s.SampledZero, Trained: s.Filter.SamplesKept, Resampled: s.Resampled}
	fillUpd(&rec, s.Updates)
	return rec, err
}

// Stop implements Algorithm.
func (a *ATGRPO) Stop(context.Context) {
	if a.stop != nil {
		a.stop()
		a.stop = nil
	}
}

// JoyAgents is JoyAgents-R1: node-wise sampling along backbone
// trajectories, top-K groups by marginal benefit, updates of the agents
// that own them, and a memory per agent that evolves with the rewards.
// Its update is a compiled actor graph over the policy actors and the
// memory actor (agent.JoyGraph).
type JoyAgents struct {
	// Config is the algorithm's configuration; Start fills G, Envs,
	// MaxTurns, Seed and the memory's hint length from the run.
	Config joyagents.Config
	// EvalNoMemory evaluates without reading the memory.
	EvalNoMemory bool

	ja    *agent.JoyAgents
	roles []string
}

func newJoyAgents(o Options) (Algorithm, error) {
	method, err := rl.ParseFilterMethod(o.ATGRPO.Filter)
	if err != nil {
		return nil, err
	}
	if (rl.GroupFilter{Method: method, Ratio: o.ATGRPO.FilterRatio}).Active() {
		return nil, fmt.Errorf("%w: the group filter is AT-GRPO's (PettingLLMs); JoyAgents-R1 selects groups by top-K", ErrAlgorithm)
	}
	jc := joyagents.DefaultConfig()
	jc.UseMemory, jc.DrMAS, jc.TopFrac = o.Joy.Memory, o.DrMAS, o.Joy.TopFrac
	if jc.Advantage, err = advantageMode(o.Advantage); err != nil {
		return nil, err
	}
	switch {
	case o.Joy.TopK > 0:
		jc.TopK = o.Joy.TopK
	case o.Joy.TopK < 0:
		jc.TopK = 0 // all groups
	}
	jc.Memory.NoHint, jc.Memory.NoReuse, jc.Memory.PerStep = o.Joy.NoHint, o.Joy.NoReuse, o.Joy.MemoryPerStep
	if jc.Memory.Abstract, err = memoryKey(o); err != nil {
		return nil, err
	}
	switch o.Joy.Threshold {
	case "", "pooled":
		jc.Memory.Threshold = joyagents.ThresholdPooled
	case "group-z":
		jc.Memory.Threshold = joyagents.ThresholdGroupZ
	default:
		return nil, fmt.Errorf("%w: unknown memory threshold %q (pooled, group-z)", ErrAlgorithm, o.Joy.Threshold)
	}
	return &JoyAgents{Config: jc, EvalNoMemory: o.Joy.EvalNoMemory}, nil
}

// Name implements Algorithm.
func (j *JoyAgents) Name() string { return "joyagents" }

// HintRoom is the context a memory hint needs (its prefix and one action)
// when the policies read hints.
func (j *JoyAgents) HintRoom(maxNew int) int {
	if !j.Config.UseMemory || j.Config.Memory.NoHint {
		return 0
	}
	return len(joyagents.HintPrefix) + maxNew - 1
}

// Start implements Algorithm: it spawns the memory actor and compiles the
// update graph.
func (j *JoyAgents) Start(ctx context.Context, t *Trainer) error {
	o := t.Options()
	jc := j.Config
	jc.G, jc.Envs, jc.MaxTurns, jc.Seed = o.K, o.Envs, t.Budget(), o.Seed
	jc.Memory.HintMax = t.MaxNewTokens() - 1
	ja, err := agent.SpawnJoyAgents(ctx, t.Runtime(), t.Team(), agent.JoyConfig{Config: jc, Env: o.Env, EnvConfig: t.EnvConfig(), EnvActors: o.EnvActors,
		MemoryOptions: t.restartOptions(), EnvOptions: t.restartOptions()})
	if err != nil {
		return err
	}
	j.ja, j.roles = ja, t.Roles()
	return nil
}

// EvalPolicies implements Evaluator when the policies read the memory.
func (j *JoyAgents) EvalPolicies(p *rl.Policies) (*rl.Policies, func() (int64, int64), error) {
	if !j.Config.UseMemory || j.EvalNoMemory || j.ja == nil {
		return p, nil, nil
	}
	tr := j.ja.Trainer
	wrapped, use, err := joyagents.WithMemory(p, j.roles, tr.MemoryBank(), tr.Steps())
	if err != nil {
		return nil, nil, err
	}
	return wrapped, func() (int64, int64) {
		acts, reused, _ := use.Counts()
		return acts, reused
	}, nil
}

// Rollout implements Algorithm.
func (j *JoyAgents) Rollout(ctx context.Context) (Rollouts, error) { return j.ja.Trainer.Rollout(ctx) }

// Update implements Algorithm.
func (j *JoyAgents) Update(ctx context.Context, r Rollouts) (StepRecord, error) {
	ro, ok := r.(*joyagents.Rollouts)
	if !ok {
		return StepRecord{}, fmt.Errorf("%w: JoyAgents-R1 cannot update on %T", ErrAlgorithm, r)
	}
	s, err := j.ja.Trainer.Train(ctx, ro)
	rec := StepRecord{Kind: "step", Step: int(s.Step) + 1, Reward: s.Reward, Success: s.SuccessRate, TeamReturn: s.Accuracy,
		Samples: s.Counts.NodeSamples + s.Counts.CompletionSamples, ZeroAdv: s.Adv.Zero, MemInserted: s.Memory.Inserted + s.Memory.Replaced}
	for _, u := range s.Updates {
		rec.Trained += u.Samples
	}
	if a := s.Counts.Actions; a > 0 {
		rec.MemReused = float64(s.Counts.SkippedActions) / float64(a)
		rec.MemHinted = float64(s.Counts.HintedActions) / float64(a)
	}
	for _, n := range s.MemorySize {
		rec.MemSize += n
	}
	fillUpd(&rec, s.Updates)
	return rec, err
}

// Stop implements Algorithm.
func (j *JoyAgents) Stop(context.Context) {
	if j.ja != nil {
		j.ja.Kill(context.Background())
		j.ja = nil
	}
}
