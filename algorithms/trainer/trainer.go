package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/joyagents"
	"troupe/algorithms/policy"
	"troupe/algorithms/policy/tokenizer"
	"troupe/algorithms/rl"
	"troupe/internal/curves"
	"troupe/runtime"
)

// Trainer runs one training run of a team of policy actors through its
// phases. New spawns the team; WarmStart, Evaluate, Test, Start, Step and
// Checkpoint are the phases, which Run calls in order; Close releases the
// actors and files. A Trainer is not safe for concurrent use.
type Trainer struct {
	o    Options
	rt   actors.Runtime
	algo Algorithm
	team *agent.Team

	ecfg envs.Config // the environment's configuration (Single applied)
	// lastSolved is the last evaluation's episode outcomes (evalOn), for
	// Test's per-grid record.
	lastSolved []bool
	roles      []string
	ctxLen     int // the policies' context: observation, action and hint room
	maxNew     int // the longest action in tokens, EOS included
	budget     int // the turn cap of training and evaluation episodes
	hintRoom   int

	start   time.Time
	cpu0    time.Duration
	res     Result
	metrics *os.File
	enc     *json.Encoder

	sampledPols, greedyPols *rl.Policies
	// evalWrap, once the algorithm started and reads a memory when it acts,
	// wraps evaluation policies (Evaluator).
	evalWrap func(*rl.Policies) (*rl.Policies, func() (actions, reused int64), error)
	started  bool

	t0      time.Time // the first RL step's start
	tokens0 int64     // the team's tokens at t0

	teamCfg agent.TeamConfig // what spawned the team (rollout workers copy it)
	tl      timelineState
	rs      resumeState // checkpoints, resume and recovery (resume.go)
}

// New checks o, spawns the team of policy actors on rt and opens the run's
// output directory. The caller calls Close when done.
func New(ctx context.Context, rt actors.Runtime, o Options) (*Trainer, error) {
	o.Defaults()
	t := &Trainer{o: o, rt: rt, start: time.Now(), cpu0: cpuTime()}
	algo := o.Algorithm
	var err error
	if algo == nil {
		if algo, err = NewAlgorithm(o); err != nil {
			return nil, err
		}
	}
	if algo, err = withRolloutWorkers(o, algo); err != nil {
		return nil, err
	}
	t.algo = algo
	t.ecfg = o.EnvConfig
	t.ecfg.Single = o.Single
	if s, ok := algo.(interface{ SingleAgent() bool }); ok && s.SingleAgent() {
		t.ecfg.Single = true
	}
	probe, err := envs.New(o.Env, t.ecfg, 1)
	if err != nil {
		return nil, fmt.Errorf("environment %s: %w", o.Env, err)
	}
	t.roles = probe.Roles()
	if t.ctxLen, t.maxNew, err = Context(o.Env, t.ecfg); err != nil {
		return nil, err
	}
	agg, err := grpo.ParseAggregation(o.PPO.Aggregation)
	if err != nil {
		return nil, err
	}
	if h, ok := algo.(interface{ HintRoom(maxNew int) int }); ok {
		// A hint is a prefix and one action; the context grows by as much,
		// so the observation is never cut to make room for it.
		t.hintRoom = h.HintRoom(t.maxNew)
		t.ctxLen += t.hintRoom
	}
	t.budget = o.MaxTurns
	if t.budget == 0 {
		t.budget = Budget(t.ecfg)
	}
	if err := t.spawnTeam(ctx, agg); err != nil {
		return nil, err
	}
	if o.OutDir != "" {
		if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
			t.Close(ctx)
			return nil, fmt.Errorf("out dir: %w", err)
		}
		f, err := openMetrics(filepath.Join(o.OutDir, "metrics.jsonl"), o.Resume != "")
		if err != nil {
			t.Close(ctx)
			return nil, fmt.Errorf("metrics file: %w", err)
		}
		t.metrics, t.enc = f, json.NewEncoder(f)
	}
	t.sampledPols = t.team.EvalPolicies(1)
	if o.Eval.Temp > 0 {
		t.sampledPols = t.team.EvalPolicies(o.Eval.Temp)
	}
	t.greedyPols = t.team.GreedyPolicies()
	return t, nil
}

