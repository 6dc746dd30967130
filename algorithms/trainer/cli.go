package trainer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"troupe/runtime"
)

// Main is a training script's main: it registers flags whose defaults are
// the fields of o, parses the command line, runs the recipe on the embedded
// cluster (or the cluster in $TROUPE_ADDRESS) and exits non-zero on error.
func Main(prog, doc string, o Options) {
	o.Defaults()
	fs := flag.NewFlagSet(prog, flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\n\nUsage: go run ./examples/%s [flags]\n\nFlags:\n", doc, prog)
		fs.PrintDefaults()
	}
	fs.IntVar(&o.Steps, "steps", o.Steps, "RL training steps (0: warm start and evaluation only)")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "seed for weights, sampling and training environments")
	fs.StringVar(&o.OutDir, "out", "runs/"+prog, "output directory (metrics.jsonl, curves.png, checkpoints)")
	size := fs.Int("size", o.EnvConfig.Width, "grid width and height (planpath 5..10, sokoban 5..8; 0: default)")
	fs.Float64Var(&o.EnvConfig.ObstacleRate, "obstacles", o.EnvConfig.ObstacleRate, "obstacle rate (planpath, sokoban; 0: default)")
	fs.IntVar(&o.EnvConfig.TurnBudget, "turns", o.EnvConfig.TurnBudget, "turn budget per episode (0: the environment's default)")
	fs.StringVar(&o.Env, "env", o.Env, "environment or preset (e.g. planpath, routepath: a master routes each round to sub-agent h or v; planpath-10x10)")
	fs.BoolVar(&o.EnvConfig.RandomRoute, "random-route", o.EnvConfig.RandomRoute, "routepath: no master, the environment routes each round to a sub-agent at random (the routing-off baseline)")
	fs.BoolVar(&o.EnvConfig.ToolTeam, "tool-team", o.EnvConfig.ToolTeam, "planpath: the tool earns the team reward its suggestion would earn if the planner played it, so α acts on it (default: no team reward for the tool)")
	fs.IntVar(&o.EnvConfig.Holes, "holes", o.EnvConfig.Holes, "sudoku4 empty cells (0: default)")
	fs.IntVar(&o.EnvConfig.Steps, "arith-steps", o.EnvConfig.Steps, "arith operations per problem (0: 2 or 3)")
	perRole := fs.Bool("per-role", o.PerRole, "one policy per role (false: one shared policy)")
	fs.BoolVar(&o.Single, "single", o.Single, "single-agent baseline: only the proposing role acts")
	fs.IntVar(&o.K, "k", o.K, "branches per group (AT-GRPO K, JoyAgents G)")
	fs.IntVar(&o.Envs, "envs", o.Envs, "environments per step")
	fs.IntVar(&o.Model.Layers, "layers", o.Model.Layers, "transformer layers")
	fs.IntVar(&o.Model.Width, "width", o.Model.Width, "model width")
	fs.IntVar(&o.Model.Heads, "heads", o.Model.Heads, "attention heads")
	fs.IntVar(&o.Model.KVHeads, "kv-heads", o.Model.KVHeads, "key/value heads of a from-scratch llama (0: --heads)")
	fs.IntVar(&o.Model.LoRARank, "lora-rank", o.Model.LoRARank, "train LoRA adapters of this rank (alpha 2·rank, all projections) on a frozen Llama-family base instead of every weight (0: full training)")
	fs.BoolVar(&o.Model.SharedBase, "shared-base", o.Model.SharedBase, "with --lora-rank and --per-role: one actor holds the base and one adapter per role (PettingLLMs' per-agent LoRA) instead of one actor per role")
	fs.BoolVar(&o.Model.BaseBF16, "base-bf16", o.Model.BaseBF16, "with --lora-rank: keep the frozen base in BF16 (half the memory)")
	fs.BoolVar(&o.Model.ComputeBF16, "bf16", o.Model.ComputeBF16, "Llama family: mixed precision, BF16 matmuls on float32 weights and optimizer as torch.autocast(bfloat16) (about twice the matmul speed with AVX512_BF16; log-probs to ~1e-2)")
	fs.StringVar(&o.Model.Dir, "model", o.Model.Dir, "pretrained Hugging Face model directory (Llama, Qwen2, Qwen3, Mistral, SmolLM) every policy starts from, instead of a from-scratch model")
	lr := fs.Float64("lr", f64(o.PPO.LR), "RL learning rate")
	fs.IntVar(&o.PPO.Epochs, "epochs", o.PPO.Epochs, "PPO epochs: passes over each step's batch")
	fs.IntVar(&o.PPO.MiniBatch, "minibatch", o.PPO.MiniBatch, "PPO mini-batch in samples, one optimiser step each (0: 16, verl's ppo_mini_batch_size in PettingLLMs; -1: the whole batch in one step)")
	fs.BoolVar(&o.PPO.Shuffle, "shuffle", o.PPO.Shuffle, "shuffle each batch before splitting it into mini-batches (verl: off)")
	fs.StringVar(&o.PPO.Aggregation, "agg", o.PPO.Aggregation, "loss aggregation: token-mean, seq-mean-token-mean or seq-mean-token-sum-norm (Dr. GRPO)")
	fs.StringVar(&o.Advantage, "adv", o.Advantage, "advantages: std (GRPO, default) or mean (Dr. GRPO's r − mean; add --agg seq-mean-token-sum-norm for Dr. GRPO's constant length normalisation)")
	fs.BoolVar(&o.DrMAS, "drmas", o.DrMAS, "Dr. MAS: normalise advantages per (environment instance, agent) instead of per group")
	fs.StringVar(&o.Model.Init, "init", o.Model.Init, "start from checkpoint directories PREFIX<policy> instead of the warm start (e.g. runs/planpath-atgrpo/warm-)")
	fs.IntVar(&o.Warm.Episodes, "warm-episodes", o.Warm.Episodes, "expert episodes for the warm start (0: none)")
	fs.IntVar(&o.Warm.Epochs, "warm-epochs", o.Warm.Epochs, "warm-start passes")
	fs.Float64Var(&o.Warm.Noise, "warm-noise", o.Warm.Noise, "share of transcript actions replaced by random ones (executed, not learned)")
	warmLR := fs.Float64("warm-lr", f64(o.Warm.LR), "warm-start learning rate")
	fs.IntVar(&o.Eval.Episodes, "eval-episodes", o.Eval.Episodes, "validation episodes per evaluation (seeds --eval-seed..)")
	fs.Int64Var(&o.Eval.Seed, "eval-seed", o.Eval.Seed, "first seed of the validation range (tune on it)")
	fs.IntVar(&o.Eval.TestEpisodes, "test-episodes", o.Eval.TestEpisodes, "test-range episodes, greedy and sampled, after the warm start and at the end (0: no test evaluation)")
	fs.Int64Var(&o.Eval.TestSeed, "test-seed", o.Eval.TestSeed, "first seed of the test range (report on it; never tune on it)")
	fs.IntVar(&o.Eval.Every, "eval-every", o.Eval.Every, "steps between held-out evaluations (0: start and end only)")
	fs.IntVar(&o.CkptEvery, "ckpt-every", o.CkptEvery, "steps between resumable checkpoints in OUT/checkpoints, also written before the first step and after the last (0: none; the final policies are saved either way)")
	fs.IntVar(&o.KeepCkpts, "keep-ckpts", o.KeepCkpts, "resumable checkpoints to keep, the newest (0: all)")
	fs.StringVar(&o.Resume, "resume", o.Resume, "continue the run in DIR (its output directory) from its last complete checkpoint, skipping damaged ones; the flags must be the run's but for --steps, --out, --ckpt-every, --keep-ckpts; --out defaults to DIR")
	fs.BoolVar(&o.Recover, "recover", o.Recover, "with --ckpt-every: when a policy actor is lost and restarted, restore the last checkpoint and replay the steps since")
	sampleTemp := fs.Float64("sample-temp", f64(o.SampleTemp), "training sampling temperature (0: 1; above 1 explores states where the policy is confidently wrong)")
	evalTemp := fs.Float64("eval-temp", f64(o.Eval.Temp), "evaluation sampling temperature (0: 1, on-policy)")
	fs.IntVar(&o.EnvActors, "env-actors", o.EnvActors, "host the training environments in N environment actors (0: step them in the driver; same results)")
	fs.IntVar(&o.Async.RolloutWorkers, "rollout-workers", o.Async.RolloutWorkers, "rollout workers per policy: they sample while the policy's learner trains (0: synchronous, each policy actor samples then trains)")
	fs.IntVar(&o.Async.MaxStaleness, "max-staleness", o.Async.MaxStaleness, "with --rollout-workers: the most learner versions a sample's policy may lag behind (0: on-policy)")
	fs.Float64Var(&o.Async.ISCap, "is-cap", o.Async.ISCap, "with --rollout-workers: drop tokens whose importance weight pi_prox/pi_behav exceeds this (0: 5, as AReaL)")
	hint, reuse := new(bool), new(bool)
	*hint, *reuse = !o.Joy.NoHint, !o.Joy.NoReuse
	if o.Algo == "joyagents" {
		fs.IntVar(&o.Joy.TopK, "topk", o.Joy.TopK, "JoyAgents marginal-benefit top-K groups by reward variance (0: 5; -1: all)")
		fs.Float64Var(&o.Joy.TopFrac, "top-frac", o.Joy.TopFrac, "JoyAgents marginal-benefit selection per agent: each agent keeps this fraction of its groups, largest reward variance first (0: --topk over all groups)")
		fs.BoolVar(&o.Joy.Memory, "memory", o.Joy.Memory, "JoyAgents memory: evolved from the groups, read when an agent acts")
		fs.BoolVar(hint, "hint", *hint, "memory: add the retrieved answer to the prompt")
		fs.BoolVar(reuse, "reuse", *reuse, "memory: answer a near-duplicate situation from memory without sampling")
		fs.StringVar(&o.Joy.Threshold, "memory-threshold", o.Joy.Threshold, "memory insert/remove rule: pooled (2.5% tails of the step's rewards) or group-z (mean ± 1.96 std in each group)")
		fs.BoolVar(&o.Joy.EvalNoMemory, "eval-no-memory", o.Joy.EvalNoMemory, "evaluate without reading the memory")
		fs.StringVar(&o.Joy.MemoryKey, "memory-key", o.Joy.MemoryKey, "what the memory is keyed on: raw (the observation, default) or situation (the environment's abstraction: on planpath the local neighbourhood, the goal's direction and the other agent's last message, which recur across grids)")
		fs.BoolVar(&o.Joy.MemoryPerStep, "memory-per-step", o.Joy.MemoryPerStep, "evolve the memory once per step (default: after every node position, so the step's later nodes can reuse it)")
		fs.Float64Var(&o.Warm.Hints, "warm-hints", o.Warm.Hints, "share of warm-start examples shown with a memory hint")
	} else {
		fs.StringVar(&o.ATGRPO.Filter, "filter", o.ATGRPO.Filter, "PettingLLMs group filter: none, mean (drop the lowest-mean groups), std, dapo (drop equal-reward groups) or uid")
		fs.Float64Var(&o.ATGRPO.FilterRatio, "filter-ratio", o.ATGRPO.FilterRatio, "share of groups the filter drops (mean, std; uid: of each group's samples)")
		fs.StringVar(&o.ATGRPO.Grouping, "grouping", o.ATGRPO.Grouping, "advantage group key (ablations): agent-turn (AT-GRPO, default), agent, turn, or trajectory (trajectory-level GRPO, with --sampler independent)")
		fs.IntVar(&o.ATGRPO.Resample, "resample", o.ATGRPO.Resample, "DAPO dynamic sampling: drop equal-reward groups (--filter dapo) and sample up to N more grids a step until as many groups have reward variance as the step first sampled (0: none)")
		fs.StringVar(&o.ATGRPO.Sampler, "sampler", o.ATGRPO.Sampler, "sampler (ablation): tree (AT-GRPO, default) or independent (K independent episodes per grid)")
	}
	fs.IntVar(&o.Model.Replicas, "replicas-per-role", o.Model.Replicas, "data-parallel replicas of every policy actor (one GPU each where there are GPUs): each trains on its shard of every mini-batch, gradients averaged by allreduce (0 or 1: one actor)")
	fs.Float64Var(&o.Model.GPUsPerPolicy, "gpus-per-policy", -1, "GPUs each policy actor asks for (fractions share a GPU; -1: 1 when the cluster has GPUs, else 0)")
	backend := os.Getenv("TROUPE_BACKEND")
	if backend == "" {
		backend = "auto"
	}
	fs.StringVar(&o.Model.Backend, "backend", backend, "policies' compute backend: auto (the GPU each was placed on, else the CPU), cpu or cuda (default $TROUPE_BACKEND)")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected arguments %s\n", prog, strings.Join(fs.Args(), " "))
		os.Exit(2)
	}
	outSet := false
	fs.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })
	if o.Resume != "" && !outSet {
		o.OutDir = o.Resume
	}
	if job := os.Getenv("TROUPE_RESUME"); job != "" && o.Resume == "" {
		// troupe submit --resume: this job runs where job's outputs are
		o.Resume = o.OutDir
	}
	if *size != 0 {
		o.EnvConfig.Width, o.EnvConfig.Height = *size, *size
	}
	o.PerRole = *perRole
	o.Joy.NoHint, o.Joy.NoReuse = !*hint, !*reuse
	o.PPO.LR, o.Warm.LR, o.Eval.Temp, o.SampleTemp = float32(*lr), float32(*warmLR), float32(*evalTemp), float32(*sampleTemp)
	if o.Steps < 0 {
		fmt.Fprintf(os.Stderr, "%s: --steps %d must not be negative\n", prog, o.Steps)
		os.Exit(2)
	}
	o.Progress, o.Log = os.Stderr, os.Stdout
	ctx := context.Background()
	rt, err := runtime.Init(ctx)
	if errors.Is(err, runtime.ErrWorkerDone) {
		os.Exit(0) // this process was a worker
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		os.Exit(1)
	}
	res, err := Run(ctx, rt, o)
	rt.Shutdown(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		os.Exit(1)
	}
	fmt.Printf("done in %s: validation success %.0f%% after the warm start -> %.0f%% after %d RL steps (sampled)\n",
		res.Wall.Round(1e9), 100*res.WarmSuccess, 100*res.Final.Success, res.Steps)
	if t0, t1 := res.WarmTest, res.FinalTest; t0 != nil && t1 != nil {
		fmt.Printf("test range (%d grids): greedy %.1f%% -> %.1f%% (± %.1f), sampled %.1f%% -> %.1f%% (± %.1f)\n",
			t1.Greedy.Episodes, 100*t0.Greedy.Success, 100*t1.Greedy.Success, 100*t1.Greedy.StdErr,
			100*t0.Sampled.Success, 100*t1.Sampled.Success, 100*t1.Sampled.StdErr)
	}
}

// f64 widens a float32 without showing its binary tail in --help (1e-3, not
// 0.0010000000474974513).
func f64(x float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
	return v
}
