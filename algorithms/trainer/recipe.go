// Package recipe is the shared body of the training scripts in examples/:
// spawn a team of policy actors on the embedded cluster, warm-start them on
// expert transcripts, train with AT-GRPO (or JoyAgents-R1), evaluate on fixed
// held-out seeds with independent rollouts, and write metrics (JSONL),
// learning curves (PNG and SVG) and checkpoints. The scripts are thin flag
// wrappers around Run so that the results table can run the same recipes.
package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"troupe/algorithms/rl"
	"troupe/internal/curves"
	"troupe/runtime"
)

// ValidationSeed is the first seed of the validation range: episodes
// ValidationSeed..ValidationSeed+n-1. Every development decision of this
// project (observations, rewards, defaults) was made looking at these grids,
// so they measure nothing unseen. Warm-start transcripts use seeds from 0 up
// (far below) and training environments use 64-bit derived seeds.
const ValidationSeed = 1_000_000

// HeldOutSeed is ValidationSeed (its former name).
const HeldOutSeed = ValidationSeed

// TestSeed is the first seed of the test range, TestSeed..TestSeed+n-1:
// grids no decision looked at. Report results on it, tune on the
// validation range.
const TestSeed = 3_000_000

// Options configure one run.
type Options struct {
	Name      string // run label (plots, logs)
	Env       string // environment or preset
	EnvConfig envs.Config
	Algo      string // "atgrpo" or "joyagents"
	PerRole   bool
	Single    bool // single-agent baseline (EnvConfig.Single)

	Layers, Heads, Width int
	// Arch is the from-scratch policies' architecture: "gpt" or "llama"
	// (KVHeads key/value heads; 0: Heads).
	Arch    string
	KVHeads int
	// ModelDir, if set, is a pretrained Hugging Face model directory every
	// policy starts from (with its tokenizer and chat template) instead of
	// a from-scratch model.
	ModelDir string
	// LoRARank > 0 trains LoRA adapters of that rank (alpha 2·rank, every
	// projection of a block) on a frozen base of the Llama family, one
	// per policy; SharedBase puts every role's adapter in one actor on
	// one base (per-role policies only); BaseBF16 keeps the base in BF16.
	LoRARank   int
	SharedBase bool
	BaseBF16   bool
	// ComputeBF16 runs the Llama family's matmuls in BF16 (mixed precision).
	ComputeBF16 bool

	Steps    int // RL steps (0: warm start and evaluation only)
	K        int // AT-GRPO branches / JoyAgents G
	Envs     int // environments per step
	LR       float32
	Epochs   int // PPO epochs: passes over each step's batch
	Seed     int64
	MaxTurns int // 0: the environment's budget

	// MiniBatch is the PPO mini-batch in samples, one optimiser step each
	// (0: agent.DefaultMiniBatch, 16, verl's ppo_mini_batch_size in
	// PettingLLMs; -1: the whole batch in one step).
	MiniBatch int
	// Shuffle permutes each batch before splitting it (verl: off).
	Shuffle bool
	// Aggregation is the loss aggregation by verl's name: "token-mean"
	// (default, as PettingLLMs), "seq-mean-token-mean" or
	// "seq-mean-token-sum-norm" (Dr. GRPO).
	Aggregation string
	// Filter and FilterRatio are PettingLLMs' group filter (rl.GroupFilter:
	// "", "mean", "std", "dapo", "uid").
	Filter      string
	FilterRatio float64
	// DrMAS normalises advantages per (environment instance, agent), as
	// Dr. MAS does, instead of per group.
	DrMAS bool

	JoyTopK   int  // JoyAgents top-K groups (0: joyagents.DefaultTopK; -1: all)
	JoyMemory bool // JoyAgents memory
	// JoyNoHint and JoyNoReuse turn off the two ways an agent reads its
	// memory: retrieved answers in the prompt, and reuse of a
	// near-duplicate's answer without sampling.
	JoyNoHint, JoyNoReuse bool
	// JoyThreshold is the memory's insert/remove rule: "pooled" (default)
	// or "group-z" (the paper's μ ± 1.96σ inside each group).
	JoyThreshold string
	// JoyEvalNoMemory evaluates JoyAgents policies without their memory.
	JoyEvalNoMemory bool
	// JoyMemoryPerStep evolves the memory once per step, in the update,
	// instead of after every node position during sampling.
	JoyMemoryPerStep bool

	// EnvActors > 0 hosts the training environments in that many
	// environment host actors (envs.Pool) instead of stepping them in the
	// driver; the run is the same.
	EnvActors int

	// Init, if set, is a checkpoint path prefix: policy <name> starts from
	// Init+<name>+".safetensors" (a GPT) or the directory Init+<name> (a
	// Llama) (e.g. "runs/x/warm-") and the warm start
	// is skipped.
	Init         string
	WarmEpisodes int     // expert episodes for SFT (0: no warm start)
	WarmEpochs   int     // SFT passes
	WarmNoise    float64 // planner-side noise in transcripts (visits off-path states)
	WarmLR       float32
	// WarmHints is the share of warm-start examples shown with a memory
	// hint (HintPrefix + an answer: the expert's with probability 3/4,
	// another example's otherwise), so that a policy reads hints as the
	// memory gives them (JoyAgents-R1 with memory; 0: none).
	WarmHints float64

	SampleTemp   float32 // training sampling temperature (0: 1)
	EvalEpisodes int     // validation episodes of every evaluation (100)
	EvalSeed     int64   // first validation seed (0: ValidationSeed)
	EvalTemp     float32 // sampling temperature of evaluation (0: 1, on-policy)
	EvalEvery    int     // steps between mid-training evaluations (0: start and end only)
	// TestEpisodes > 0 evaluates the warm start and the final policies on
	// the test range (TestSeed.., or TestSeedStart), greedy and sampled.
	TestEpisodes  int
	TestSeedStart int64
	CkptEvery     int // steps between checkpoints (0: end only)

	// GPUsPerPolicy is the GPUs each policy actor asks for (fractions share
	// a GPU); negative means 1 when the cluster has GPUs and 0 otherwise.
	GPUsPerPolicy float64
	// Backend is the policies' compute backend: "auto" (follow the
	// placement), "cpu" or "cuda" (agent.Config.Backend).
	Backend string
	// ActorPrefix is put before the policy actors' names (the role names),
	// for runs side by side in one job (the results program).
	ActorPrefix string

	OutDir   string
	Progress io.Writer `json:"-"` // progress bar (nil: none)
	Log      io.Writer `json:"-"` // one-line messages (nil: none)
}