// spawnTeam spawns the policy actors and says what they are and where they
// compute.
func (t *Trainer) spawnTeam(ctx context.Context, agg grpo.Aggregation) error {
	o := t.o
	tok, _ := tokenizer.NewChar(envs.Alphabet())
	loss := grpo.DefaultConfig()
	loss.Aggregation = agg
	loss.ConstNorm = float64(t.maxNew)
	optim := policy.DefaultOptim()
	optim.LR = o.PPO.LR
	optim.WeightDecay = 0
	pc := agent.Config{
		Model:        policy.Config{Layers: o.Model.Layers, Heads: o.Model.Heads, Width: o.Model.Width, Context: t.ctxLen, Vocab: tok.Vocab()},
		Seed:         uint64(o.Seed) + 1,
		Optim:        optim,
		Loss:         loss,
		Epochs:       o.PPO.Epochs,
		MiniBatch:    o.PPO.MiniBatch,
		Shuffle:      o.PPO.Shuffle,
		MaxNewTokens: t.maxNew,
		Temperature:  o.SampleTemp,
		Backend:      o.Model.Backend,
		KVHeads:      o.Model.KVHeads,
		ModelDir:     o.Model.Dir,
		BaseBF16:     o.Model.BaseBF16,
		ComputeBF16:  o.Model.ComputeBF16,
	}
	if o.Async.RolloutWorkers > 0 { // the learner trains on stale samples
		pc.Decoupled, pc.ISCap = true, o.Async.ISCap
	}
	if o.Model.LoRARank > 0 {
		pc.LoRA = policy.DefaultLoRA()
		pc.LoRA.Rank, pc.LoRA.Alpha, pc.LoRA.BaseModel = o.Model.LoRARank, float64(2*o.Model.LoRARank), o.Model.Dir
	}
	gpus, err := policyGPUs(ctx, t.rt, o.Model.GPUsPerPolicy)
	if err != nil {
		return err
	}
	tc := agent.TeamConfig{Roles: t.roles, PerRole: o.PerRole, Policy: pc, Named: true, NamePrefix: o.ActorPrefix, SharedBase: o.Model.SharedBase, Replicas: o.Model.Replicas}
	if gpus > 0 {
		tc.SpawnOptions = append(tc.SpawnOptions, actors.GPUs(gpus))
	}
	if o.Recover { // a lost policy actor comes back, and the run restores it
		tc.SpawnOptions = append(tc.SpawnOptions, actors.MaxRestarts(recoverLimit))
	}
	if o.Model.Init != "" {
		tc.Checkpoints = map[string]string{}
		names := []string{rl.SharedName}
		if o.PerRole {
			names = t.roles
		}
		for _, n := range names {
			tc.Checkpoints[n] = o.Model.Init + n
		}
		t.o.Warm.Episodes = 0
	}
	spawn := tc // the rollout workers copy tc, without the learners' place
	if n := o.Async.LearnerNode; n != "" {
		spawn.SpawnOptions = append(slices.Clone(tc.SpawnOptions), actors.NodeAffinity(n, true))
	}
	team, err := t.spawnTeamResuming(ctx, spawn)
	if err != nil {
		return err
	}
	t.team, t.teamCfg = team, tc
	ws, err := team.Weights(ctx)
	if err != nil {
		team.Kill(context.Background())
		return err
	}
	t.res.Policies = len(ws)
	for _, w := range ws {
		t.res.Params = w.Params
		if w.Context < t.ctxLen {
			team.Kill(context.Background())
			return fmt.Errorf("%s: policy %s has context %d, this run needs %d (%s %dx%d observations%s)",
				o.Model.Init, w.Name, w.Context, t.ctxLen, o.Env, t.ecfg.Width, t.ecfg.Height, map[bool]string{true: " and memory hints"}[t.hintRoom > 0])
		}
	}
	shape := fmt.Sprintf("L%d C%d ctx %d", o.Model.Layers, o.Model.Width, t.ctxLen)
	if w := ws[team.Names[0]]; o.Model.Dir != "" {
		shape = fmt.Sprintf("%s from %s, ctx %d", w.Family, o.Model.Dir, w.Context)
	} else {
		shape = w.Family + " " + shape
	}
	if o.Model.ComputeBF16 { // the actors refuse to start when they cannot
		shape += ", BF16 matmuls on float32 weights"
	}
	if o.Model.SharedBase {
		t.logf("%s: 1 policy actor holding adapters %v on one base, %d trainable params each (%s), roles %v", o.Name, team.Names, t.res.Params, shape, t.roles)
	} else {
		t.logf("%s: %d policy actor(s) %v, %d params each (%s), roles %v", o.Name, len(ws), team.Names, t.res.Params, shape, t.roles)
	}
	t.logf("%s", placements(ctx, team, ws))
	if n := team.Replicas(); n > 1 {
		t.logf("%s", replicaPlacements(ctx, team, n))
	}
	mbDesc := fmt.Sprint(o.PPO.MiniBatch)
	switch o.PPO.MiniBatch {
	case 0:
		mbDesc = fmt.Sprint(agent.DefaultMiniBatch)
	case agent.WholeBatch:
		mbDesc = "whole batch"
	}
	t.logf("PPO: mini-batch %s, %d epoch(s), %s, lr %.0e; group filter %q ratio %.2f; Dr. MAS %v", mbDesc, o.PPO.Epochs, agg, o.PPO.LR, o.ATGRPO.Filter, o.ATGRPO.FilterRatio, o.DrMAS)
	return nil
}

