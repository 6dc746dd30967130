package trainer

import (
	"io"
	"time"

	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
)

// ValidationSeed is the first seed of the validation range: episodes
// ValidationSeed..ValidationSeed+n-1. Every development decision of this
// project (observations, rewards, defaults) was made looking at these grids,
// so they measure nothing unseen. Warm-start transcripts use seeds from 0 up
// (far below) and training environments use 64-bit derived seeds.
const ValidationSeed = 1_000_000

// TestSeed is the first seed of the test range, TestSeed..TestSeed+n-1:
// grids no decision looked at. Report results on it, tune on the
// validation range.
const TestSeed = 3_000_000

// Options configure one run. Zero fields take the defaults of the main
// job (Plan-Path with AT-GRPO; see Defaults).
type Options struct {
	Name string // run label (plots, logs)

	// The task.
	Env       string // environment or preset (envs.New)
	EnvConfig envs.Config
	Single    bool // single-agent baseline (EnvConfig.Single)
	MaxTurns  int  // 0: the environment's budget
	// EnvActors > 0 hosts the training environments in that many
	// environment host actors (envs.Pool) instead of stepping them in the
	// driver; the run is the same.
	EnvActors int

	// The team: one policy per role, or one shared by every role.
	PerRole bool
	Model   ModelOptions

	// The algorithm.
	//
	// Algo names a built-in algorithm: "atgrpo" (default), "grpo" or
	// "joyagents" (Algorithms lists them). Algorithm, if set, is used
	// instead: a user's own.
	Algo      string
	Algorithm Algorithm `json:"-"`
	Steps     int       // RL steps (0: warm start and evaluation only)
	K         int       // AT-GRPO branches / JoyAgents G
	Envs      int       // environments per step
	Seed      int64
	// SampleTemp is the training sampling temperature (0: 1).
	SampleTemp float32
	// DrMAS normalises advantages per (environment instance, agent), as
	// Dr. MAS does, instead of per group.
	DrMAS bool
	// Advantage is how group rewards become advantages: "std" (default,
	// GRPO's (r − mean)/(std + 1e-6)) or "mean" (Dr. GRPO's r − mean; with
	// PPO.Aggregation "seq-mean-token-sum-norm", Dr. GRPO's constant length
	// normalisation, it is Dr. GRPO).
	Advantage string
	PPO       PPOOptions
	ATGRPO    ATGRPOOptions
	Joy       JoyOptions

	Warm WarmOptions
	Eval EvalOptions
	// Async splits every policy into rollout workers and a learner
	// (zero: the synchronous run).
	Async AsyncOptions

	// Output.
	OutDir string
	// CkptEvery > 0 commits a resumable checkpoint (resume.go) under
	// OutDir/checkpoints before the first RL step, every CkptEvery steps
	// and after the last; 0 writes none. The final policies are saved in
	// OutDir either way.
	CkptEvery int
	// KeepCkpts is how many resumable checkpoints to keep, the newest (0:
	// every one).
	KeepCkpts int
	// Resume, if set, continues the run from the last complete checkpoint
	// in this directory (a run's output directory, or its checkpoints
	// directory), skipping damaged ones; the options must be the
	// checkpoint's but for Steps, OutDir and a few others (ErrConfigChanged
	// names what differs). Without any checkpoint there the run starts from
	// the beginning.
	Resume string
	// Recover, with CkptEvery, spawns the policy actors with restarts and,
	// when one is lost and restarted, restores the run from its last
	// checkpoint and replays the steps since.
	Recover bool
	// ActorPrefix is put before the policy actors' names (the role names),
	// for runs side by side in one job (the results program).
	ActorPrefix string
	Progress    io.Writer `json:"-"` // progress bar (nil: none)
	Log         io.Writer `json:"-"` // one-line messages (nil: none)
}