// Defaults fills zero fields with the planpath AT-GRPO defaults.
func (o *Options) Defaults() {
	if o.Env == "" {
		o.Env = "planpath"
	}
	if o.Algo == "" {
		o.Algo = "atgrpo"
	}
	if o.Layers == 0 {
		o.Layers = 2
	}
	if o.Heads == 0 {
		o.Heads = 4
	}
	if o.Width == 0 {
		o.Width = 64
	}
	if o.K == 0 {
		o.K = 4
	}
	if o.Envs == 0 {
		o.Envs = 8
	}
	if o.LR == 0 {
		o.LR = 3e-4
	}
	if o.Epochs == 0 {
		o.Epochs = 1
	}
	if o.WarmEpochs == 0 {
		o.WarmEpochs = 3
	}
	if o.WarmLR == 0 {
		o.WarmLR = 2e-3
	}
	if o.EvalEpisodes == 0 {
		o.EvalEpisodes = 100
	}
	if o.EvalSeed == 0 {
		o.EvalSeed = ValidationSeed
	}
	if o.TestSeedStart == 0 {
		o.TestSeedStart = TestSeed
	}
	if o.Aggregation == "" {
		o.Aggregation = grpo.TokenMean.String()
	}
	if o.Name == "" {
		o.Name = o.Env + "-" + o.Algo
	}
}

// Point is one evaluation.
type Point struct {
	Step     int     `json:"step"`
	Success  float64 `json:"success"`
	StdErr   float64 `json:"stderr"` // of Success
	Episodes int     `json:"n"`
	Reward   float64 `json:"reward"`
	Invalid  float64 `json:"invalid"`
	Reused   float64 `json:"reused,omitempty"` // share of actions answered from memory (JoyAgents)
}

// Test is the test-range evaluation of one set of policies.
type Test struct {
	Greedy, Sampled Point
}