// Options returns the run's options with their defaults filled in.
func (t *Trainer) Options() Options { return t.o }

// Runtime returns the runtime the team runs on.
func (t *Trainer) Runtime() actors.Runtime { return t.rt }

// Team returns the team of policy actors.
func (t *Trainer) Team() *agent.Team { return t.team }

// Roles returns the environment's roles.
func (t *Trainer) Roles() []string { return t.roles }

// EnvConfig returns the environment's configuration as the run uses it.
func (t *Trainer) EnvConfig() envs.Config { return t.ecfg }

// Budget is the turn cap of training and evaluation episodes.
func (t *Trainer) Budget() int { return t.budget }

// MaxNewTokens is the longest action in tokens, EOS included.
func (t *Trainer) MaxNewTokens() int { return t.maxNew }

// NewEnv returns a factory of the run's environment: instance i gets seed
// base+i, or with base < 0 the derived seed it is given (training).
func (t *Trainer) NewEnv(base int64) atgrpo.EnvFactory { return EnvFactory(t.o.Env, t.ecfg, base) }

func (t *Trainer) logf(format string, a ...any) {
	if t.o.Log != nil {
		fmt.Fprintf(t.o.Log, format+"\n", a...)
	}
}

// record appends r to metrics.jsonl with the run's elapsed time.
func (t *Trainer) record(r StepRecord) {
	r.Elapsed = time.Since(t.start).Seconds()
	if t.enc != nil {
		_ = t.enc.Encode(r)
	}
}

// WarmStart fine-tunes the policies on expert transcripts (Options.Warm*)
// and saves them as warm-<policy> in the output directory. It does nothing
// when the run starts from checkpoints (Options.Init) or WarmEpisodes is 0.
func (t *Trainer) WarmStart(ctx context.Context) error {
	o := t.o
	if o.Warm.Episodes <= 0 {
		return nil
	}
	seeds := make([]int64, o.Warm.Episodes)
	for i := range seeds {
		seeds[i] = int64(i)
	}
	// Noise actions are executed but not recorded: the planner then sees
	// wrong tool suggestions and off-path states with correct labels.
	topts := envs.TranscriptOptions{Noise: o.Warm.Noise, NoiseSeed: o.Seed}
	ex, ts, err := envs.Transcripts(o.Env, t.ecfg, seeds, topts)
	if err != nil {
		return fmt.Errorf("warm start: %w", err)
	}
	if o.Warm.Hints > 0 {
		ex = withHints(ex, o.Warm.Hints, o.Seed)
	}
	t0 := time.Now()
	st, err := t.team.SFT(ctx, ex, agent.SFTRequest{Epochs: o.Warm.Epochs, BatchSize: 32, LR: o.Warm.LR, Seed: uint64(o.Seed)})
	if err != nil {
		return fmt.Errorf("warm start: %w", err)
	}
	for _, name := range t.team.Names {
		s := st[name]
		t.logf("warm start %s: %d examples from %d expert episodes (%d solved), %d SFT steps, loss %.3f -> %.3f, %.1fs",
			name, len(ex), ts.Episodes, ts.Successes, s.Steps, s.FirstLoss, s.LastLoss, time.Since(t0).Seconds())
	}
	t.res.WarmWall = time.Since(t0)
	if o.OutDir != "" {
		if _, err := t.team.Save(ctx, o.OutDir, "warm-", map[string]string{"env": o.Env, "stage": "warm start"}); err != nil {
			return err
		}
	}
	return nil
}