// ModelOptions are the policies' model and where they compute.
type ModelOptions struct {
	// Layers, Heads, Width and KVHeads (0: Heads) shape a from-scratch
	// model of the Llama family.
	Layers, Heads, Width, KVHeads int
	// Dir, if set, is a pretrained Hugging Face model directory every
	// policy starts from (with its tokenizer and chat template) instead of
	// a from-scratch model.
	Dir string
	// Init, if set, is a checkpoint path prefix: policy <name> starts from
	// the directory Init+<name> (e.g. "runs/x/warm-") and the warm start
	// is skipped.
	Init string
	// LoRARank > 0 trains LoRA adapters of that rank (alpha 2·rank, every
	// projection of a block) on a frozen base of the Llama family, one
	// per policy; SharedBase puts every role's adapter in one actor on
	// one base (per-role policies only); BaseBF16 keeps the base in BF16.
	LoRARank   int
	SharedBase bool
	BaseBF16   bool
	// ComputeBF16 runs the matmuls in BF16 (mixed precision).
	ComputeBF16 bool
	// Backend is the policies' compute backend: "auto" (follow the
	// placement), "cpu" or "cuda" (agent.Config.Backend).
	Backend string
	// GPUsPerPolicy is the GPUs each policy actor asks for (fractions share
	// a GPU); negative means 1 when the cluster has GPUs and 0 otherwise.
	GPUsPerPolicy float64
	// Replicas > 1 runs every policy actor as that many data-parallel
	// replicas (agent.TeamConfig.Replicas; --replicas-per-role): each
	// trains on its shard of every mini-batch and their gradients are
	// summed by allreduce. 0 or 1: one actor.
	Replicas int
}

// PPOOptions are the policy update's settings, as verl names them.
type PPOOptions struct {
	LR     float32
	Epochs int // passes over each step's batch
	// MiniBatch is the mini-batch in samples, one optimiser step each (0:
	// agent.DefaultMiniBatch, 16, verl's ppo_mini_batch_size in
	// PettingLLMs; -1: the whole batch in one step).
	MiniBatch int
	// Shuffle permutes each batch before splitting it (verl: off).
	Shuffle bool
	// Aggregation is the loss aggregation by verl's name: "token-mean"
	// (default, as PettingLLMs), "seq-mean-token-mean" or
	// "seq-mean-token-sum-norm" (Dr. GRPO).
	Aggregation string
}

// ATGRPOOptions are AT-GRPO's own settings.
type ATGRPOOptions struct {
	// Filter and FilterRatio are PettingLLMs' group filter (rl.GroupFilter:
	// "", "mean", "std", "dapo", "uid").
	Filter      string
	FilterRatio float64
	// Grouping and Sampler are the AT-GRPO paper's ablations (atgrpo
	// ablation.go): the advantage's group key, "agent-turn" (default:
	// (env, role, turn)), "agent" (env, role), "turn" (env, turn) or
	// "trajectory" (trajectory-level GRPO, needs Sampler "independent"),
	// and the sampler, "tree" (default) or "independent" (K independent
	// episodes per grid, about the tree's number of samples).
	Grouping string
	Sampler  string
	// Resample > 0 is DAPO's dynamic sampling (atgrpo.Resample): the groups
	// whose rewards are all equal are dropped (Filter "dapo", set when
	// Filter is empty) and up to Resample more grids a step are sampled
	// until the step holds as many groups with reward variance as it first
	// sampled groups. Environments in the driver only.
	Resample int
}

// JoyOptions are JoyAgents-R1's own settings.
type JoyOptions struct {
	TopK int // top-K groups (0: joyagents.DefaultTopK; -1: all)
	// TopFrac > 0 selects per agent instead of TopK: each agent keeps the
	// ceil(TopFrac × n) of its n groups with the largest reward variance
	// (joyagents.SelectTopFrac).
	TopFrac float64
	Memory  bool // the agents' memory
	// NoHint and NoReuse turn off the two ways an agent reads its memory:
	// retrieved answers in the prompt, and reuse of a near-duplicate's
	// answer without sampling.
	NoHint, NoReuse bool
	// Threshold is the memory's insert/remove rule: "pooled" (default) or
	// "group-z" (the paper's μ ± 1.96σ inside each group).
	Threshold string
	// EvalNoMemory evaluates the policies without their memory.
	EvalNoMemory bool
	// MemoryPerStep evolves the memory once per step, in the update,
	// instead of after every node position during sampling.
	MemoryPerStep bool
	// MemoryKey is what the memory is keyed on: "" or "raw" (the
	// observation) or "situation" (the environment's abstraction of it,
	// envs.Situation: on Plan-Path the local neighbourhood, the goal's
	// direction and the other agent's last message, which recur across
	// grids).
	MemoryKey string
}