// Result summarises a run.
type Result struct {
	Params      int               // parameters per policy
	Policies    int               // number of policy actors
	WarmSuccess float64           // validation success after the warm start (sampled)
	WarmReward  float64           // validation team return after the warm start
	Final       Point             // validation evaluation at the end (sampled)
	FinalGreedy Point             // validation evaluation at the end, greedy
	Evals       []Point           // every validation evaluation (sampled), step order
	WarmTest    *Test             // test range after the warm start (TestEpisodes > 0)
	FinalTest   *Test             // test range at the end (TestEpisodes > 0)
	Steps       int               // RL steps run
	Wall        time.Duration     // whole run including warm start and evals
	WarmWall    time.Duration     // the warm start (SFT) alone
	CPU         time.Duration     // process CPU time over the run (load-independent; all cells of a process share it)
	TrainWall   time.Duration     // RL steps only
	TestWall    time.Duration     // the test-range evaluations
	StepWall    time.Duration     // mean wall time of an RL step
	TokensPerS  float64           // generated+trained tokens per second of RL
	Checkpoints map[string]string // final checkpoint files by policy name
}

// StepRecord is one JSONL line of metrics.jsonl. Kinds: "warm"; "step" (one
// RL step: its training statistics); "eval" (validation range, sampled at
// the evaluation temperature); "eval-greedy" (validation range, greedy);
// "test" (test range, Decode "greedy" or "sampled", at steps 0 and the
// last).
type StepRecord struct {
	Kind       string  `json:"kind"`
	Step       int     `json:"step"`
	Reward     float64 `json:"reward,omitempty"`
	Success    float64 `json:"success"`
	TeamReturn float64 `json:"team_return,omitempty"`
	Loss       float64 `json:"loss,omitempty"`
	Samples    int     `json:"samples,omitempty"`
	TokensPerS float64 `json:"tokens_per_s,omitempty"`
	Elapsed    float64 `json:"elapsed_s"`
	Invalid    float64 `json:"invalid,omitempty"`

	// Step statistics (kind "step"), averaged over the policies that
	// trained; PPO figures token-weighted over their optimiser steps.
	ClipFrac    float64 `json:"clip_frac"`     // share of tokens the PPO clip zeroed
	ApproxKL    float64 `json:"approx_kl"`     // k3 estimate of KL(π_sampling ‖ π) over the trained tokens
	Entropy     float64 `json:"entropy"`       // −mean log π of the sampled tokens
	GradNorm    float64 `json:"grad_norm"`     // pre-clip gradient norm, mean over optimiser steps
	ZeroAdv     float64 `json:"zero_adv_frac"` // share of the trained samples with advantage 0
	SampledZero float64 `json:"sampled_zero_adv_frac,omitempty"`
	Trained     int     `json:"trained,omitempty"`   // samples the policies trained on (after filter / top-K)
	OptSteps    int     `json:"opt_steps,omitempty"` // optimiser steps, summed over policies
	StepWall    float64 `json:"step_s,omitempty"`    // wall time of the step
	MemReused   float64 `json:"mem_reused,omitempty"`
	MemHinted   float64 `json:"mem_hinted,omitempty"`
	MemSize     int     `json:"mem_size,omitempty"`
	MemInserted int     `json:"mem_inserted,omitempty"`

	// Evaluations (kinds "eval", "eval-greedy", "test").
	Split    string  `json:"split,omitempty"`  // "validation" or "test"
	Decode   string  `json:"decode,omitempty"` // "sampled" or "greedy"
	Episodes int     `json:"n,omitempty"`
	StdErr   float64 `json:"stderr,omitempty"`
}

// Context returns the model context a policy needs for env: BOS, the longest
// observation, SEP, the longest action and EOS.
func Context(env string, cfg envs.Config) (ctxLen, maxNew int, err error) {
	obs, err := envs.MaxObsLen(env, cfg)
	if err != nil {
		return 0, 0, err
	}
	act, err := envs.MaxActionLen(env, cfg)
	if err != nil {
		return 0, 0, err
	}
	return obs + act + 3, act + 1, nil
}

// EnvFactory returns a factory of o's environment with the given seed
// offset: instance i of evaluation gets seed base+i, training instances the
// derived seed they are given (base < 0).
func EnvFactory(env string, cfg envs.Config, base int64) atgrpo.EnvFactory {
	return func(i int, seed int64) (envs.Env, error) {
		if base >= 0 {
			seed = base + int64(i)
		}
		return envs.New(env, cfg, seed)
	}
}