// evalOn evaluates pols on n episodes from seed.
func (t *Trainer) evalOn(ctx context.Context, pols *rl.Policies, seed int64, n int, step int) (Point, error) {
	var reused func() (int64, int64)
	if t.evalWrap != nil {
		var err error
		if pols, reused, err = t.evalWrap(pols); err != nil {
			return Point{}, err
		}
	}
	es, err := atgrpo.Evaluate(ctx, pols, EnvFactory(t.o.Env, t.ecfg, seed), n, t.budget, 1, 7)
	if err != nil {
		return Point{}, err
	}
	p := Point{Step: step, Success: es.SuccessRate, StdErr: es.StdErr, Episodes: n, Reward: es.TeamReturn, Invalid: es.Invalid}
	t.lastSolved = es.Solved
	if reused != nil {
		if acts, re := reused(); acts > 0 {
			p.Reused = float64(re) / float64(acts)
		}
	}
	return p, nil
}

// Evaluate runs the validation range (Options.EvalEpisodes from EvalSeed)
// with sampled or greedy decoding and records it as of step.
func (t *Trainer) Evaluate(ctx context.Context, step int, greedy bool) (Point, error) {
	pols, kind, decode := t.sampledPols, "eval", "sampled"
	if greedy {
		pols, kind, decode = t.greedyPols, "eval-greedy", "greedy"
	}
	p, err := t.evalOn(ctx, pols, t.o.Eval.Seed, t.o.Eval.Episodes, step)
	if err != nil {
		return p, fmt.Errorf("evaluate: %w", err)
	}
	if !greedy {
		t.res.Evals = append(t.res.Evals, p)
	}
	t.record(StepRecord{Kind: kind, Step: step, Success: p.Success, TeamReturn: p.Reward, Invalid: p.Invalid,
		Split: "validation", Decode: decode, Episodes: p.Episodes, StdErr: p.StdErr})
	return p, nil
}

// Test runs the test range (Options.TestEpisodes from TestSeedStart),
// greedy then sampled, and records both as of step; nil when TestEpisodes
// is 0.
func (t *Trainer) Test(ctx context.Context, step int) (*Test, error) {
	if t.o.Eval.TestEpisodes <= 0 {
		return nil, nil
	}
	t0 := time.Now()
	var out Test
	for _, greedy := range []bool{true, false} {
		pols, decode := t.sampledPols, "sampled"
		if greedy {
			pols, decode = t.greedyPols, "greedy"
		}
		p, err := t.evalOn(ctx, pols, t.o.Eval.TestSeed, t.o.Eval.TestEpisodes, step)
		if err != nil {
			return nil, fmt.Errorf("test: %w", err)
		}
		if greedy {
			out.Greedy, out.GreedySolved = p, t.lastSolved
		} else {
			out.Sampled, out.SampledSolved = p, t.lastSolved
		}
		t.record(StepRecord{Kind: "test", Step: step, Success: p.Success, TeamReturn: p.Reward, Invalid: p.Invalid,
			Split: "test", Decode: decode, Episodes: p.Episodes, StdErr: p.StdErr})
	}
	t.res.TestWall += time.Since(t0)
	return &out, nil
}

// Start starts the algorithm on the team (its actors, environment hosts)
// and, when it reads a memory as it acts, makes evaluation read it too.
func (t *Trainer) Start(ctx context.Context) error {
	if t.started {
		return nil
	}
	if err := t.algo.Start(ctx, t); err != nil {
		return err
	}
	t.started = true
	if ev, ok := t.algo.(Evaluator); ok {
		t.evalWrap = ev.EvalPolicies
	}
	t.t0 = time.Now()
	t.tokens0 = totalTokens(ctx, t.team)
	return nil
}

