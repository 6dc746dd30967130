// Package recipe is the shared body of the training scripts in examples/:
// spawn a team of policy actors on the embedded cluster, warm-start them on
// expert transcripts, train with AT-GRPO (or JoyAgents-R1), evaluate on fixed
// held-out seeds with independent rollouts, and write metrics (JSONL),
// learning curves (PNG and SVG) and checkpoints. The scripts are thin flag
// wrappers around Run so that the results table can run the same recipes.
package recipe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// HeldOutSeed is the first of the fixed held-out evaluation seeds: episodes
// HeldOutSeed..HeldOutSeed+n-1. Warm-start transcripts use seeds from 0 up
// (far below) and training environments use 64-bit derived seeds.
const HeldOutSeed = 1_000_000

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

	Steps    int // RL steps (0: warm start and evaluation only)
	K        int // AT-GRPO branches / JoyAgents G
	Envs     int // environments per step
	LR       float32
	Epochs   int // gradient steps per update
	Seed     int64
	MaxTurns int // 0: the environment's budget

	JoyTopK   int
	JoyMemory bool

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

	SampleTemp   float32 // training sampling temperature (0: 1)
	EvalEpisodes int     // held-out episodes (100)
	EvalTemp     float32 // sampling temperature of evaluation (0: 1, on-policy)
	EvalEvery    int     // steps between mid-training evaluations (0: start and end only)
	CkptEvery    int     // steps between checkpoints (0: end only)

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
	if o.Name == "" {
		o.Name = o.Env + "-" + o.Algo
	}
}

// Point is one evaluation.
type Point struct {
	Step    int     `json:"step"`
	Success float64 `json:"success"`
	Reward  float64 `json:"reward"`
	Invalid float64 `json:"invalid"`
}

// Result summarises a run.
type Result struct {
	Params      int               // parameters per policy
	Policies    int               // number of policy actors
	WarmSuccess float64           // held-out success after the warm start
	WarmReward  float64           // held-out team return after the warm start
	Final       Point             // held-out evaluation at the end
	Evals       []Point           // every evaluation, step order
	Steps       int               // RL steps run
	Wall        time.Duration     // whole run including warm start and evals
	WarmWall    time.Duration     // the warm start (SFT) alone
	CPU         time.Duration     // process CPU time over the run (load-independent; all cells of a process share it)
	TrainWall   time.Duration     // RL steps only
	TokensPerS  float64           // generated+trained tokens per second of RL
	Checkpoints map[string]string // final checkpoint files by policy name
}