// WarmOptions are the warm start: supervised fine-tuning on the
// environment's expert transcripts.
type WarmOptions struct {
	Episodes int     // expert episodes (0: no warm start)
	Epochs   int     // passes
	Noise    float64 // share of transcript actions replaced by random ones (executed, not learned)
	LR       float32
	// Hints is the share of examples shown with a memory hint (HintPrefix
	// + an answer: the expert's with probability 3/4, another example's
	// otherwise), so that a policy reads hints as the memory gives them
	// (JoyAgents-R1 with memory; 0: none).
	Hints float64
}

// EvalOptions are the evaluations: the validation range (tune on it)
// before, during and after RL, and the test range (report on it) before
// and after.
type EvalOptions struct {
	Episodes int     // validation episodes of every evaluation (100)
	Seed     int64   // first validation seed (0: ValidationSeed)
	Temp     float32 // sampling temperature (0: 1, on-policy)
	Every    int     // steps between mid-training evaluations (0: start and end only)
	// TestEpisodes > 0 evaluates the warm start and the final policies on
	// the test range (from TestSeed, 0: the package's TestSeed), greedy
	// and sampled.
	TestEpisodes int
	TestSeed     int64
}

// Defaults fills zero fields with the planpath AT-GRPO defaults.
func (o *Options) Defaults() {
	if o.Env == "" {
		o.Env = "planpath"
	}
	if o.Algo == "" {
		o.Algo = "atgrpo"
		if o.Algorithm != nil {
			o.Algo = o.Algorithm.Name()
		}
	}
	if o.Model.Layers == 0 {
		o.Model.Layers = 2
	}
	if o.Model.Heads == 0 {
		o.Model.Heads = 4
	}
	if o.Model.Width == 0 {
		o.Model.Width = 64
	}
	if o.K == 0 {
		o.K = 4
	}
	if o.Envs == 0 {
		o.Envs = 8
	}
	if o.PPO.LR == 0 {
		o.PPO.LR = 3e-4
	}
	if o.PPO.Epochs == 0 {
		o.PPO.Epochs = 1
	}
	if o.Warm.Epochs == 0 {
		o.Warm.Epochs = 3
	}
	if o.Warm.LR == 0 {
		o.Warm.LR = 2e-3
	}
	if o.Eval.Episodes == 0 {
		o.Eval.Episodes = 100
	}
	if o.Eval.Seed == 0 {
		o.Eval.Seed = ValidationSeed
	}
	if o.Eval.TestSeed == 0 {
		o.Eval.TestSeed = TestSeed
	}
	if o.PPO.Aggregation == "" {
		o.PPO.Aggregation = grpo.TokenMean.String()
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
	// GreedySolved[i] and SampledSolved[i] report whether test grid i
	// (seed TestSeed+i) was solved, so two runs' tests pair grid by grid.
	GreedySolved, SampledSolved []bool `json:",omitempty"`
}

// Result summarises a run.
type Result struct {
	Params      int               // parameters per policy
	Policies    int               // number of policy actors
	WarmSuccess float64           // validation success after the warm start (sampled)
	WarmReward  float64           // validation team return after the warm start
	WarmGreedy  Point             // validation evaluation after the warm start, greedy
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
	Resampled   int     `json:"resampled,omitempty"` // grids sampled beyond Envs (ATGRPO.Resample)
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

	// Timeline is where every policy actor's time went during the step,
	// by "<policy>/<policy|learner|rolloutN>".
	Timeline map[string]Phases `json:"timeline,omitempty"`
	// With data-parallel replicas (Model.Replicas): the share of the step
	// the team's actors spent in their collectives (mean over the actors
	// of collective seconds / step seconds), and every policy's weights
	// hash after the step (the same on all its replicas, or the step
	// fails).
	CollectiveFrac float64           `json:"collective_frac,omitempty"`
	ReplicaHash    map[string]string `json:"replica_hash,omitempty"`
	// With rollout workers: how many samples were how many versions
	// stale ("0", "1", ...), and the step's weight sync.
	Staleness  map[string]int `json:"staleness,omitempty"`
	WeightSync *SyncRecord    `json:"weight_sync,omitempty"`

	// CkptWrite is the write time of the checkpoint committed since the
	// previous step (CkptEvery); Resume, on a resumed run's first step, the
	// seconds from the process's start to the step's end.
	CkptWrite float64 `json:"ckpt_write_s,omitempty"`
	Resume    float64 `json:"resume_s,omitempty"`
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