// Step runs RL step s (1-based): the algorithm's Rollout, then its Update,
// and records the step with its wall time and the team's tokens per second
// since the first step.
func (t *Trainer) Step(ctx context.Context, s int) (StepRecord, error) {
	if err := t.Start(ctx); err != nil {
		return StepRecord{}, err
	}
	ts := time.Now()
	before := t.teamSnapshot(ctx)
	ro, err := t.algo.Rollout(ctx)
	var r StepRecord
	if err == nil {
		r, err = t.algo.Update(ctx, ro)
	}
	if err != nil {
		return r, fmt.Errorf("%s step %d: %w", t.algo.Name(), s, err)
	}
	r.StepWall = time.Since(ts).Seconds()
	r.Timeline = t.timeline(ctx, before, ts)
	if err := t.checkReplicas(ctx, &r); err != nil {
		return r, fmt.Errorf("%s step %d: %w", t.algo.Name(), s, err)
	}
	r.TokensPerS = float64(totalTokens(ctx, t.team)+t.workerTokens()-t.tokens0) / time.Since(t.t0).Seconds()
	t.rs.annotate(&r)
	t.record(r)
	return r, nil
}

// Checkpoint saves every policy under dir as <prefix><policy>, a Hugging
// Face model directory, and returns the paths by policy name.
func (t *Trainer) Checkpoint(ctx context.Context, dir, prefix string, meta map[string]string) (map[string]string, error) {
	return t.team.Save(ctx, dir, prefix, meta)
}

// Close stops the algorithm, kills the team and closes metrics.jsonl.
func (t *Trainer) Close(ctx context.Context) error {
	if t.started {
		t.algo.Stop(ctx)
		t.started = false
	}
	if t.team != nil {
		t.team.Kill(ctx)
	}
	if t.metrics != nil {
		err := t.metrics.Close()
		t.metrics, t.enc = nil, nil
		return err
	}
	return nil
}

// Run executes the whole run with o on rt: New, then Trainer.Run, then Close.
func Run(ctx context.Context, rt actors.Runtime, o Options) (Result, error) {
	t, err := New(ctx, rt, o)
	if err != nil {
		return Result{}, err
	}
	defer t.Close(context.Background())
	return t.Run(ctx)
}