// StepRecord is one JSONL line of training metrics.
type StepRecord struct {
	Kind       string  `json:"kind"` // "step", "eval" or "warm"
	Step       int     `json:"step"`
	Reward     float64 `json:"reward,omitempty"`
	Success    float64 `json:"success"`
	TeamReturn float64 `json:"team_return,omitempty"`
	Loss       float64 `json:"loss,omitempty"`
	Entropy    float64 `json:"entropy,omitempty"`
	ClipFrac   float64 `json:"clip_frac,omitempty"`
	Samples    int     `json:"samples,omitempty"`
	AdvZero    float64 `json:"adv_zero"` // share of samples with advantage 0 (groups whose branches all scored the same)
	TokensPerS float64 `json:"tokens_per_s,omitempty"`
	Elapsed    float64 `json:"elapsed_s"`
	Invalid    float64 `json:"invalid,omitempty"`
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
	tok, _ := policy.NewCharTokenizer(envs.Alphabet())
	loss := grpo.DefaultConfig()
	optim := policy.DefaultOptim()
	optim.LR = o.LR
	optim.WeightDecay = 0
	pc := agent.Config{
		Model:        policy.Config{Layers: o.Layers, Heads: o.Heads, Width: o.Width, Context: ctxLen, Vocab: tok.Vocab()},
		Seed:         uint64(o.Seed) + 1,
		Optim:        optim,
		Loss:         loss,
		Epochs:       o.Epochs,
		MaxNewTokens: maxNew,
		Temperature:  o.SampleTemp,
		Backend:      o.Backend,
		Arch:         o.Arch,
		KVHeads:      o.KVHeads,
		ModelDir:     o.ModelDir,
		BaseBF16:     o.BaseBF16,
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
	}
	shape := fmt.Sprintf("L%d C%d ctx %d", o.Layers, o.Width, ctxLen)
	if w := ws[team.Names[0]]; o.ModelDir != "" {
		shape = fmt.Sprintf("%s from %s, ctx %d", w.Family, o.ModelDir, w.Context)
	} else if w.Family != "gpt" {
		shape = w.Family + " " + shape
	}
	logf("%s: %d policy actor(s) %v, %d params each (%s), roles %v", o.Name, len(ws), team.Names, res.Params, shape, roles)
	logf("%s", placements(ctx, team, ws))

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
	evalFactory := EnvFactory(o.Env, ecfg, HeldOutSeed)
	evalPols := team.Policies
	switch {
	case o.EvalTemp > 0:
		evalPols = team.EvalPolicies(o.EvalTemp)
	case o.SampleTemp > 0 && o.SampleTemp != 1:
		evalPols = team.EvalPolicies(1) // evaluate the policy itself, not the exploring sampler
	}
	budget := o.MaxTurns
	if budget == 0 {
		budget = Budget(ecfg)
	}
	evaluate := func(step int) (Point, error) {
		es, err := atgrpo.Evaluate(ctx, evalPols, evalFactory, o.EvalEpisodes, budget, 1, 7)
		if err != nil {
			return Point{}, err
		}
		p := Point{Step: step, Success: es.SuccessRate, Reward: es.TeamReturn, Invalid: es.Invalid}
		res.Evals = append(res.Evals, p)
		record(StepRecord{Kind: "eval", Step: step, Success: p.Success, TeamReturn: p.Reward, Invalid: p.Invalid})
		return p, nil
	}
	p0, err := evaluate(0)
	if err != nil {
		return res, fmt.Errorf("evaluate: %w", err)
	}
	res.WarmSuccess, res.WarmReward = p0.Success, p0.Reward
	logf("held-out eval before RL (%d episodes, seeds %d..): success %.0f%%, team return %.3f, invalid %.1f%%",
		o.EvalEpisodes, HeldOutSeed, 100*p0.Success, p0.Reward, 100*p0.Invalid)

	// RL.
	var stepFn func(context.Context) (StepRecord, error)
	switch o.Algo {
	case "atgrpo":
		tr := &agent.ATGRPO{
			Config: atgrpo.Config{K: o.K, Alpha: 1, Envs: o.Envs, MaxTurns: budget, Advantage: grpo.StdNormalized, Seed: o.Seed},
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
			r := StepRecord{Kind: "step", Step: int(s.Step) + 1, Reward: s.MeanReward, Success: s.SuccessRate, TeamReturn: s.TeamReturn, Samples: s.Samples, AdvZero: s.Adv.Zero}
			fillUpd(&r, s.Updates)
			return r, err
		}
	case "joyagents":
		jc := joyagents.DefaultConfig()
		jc.G, jc.Envs, jc.MaxTurns, jc.TopK, jc.UseMemory, jc.Seed = o.K, o.Envs, budget, o.JoyTopK, o.JoyMemory, o.Seed
		// The update step is a compiled actor graph over the policy actors
		// and the memory actor (agent.JoyGraph).
		ja, err := agent.SpawnJoyAgents(ctx, rt, team, agent.JoyConfig{Config: jc, Env: o.Env, EnvConfig: ecfg, EnvActors: o.EnvActors})
		if err != nil {
			return res, err
		}
		defer ja.Kill(context.Background())
		tr := ja.Trainer
		stepFn = func(ctx context.Context) (StepRecord, error) {
			s, err := tr.Step(ctx)
			r := StepRecord{Kind: "step", Step: int(s.Step) + 1, Reward: s.Reward, Success: s.SuccessRate, TeamReturn: s.Accuracy, Samples: s.Counts.NodeSamples + s.Counts.CompletionSamples, AdvZero: s.Adv.Zero}
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
		r, err := stepFn(ctx)
		if err != nil {
			return res, fmt.Errorf("%s step %d: %w", o.Algo, s, err)
		}
		el := time.Since(t0).Seconds()
		r.TokensPerS = float64(totalTokens(ctx, team)-tokens0) / el
		record(r)
		bar.Update(s, fmt.Sprintf("reward %+.3f  success %3.0f%%  %6.0f tok/s", r.Reward, 100*r.Success, r.TokensPerS))
		if o.EvalEvery > 0 && s%o.EvalEvery == 0 && s < o.Steps {
			p, err := evaluate(s)
			if err != nil {
				return res, fmt.Errorf("evaluate: %w", err)
			}
			bar.Note(fmt.Sprintf("step %d held-out success %.0f%%", s, 100*p.Success))
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
	}
	pf, err := evaluate(o.Steps)
	if err != nil {
		return res, fmt.Errorf("evaluate: %w", err)
	}
	res.Final = pf
	logf("held-out eval after %d RL steps: success %.0f%% (was %.0f%%), team return %.3f, invalid %.1f%%; RL %.0fs, %.0f tokens/s",
		o.Steps, 100*pf.Success, 100*p0.Success, pf.Reward, 100*pf.Invalid, res.TrainWall.Seconds(), res.TokensPerS)
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
		n++
	}
	if n > 0 {
		r.Loss /= float64(n)
		r.Entropy /= float64(n)
		r.ClipFrac /= float64(n)
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