// Budget is the turn cap used for training and evaluation: the largest
// budget an environment may have (planpath: max(W+H, 2·shortest) ≤ 2·W·H;
// we use the configured TurnBudget or a generous bound). Episodes end on their
// own budget first.
func Budget(cfg envs.Config) int {
	if cfg.TurnBudget > 0 {
		return cfg.TurnBudget
	}
	return 64
}

// Run executes the recipe.
func Run(ctx context.Context, rt actors.Runtime, o Options) (Result, error) {
	o.Defaults()
	start := time.Now()
	cpu0 := cpuTime()
	var res Result
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	ecfg := o.EnvConfig
	ecfg.Single = o.Single
	probe, err := envs.New(o.Env, ecfg, 1)
	if err != nil {
		return res, fmt.Errorf("environment %s: %w", o.Env, err)
	}
	roles := probe.Roles()
	ctxLen, maxNew, err := Context(o.Env, ecfg)
	if err != nil {
		return res, err
	}
	agg, err := grpo.ParseAggregation(o.Aggregation)
	if err != nil {
		return res, err
	}
	filter, err := rl.ParseFilterMethod(o.Filter)
	if err != nil {
		return res, err
	}
	gf := rl.GroupFilter{Method: filter, Ratio: o.FilterRatio}
	if err := gf.Validate(); err != nil {
		return res, err
	}
	useMemory := o.Algo == "joyagents" && o.JoyMemory
	hintRoom := 0
	if useMemory && !o.JoyNoHint {
		// A hint is HintPrefix and one action; the context grows by as much,
		// so the observation is never cut to make room for it.
		hintRoom = len(joyagents.HintPrefix) + maxNew - 1
		ctxLen += hintRoom
	}
	tok, _ := policy.NewCharTokenizer(envs.Alphabet())
	loss := grpo.DefaultConfig()
	loss.Aggregation = agg
	loss.ConstNorm = float64(maxNew)
	optim := policy.DefaultOptim()
	optim.LR = o.LR
	optim.WeightDecay = 0
	pc := agent.Config{
		Model:        policy.Config{Layers: o.Layers, Heads: o.Heads, Width: o.Width, Context: ctxLen, Vocab: tok.Vocab()},
		Seed:         uint64(o.Seed) + 1,
		Optim:        optim,
		Loss:         loss,
		Epochs:       o.Epochs,
		MiniBatch:    o.MiniBatch,
		Shuffle:      o.Shuffle,
		MaxNewTokens: maxNew,
		Temperature:  o.SampleTemp,
		Backend:      o.Backend,
		Arch:         o.Arch,
		KVHeads:      o.KVHeads,
		ModelDir:     o.ModelDir,
		BaseBF16:     o.BaseBF16,
		ComputeBF16:  o.ComputeBF16,
	}
	if o.LoRARank > 0 {
		pc.LoRA = policy.DefaultLoRA()
		pc.LoRA.Rank, pc.LoRA.Alpha, pc.LoRA.BaseModel = o.LoRARank, float64(2*o.LoRARank), o.ModelDir
	}
	gpus, err := policyGPUs(ctx, rt, o.GPUsPerPolicy)
	if err != nil {
		return res, err
	}
	tc := agent.TeamConfig{Roles: roles, PerRole: o.PerRole, Policy: pc, Named: true, NamePrefix: o.ActorPrefix, SharedBase: o.SharedBase}
	if gpus > 0 {
		tc.SpawnOptions = append(tc.SpawnOptions, actors.GPUs(gpus))
	}
	if o.Init != "" {
		tc.Checkpoints = map[string]string{}
		names := []string{rl.SharedName}
		if o.PerRole {
			names = roles
		}
		for _, n := range names {
			tc.Checkpoints[n] = agent.CheckpointPath(o.Init, n)
		}
		o.WarmEpisodes = 0
	}
	team, err := agent.SpawnTeam(ctx, rt, tc)
	if err != nil {
		return res, err
	}
	defer team.Kill(context.Background())
	ws, err := team.Weights(ctx)
	if err != nil {
		return res, err
	}
	res.Policies = len(ws)
	for _, w := range ws {
		res.Params = w.Params
		if w.Context < ctxLen {
			return res, fmt.Errorf("%s: policy %s has context %d, this run needs %d (%s %dx%d observations%s)",
				o.Init, w.Name, w.Context, ctxLen, o.Env, ecfg.Width, ecfg.Height, map[bool]string{true: " and memory hints"}[hintRoom > 0])
		}
	}
	shape := fmt.Sprintf("L%d C%d ctx %d", o.Layers, o.Width, ctxLen)
	if w := ws[team.Names[0]]; o.ModelDir != "" {
		shape = fmt.Sprintf("%s from %s, ctx %d", w.Family, o.ModelDir, w.Context)
	} else if w.Family != "gpt" {
		shape = w.Family + " " + shape
	}
	if o.ComputeBF16 { // the actors refuse to start when they cannot
		shape += ", BF16 matmuls on float32 weights"
	}
	if o.SharedBase {
		logf("%s: 1 policy actor holding adapters %v on one base, %d trainable params each (%s), roles %v", o.Name, team.Names, res.Params, shape, roles)
	} else {
		logf("%s: %d policy actor(s) %v, %d params each (%s), roles %v", o.Name, len(ws), team.Names, res.Params, shape, roles)
	}
	logf("%s", placements(ctx, team, ws))
	mbDesc := fmt.Sprint(o.MiniBatch)
	switch o.MiniBatch {
	case 0:
		mbDesc = fmt.Sprint(agent.DefaultMiniBatch)
	case agent.WholeBatch:
		mbDesc = "whole batch"
	}
	logf("PPO: mini-batch %s, %d epoch(s), %s, lr %.0e; group filter %q ratio %.2f; Dr. MAS %v", mbDesc, o.Epochs, agg, o.LR, o.Filter, o.FilterRatio, o.DrMAS)

	if o.OutDir != "" {
		if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
			return res, fmt.Errorf("out dir: %w", err)
		}
	}
	var metrics *json.Encoder
	if o.OutDir != "" {
		f, err := os.Create(filepath.Join(o.OutDir, "metrics.jsonl"))
		if err != nil {
			return res, fmt.Errorf("metrics file: %w", err)
		}
		defer f.Close()
		metrics = json.NewEncoder(f)
	}
	record := func(r StepRecord) {
		r.Elapsed = time.Since(start).Seconds()
		if metrics != nil {
			_ = metrics.Encode(r)
		}
	}

	// Warm start.
	if o.WarmEpisodes > 0 {
		seeds := make([]int64, o.WarmEpisodes)
		for i := range seeds {
			seeds[i] = int64(i)
		}
		// Noise actions are executed but not recorded: the planner then
		// sees wrong tool suggestions and off-path states with correct
		// labels.
		topts := envs.TranscriptOptions{Noise: o.WarmNoise, NoiseSeed: o.Seed}
		ex, ts, err := envs.Transcripts(o.Env, ecfg, seeds, topts)
		if err != nil {
			return res, fmt.Errorf("warm start: %w", err)
		}
		if o.WarmHints > 0 {
			ex = withHints(ex, o.WarmHints, o.Seed)
		}
		t0 := time.Now()
		st, err := team.SFT(ctx, ex, agent.SFTRequest{Epochs: o.WarmEpochs, BatchSize: 32, LR: o.WarmLR, Seed: uint64(o.Seed)})
		if err != nil {
			return res, fmt.Errorf("warm start: %w", err)
		}
		for _, name := range team.Names {
			s := st[name]
			logf("warm start %s: %d examples from %d expert episodes (%d solved), %d SFT steps, loss %.3f -> %.3f, %.1fs",
				name, len(ex), ts.Episodes, ts.Successes, s.Steps, s.FirstLoss, s.LastLoss, time.Since(t0).Seconds())
		}
		res.WarmWall = time.Since(t0)
		if o.OutDir != "" {
			if _, err := team.Save(ctx, o.OutDir, "warm-", map[string]string{"env": o.Env, "stage": "warm start"}); err != nil {
				return res, err
			}
		}
	}
	sampledPols := team.EvalPolicies(1)
	if o.EvalTemp > 0 {
		sampledPols = team.EvalPolicies(o.EvalTemp)
	}
	greedyPols := team.GreedyPolicies()
	budget := o.MaxTurns
	if budget == 0 {
		budget = Budget(ecfg)
	}
	// memEval, once JoyAgents-R1 has a memory, wraps evaluation policies so
	// they read it as they act.
	var memEval func(*rl.Policies) (*rl.Policies, *joyagents.MemoryUse, error)
	evalOn := func(pols *rl.Policies, seed int64, n int, step int) (Point, error) {
		var use *joyagents.MemoryUse
		if memEval != nil {
			var err error
			if pols, use, err = memEval(pols); err != nil {
				return Point{}, err
			}
		}
		es, err := atgrpo.Evaluate(ctx, pols, EnvFactory(o.Env, ecfg, seed), n, budget, 1, 7)
		if err != nil {
			return Point{}, err
		}
		p := Point{Step: step, Success: es.SuccessRate, StdErr: es.StdErr, Episodes: n, Reward: es.TeamReturn, Invalid: es.Invalid}
		if use != nil {
			if acts, reused, _ := use.Counts(); acts > 0 {
				p.Reused = float64(reused) / float64(acts)
			}
		}
		return p, nil
	}
	evaluate := func(step int, greedy bool) (Point, error) {
		pols, kind, decode := sampledPols, "eval", "sampled"
		if greedy {
			pols, kind, decode = greedyPols, "eval-greedy", "greedy"
		}
		p, err := evalOn(pols, o.EvalSeed, o.EvalEpisodes, step)
		if err != nil {
			return p, err
		}
		if !greedy {
			res.Evals = append(res.Evals, p)
		}
		record(StepRecord{Kind: kind, Step: step, Success: p.Success, TeamReturn: p.Reward, Invalid: p.Invalid,
			Split: "validation", Decode: decode, Episodes: p.Episodes, StdErr: p.StdErr})
		return p, nil
	}
	test := func(step int) (*Test, error) {
		if o.TestEpisodes <= 0 {
			return nil, nil
		}
		t0 := time.Now()
		var t Test
		for _, greedy := range []bool{true, false} {
			pols, decode := sampledPols, "sampled"
			if greedy {
				pols, decode = greedyPols, "greedy"
			}
			p, err := evalOn(pols, o.TestSeedStart, o.TestEpisodes, step)
			if err != nil {
				return nil, err
			}
			if greedy {
				t.Greedy = p
			} else {
				t.Sampled = p
			}
			record(StepRecord{Kind: "test", Step: step, Success: p.Success, TeamReturn: p.Reward, Invalid: p.Invalid,
				Split: "test", Decode: decode, Episodes: p.Episodes, StdErr: p.StdErr})
		}
		res.TestWall += time.Since(t0)
		return &t, nil
	}
	p0, err := evaluate(0, false)
	if err != nil {
		return res, fmt.Errorf("evaluate: %w", err)
	}
	g0, err := evaluate(0, true)
	if err != nil {
		return res, fmt.Errorf("evaluate: %w", err)
	}
	res.WarmSuccess, res.WarmReward = p0.Success, p0.Reward
	logf("validation before RL (%d episodes, seeds %d..): success %.1f%% ± %.1f sampled, %.1f%% ± %.1f greedy; team return %.3f, invalid %.1f%%",
		o.EvalEpisodes, o.EvalSeed, 100*p0.Success, 100*p0.StdErr, 100*g0.Success, 100*g0.StdErr, p0.Reward, 100*p0.Invalid)
	if res.WarmTest, err = test(0); err != nil {
		return res, fmt.Errorf("test: %w", err)
	}
	if t := res.WarmTest; t != nil {
		logf("test before RL (%d episodes, seeds %d..): success %.1f%% ± %.1f greedy, %.1f%% ± %.1f sampled",
			o.TestEpisodes, o.TestSeedStart, 100*t.Greedy.Success, 100*t.Greedy.StdErr, 100*t.Sampled.Success, 100*t.Sampled.StdErr)
	}

	// RL.
	var stepFn func(context.Context) (StepRecord, error)
	switch o.Algo {
	case "atgrpo":
		tr := &agent.ATGRPO{
			Config: atgrpo.Config{K: o.K, Alpha: 1, Envs: o.Envs, MaxTurns: budget, Advantage: grpo.StdNormalized, Seed: o.Seed,
				DrMAS: o.DrMAS, Filter: gf},
			Team:   team,
			NewEnv: EnvFactory(o.Env, ecfg, -1),
		}
		if o.EnvActors > 0 {
			pool, err := envs.SpawnPool(ctx, rt, o.EnvActors, envs.HostConfig{Env: o.Env, Config: ecfg})
			if err != nil {
				return res, err
			}
			defer pool.Kill(context.Background())
			tr.Envs = pool
		}
		stepFn = func(ctx context.Context) (StepRecord, error) {
			s, err := tr.Step(ctx)
			r := StepRecord{Kind: "step", Step: int(s.Step) + 1, Reward: s.MeanReward, Success: s.SuccessRate, TeamReturn: s.TeamReturn,
				Samples: s.Samples, ZeroAdv: s.ZeroAdv, SampledZero: s.SampledZero, Trained: s.Filter.SamplesKept}
			fillUpd(&r, s.Updates)
			return r, err
		}
	case "joyagents":
		if gf.Active() {
			return res, fmt.Errorf("the group filter is AT-GRPO's (PettingLLMs); JoyAgents-R1 selects groups by top-K")
		}
		jc := joyagents.DefaultConfig()
		jc.G, jc.Envs, jc.MaxTurns, jc.UseMemory, jc.Seed, jc.DrMAS = o.K, o.Envs, budget, o.JoyMemory, o.Seed, o.DrMAS
		switch {
		case o.JoyTopK > 0:
			jc.TopK = o.JoyTopK
		case o.JoyTopK < 0:
			jc.TopK = 0 // all groups
		}
		jc.Memory.NoHint, jc.Memory.NoReuse, jc.Memory.PerStep = o.JoyNoHint, o.JoyNoReuse, o.JoyMemoryPerStep
		jc.Memory.HintMax = maxNew - 1
		switch o.JoyThreshold {
		case "", "pooled":
			jc.Memory.Threshold = joyagents.ThresholdPooled
		case "group-z":
			jc.Memory.Threshold = joyagents.ThresholdGroupZ
		default:
			return res, fmt.Errorf("unknown memory threshold %q (pooled, group-z)", o.JoyThreshold)
		}
		// The update step is a compiled actor graph over the policy actors
		// and the memory actor (agent.JoyGraph).
		ja, err := agent.SpawnJoyAgents(ctx, rt, team, agent.JoyConfig{Config: jc, Env: o.Env, EnvConfig: ecfg, EnvActors: o.EnvActors})
		if err != nil {
			return res, err
		}
		defer ja.Kill(context.Background())
		tr := ja.Trainer
		if useMemory && !o.JoyEvalNoMemory {
			memEval = func(p *rl.Policies) (*rl.Policies, *joyagents.MemoryUse, error) {
				return joyagents.WithMemory(p, roles, tr.MemoryBank(), tr.Steps())
			}
		}
		stepFn = func(ctx context.Context) (StepRecord, error) {
			s, err := tr.Step(ctx)
			r := StepRecord{Kind: "step", Step: int(s.Step) + 1, Reward: s.Reward, Success: s.SuccessRate, TeamReturn: s.Accuracy,
				Samples: s.Counts.NodeSamples + s.Counts.CompletionSamples, ZeroAdv: s.Adv.Zero, MemInserted: s.Memory.Inserted + s.Memory.Replaced}
			for _, u := range s.Updates {
				r.Trained += u.Samples
			}
			if a := s.Counts.Actions; a > 0 {
				r.MemReused = float64(s.Counts.SkippedActions) / float64(a)
				r.MemHinted = float64(s.Counts.HintedActions) / float64(a)
			}
			for _, n := range s.MemorySize {
				r.MemSize += n
			}
			fillUpd(&r, s.Updates)
			return r, err
		}
	default:
		return res, fmt.Errorf("unknown algorithm %q (atgrpo, joyagents)", o.Algo)
	}
	progress := o.Progress
	if o.Steps == 0 {
		progress = nil
	}
	bar := NewBar(progress, o.Steps)
	t0 := time.Now()
	tokens0 := totalTokens(ctx, team)
	for s := 1; s <= o.Steps; s++ {
		ts := time.Now()
		r, err := stepFn(ctx)
		if err != nil {
			return res, fmt.Errorf("%s step %d: %w", o.Algo, s, err)
		}
		r.StepWall = time.Since(ts).Seconds()
		el := time.Since(t0).Seconds()
		r.TokensPerS = float64(totalTokens(ctx, team)-tokens0) / el
		record(r)
		bar.Update(s, fmt.Sprintf("reward %+.3f  success %3.0f%%  clip %.3f  kl %.4f  gn %.2f  zero-adv %2.0f%%  %6.0f tok/s",
			r.Reward, 100*r.Success, r.ClipFrac, r.ApproxKL, r.GradNorm, 100*r.ZeroAdv, r.TokensPerS))
		if o.EvalEvery > 0 && s%o.EvalEvery == 0 && s < o.Steps {
			p, err := evaluate(s, false)
			if err != nil {
				return res, fmt.Errorf("evaluate: %w", err)
			}
			bar.Note(fmt.Sprintf("step %d validation success %.0f%%", s, 100*p.Success))
		}
		if o.OutDir != "" && o.CkptEvery > 0 && s%o.CkptEvery == 0 && s < o.Steps {
			if _, err := team.Save(ctx, filepath.Join(o.OutDir, "checkpoints"), fmt.Sprintf("step%04d-", s), map[string]string{"env": o.Env}); err != nil {
				return res, err
			}
		}
	}
	bar.Done()
	res.Steps = o.Steps
	res.TrainWall = time.Since(t0)
	if o.Steps > 0 {
		res.TokensPerS = float64(totalTokens(ctx, team)-tokens0) / res.TrainWall.Seconds()
		res.StepWall = res.TrainWall / time.Duration(o.Steps)
	}
	pf, err := evaluate(o.Steps, false)
	if err != nil {
		return res, fmt.Errorf("evaluate: %w", err)
	}
	res.Final = pf
	if res.FinalGreedy, err = evaluate(o.Steps, true); err != nil {
		return res, fmt.Errorf("evaluate: %w", err)
	}
	logf("validation after %d RL steps: success %.1f%% ± %.1f sampled (was %.1f%%), %.1f%% ± %.1f greedy (was %.1f%%); team return %.3f, invalid %.1f%%; RL %.0fs (%.2fs a step), %.0f tokens/s",
		o.Steps, 100*pf.Success, 100*pf.StdErr, 100*p0.Success, 100*res.FinalGreedy.Success, 100*res.FinalGreedy.StdErr, 100*g0.Success,
		pf.Reward, 100*pf.Invalid, res.TrainWall.Seconds(), res.StepWall.Seconds(), res.TokensPerS)
	if pf.Reused > 0 {
		logf("memory: %.0f%% of validation actions answered from memory", 100*pf.Reused)
	}
	if res.FinalTest, err = test(o.Steps); err != nil {
		return res, fmt.Errorf("test: %w", err)
	}
	if t := res.FinalTest; t != nil {
		logf("test after %d RL steps (%d episodes, seeds %d..): success %.1f%% ± %.1f greedy (was %.1f%%), %.1f%% ± %.1f sampled (was %.1f%%); %.0fs of test evaluation",
			o.Steps, o.TestEpisodes, o.TestSeedStart, 100*t.Greedy.Success, 100*t.Greedy.StdErr, 100*res.WarmTest.Greedy.Success,
			100*t.Sampled.Success, 100*t.Sampled.StdErr, 100*res.WarmTest.Sampled.Success, res.TestWall.Seconds())
	}
	if o.OutDir != "" {
		meta := map[string]string{"env": o.Env, "run": o.Name}
		res.Checkpoints, err = team.Save(ctx, o.OutDir, "", meta)
		if err != nil {
			return res, err
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
		logf("checkpoints: %s", strings.Join(files, " "))
		if err := Replot(o.OutDir, o.Name); err != nil {
			return res, err
		}
		logf("metrics: %s, plots: %s", filepath.Join(o.OutDir, "metrics.jsonl"), filepath.Join(o.OutDir, "curves.{png,svg}"))
	}
	res.Wall = time.Since(start)
	res.CPU = cpuTime() - cpu0
	logf("wall %s, process CPU %s", res.Wall.Round(time.Second), res.CPU.Round(time.Second))
	return res, nil
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