// Run runs the phases in order: warm start; validation (sampled and greedy)
// and test evaluation; Options.Steps RL steps with validation every
// EvalEvery steps and resumable checkpoints every CkptEvery; the final
// evaluations; the final checkpoints and the learning curves. It logs each
// phase. With Options.Resume it continues from the last checkpoint instead
// (resume.go), and with Options.Recover it restores the last checkpoint
// after losing a policy actor and replays the steps since.
func (t *Trainer) Run(ctx context.Context) (Result, error) {
	o := t.o
	res := &t.res
	var (
		resumed bool
		start   int
		err     error
	)
	if o.Resume != "" {
		if resumed, start, err = t.resume(ctx); err != nil {
			return *res, err
		}
	}
	p0, g0 := Point{Success: res.WarmSuccess, Reward: res.WarmReward}, res.WarmGreedy
	if !resumed {
		if err := t.WarmStart(ctx); err != nil {
			return *res, err
		}
		if p0, err = t.Evaluate(ctx, 0, false); err != nil {
			return *res, err
		}
		if g0, err = t.Evaluate(ctx, 0, true); err != nil {
			return *res, err
		}
		res.WarmSuccess, res.WarmReward, res.WarmGreedy = p0.Success, p0.Reward, g0
		t.logf("validation before RL (%d episodes, seeds %d..): success %.1f%% ± %.1f sampled, %.1f%% ± %.1f greedy; team return %.3f, invalid %.1f%%",
			o.Eval.Episodes, o.Eval.Seed, 100*p0.Success, 100*p0.StdErr, 100*g0.Success, 100*g0.StdErr, p0.Reward, 100*p0.Invalid)
		if res.WarmTest, err = t.Test(ctx, 0); err != nil {
			return *res, err
		}
		if w := res.WarmTest; w != nil {
			t.logf("test before RL (%d episodes, seeds %d..): success %.1f%% ± %.1f greedy, %.1f%% ± %.1f sampled",
				o.Eval.TestEpisodes, o.Eval.TestSeed, 100*w.Greedy.Success, 100*w.Greedy.StdErr, 100*w.Sampled.Success, 100*w.Sampled.StdErr)
		}
	}

	if err := t.Start(ctx); err != nil {
		return *res, err
	}
	if err := t.restoreAlgorithm(ctx); err != nil {
		return *res, err
	}
	if err := t.checkLearners(ctx); err != nil { // the incarnations to watch
		return *res, err
	}
	if !resumed && t.checkpointing() {
		if err := t.commitCheckpoint(ctx, 0); err != nil {
			return *res, err
		}
	}
	progress := o.Progress
	if o.Steps == 0 {
		progress = nil
	}
	bar := NewBar(progress, o.Steps)
	for s := start + 1; s <= o.Steps; s++ {
		r, err := t.Step(ctx, s)
		if err == nil {
			err = t.checkLearners(ctx)
		}
		if err != nil {
			back, err := t.recoverFrom(ctx, s, err)
			if err != nil {
				return *res, err
			}
			s = back
			continue
		}
		if r.Resume > 0 {
			t.logf("resume: step %d, the first after the restart, ended %.1fs after the process started", s, r.Resume)
		}
		bar.Update(s, fmt.Sprintf("reward %+.3f  success %3.0f%%  clip %.3f  kl %.4f  gn %.2f  zero-adv %2.0f%%  %6.0f tok/s",
			r.Reward, 100*r.Success, r.ClipFrac, r.ApproxKL, r.GradNorm, 100*r.ZeroAdv, r.TokensPerS))
		if o.Eval.Every > 0 && s%o.Eval.Every == 0 && s < o.Steps {
			p, err := t.Evaluate(ctx, s, false)
			if err != nil {
				back, err := t.recoverFrom(ctx, s, err)
				if err != nil {
					return *res, err
				}
				s = back
				continue
			}
			bar.Note(fmt.Sprintf("step %d validation success %.0f%%", s, 100*p.Success))
		}
		if t.checkpointing() && (s%o.CkptEvery == 0 || s == o.Steps) {
			if err := t.commitCheckpoint(ctx, s); err != nil {
				back, err := t.recoverFrom(ctx, s, err)
				if err != nil {
					return *res, err
				}
				s = back
				continue
			}
		}
	}
	bar.Done()
	res.Steps = o.Steps
	res.TrainWall = time.Since(t.t0)
	if o.Steps > start {
		res.TokensPerS = float64(totalTokens(ctx, t.team)+t.workerTokens()-t.tokens0) / res.TrainWall.Seconds()
		res.StepWall = res.TrainWall / time.Duration(o.Steps-start)
	}
	pf, err := t.Evaluate(ctx, o.Steps, false)
	if err != nil {
		return *res, err
	}
	res.Final = pf
	if res.FinalGreedy, err = t.Evaluate(ctx, o.Steps, true); err != nil {
		return *res, err
	}
	t.logf("validation after %d RL steps: success %.1f%% ± %.1f sampled (was %.1f%%), %.1f%% ± %.1f greedy (was %.1f%%); team return %.3f, invalid %.1f%%; RL %.0fs (%.2fs a step), %.0f tokens/s",
		o.Steps, 100*pf.Success, 100*pf.StdErr, 100*p0.Success, 100*res.FinalGreedy.Success, 100*res.FinalGreedy.StdErr, 100*g0.Success,
		pf.Reward, 100*pf.Invalid, res.TrainWall.Seconds(), res.StepWall.Seconds(), res.TokensPerS)
	if pf.Reused > 0 {
		t.logf("memory: %.0f%% of validation actions answered from memory", 100*pf.Reused)
	}
	if res.FinalTest, err = t.Test(ctx, o.Steps); err != nil {
		return *res, err
	}
	if f := res.FinalTest; f != nil {
		t.logf("test after %d RL steps (%d episodes, seeds %d..): success %.1f%% ± %.1f greedy (was %.1f%%), %.1f%% ± %.1f sampled (was %.1f%%); %.0fs of test evaluation",
			o.Steps, o.Eval.TestEpisodes, o.Eval.TestSeed, 100*f.Greedy.Success, 100*f.Greedy.StdErr, 100*res.WarmTest.Greedy.Success,
			100*f.Sampled.Success, 100*f.Sampled.StdErr, 100*res.WarmTest.Sampled.Success, res.TestWall.Seconds())
	}
	if o.OutDir != "" {
		meta := map[string]string{"env": o.Env, "run": o.Name}
		res.Checkpoints, err = t.Checkpoint(ctx, o.OutDir, "", meta)
		if err != nil {
			return *res, err
		}
		names := make([]string, 0, len(res.Checkpoints))
		for n := range res.Checkpoints {
			names = append(names, n)
		}
		sort.Strings(names)
		var files []string
		for _, n := range names {
			files = append(files, res.Checkpoints[n])
		}
		t.logf("checkpoints: %s", strings.Join(files, " "))
		if err := Replot(o.OutDir, o.Name); err != nil {
			return *res, err
		}
		t.logf("metrics: %s, plots: %s", filepath.Join(o.OutDir, "metrics.jsonl"), filepath.Join(o.OutDir, "curves.{png,svg}"))
	}
	res.Wall = time.Since(t.start)
	res.CPU = cpuTime() - t.cpu0
	t.logf("wall %s, process CPU %s", res.Wall.Round(time.Second), res.CPU.Round(time.Second))
	return *res, nil
}

// withHints returns ex with a share of the examples extended by a memory
// hint, as JoyAgents-R1's memory extends prompts: HintPrefix and the
// expert's own answer with probability 3/4, otherwise the answer of another
// example of the same role that differs from it, so that the policy learns
// to weigh a hint, not to copy it. The result is a new slice; the originals
// stay.
func withHints(ex []envs.Example, share float64, seed int64) []envs.Example {
	r := rand.New(rand.NewPCG(uint64(seed), 0x4e17))
	byRole := map[string][]string{}
	for _, e := range ex {
		byRole[e.Role] = append(byRole[e.Role], e.Action)
	}
	out := slices.Clone(ex)
	for _, e := range ex {
		if r.Float64() >= share {
			continue
		}
		hint := e.Action
		if r.Float64() >= 0.75 {
			pool := byRole[e.Role]
			for try := 0; try < 8; try++ {
				if a := pool[r.IntN(len(pool))]; a != e.Action {
					hint = a
					break
				}
			}
		}
		h := e
		h.Obs += joyagents.HintPrefix + hint
		out = append(out, h)
	}
	return out
}

// cpuTime is the process's user+system CPU time: on a shared machine the
// steadier measure of work than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fillUpd(r *StepRecord, upd map[string]rl.UpdateStats) {
	n := 0
	for _, u := range upd {
		r.Loss += u.Loss
		r.Entropy += u.Entropy
		r.ClipFrac += u.ClipFrac
		r.ApproxKL += u.ApproxKL
		r.GradNorm += u.GradNorm
		r.OptSteps += u.OptSteps
		n++
	}
	if n > 0 {
		r.Loss /= float64(n)
		r.Entropy /= float64(n)
		r.ClipFrac /= float64(n)
		r.ApproxKL /= float64(n)
		r.GradNorm /= float64(n)
	}
}

func totalTokens(ctx context.Context, t *agent.Team) int64 {
	ws, err := t.Weights(ctx)
	if err != nil {
		return 0
	}
	var n int64
	for _, w := range ws {
		n += w.GenTokens + w.TrainTok
	}
	return n
}

// Replot draws dir/curves.png and dir/curves.svg from dir/metrics.jsonl,
// titled title (troupe plot does the same for any runs).
func Replot(dir, title string) error {
	run, err := curves.ReadRun(dir)
	if err != nil {
		return fmt.Errorf("replot: %w", err)
	}
	return curves.Draw(filepath.Join(dir, "curves"), []*curves.Run{run}, curves.Options{Title: title})
}

// policyGPUs resolves Options.GPUsPerPolicy: a negative value means one GPU
// per policy when the cluster has any GPU and none otherwise, so a script
// run against a GPU cluster places its policies on GPUs with no flag.
func policyGPUs(ctx context.Context, rt actors.Runtime, want float64) (float64, error) {
	if want >= 0 {
		return want, nil
	}
	sr, ok := rt.(interface {
		Status(context.Context) (runtime.Status, error)
	})
	if !ok {
		return 0, nil
	}
	st, err := sr.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("cluster status (to choose --gpus-per-policy): %w", err)
	}
	for _, n := range st.Nodes {
		if n.State != "dead" && n.State != "drained" && n.Total.GPUs > 0 {
			return 1, nil
		}
	}
	return 0, nil
}

// placements is one line saying where each policy computes, e.g.
// "placement: planner cpu metered as simulated GPU 0 on node n1 GPU [0]; ...".
func placements(ctx context.Context, team *agent.Team, ws map[string]agent.WeightStats) string {
	where, _ := team.Placements(ctx)
	var parts []string
	for _, name := range team.Names {
		p := name + " " + ws[name].Backend
		if info, ok := where[name]; ok && info.Node != "" {
			p += " on node " + info.Node
			if len(info.GPUs) > 0 {
				p += fmt.Sprintf(" GPU %v", info.GPUs)
			}
		}
		parts = append(parts, p)
	}
	return "placement: " + strings.Join(parts, "; ")
}
