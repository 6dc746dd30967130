// Package agent is the bridge between the RL algorithms (atgrpo, joyagents)
// and the actor runtime: a policy actor that owns a model (a policy.LM of
// the Llama family, pretrained with its Hugging Face tokenizer or from
// scratch with a character tokenizer, and its optimiser) and serves sampling, scoring,
// GRPO updates, supervised warm starts and checkpoints as actor methods;
// a client that implements rl.Policy and rl.Scorer by calling such an actor,
// so the algorithms drive policies that live in actors (one shared, or one per
// role updating in parallel); and a Team that spawns the actors and runs the
// per-role update fan-out as a compiled actor graph.
//
// AT-GRPO's step has a static shape (every policy updates every step), so
// ATGRPO runs its update as the Team's compiled graph. JoyAgents-R1 updates
// only the agents that own the top-K groups, a set that changes every step;
// its JoyGraph is nevertheless static: every policy actor and the memory
// actor are nodes, and an agent that was not selected gets an empty buffer
// (a no-op). SpawnJoyAgents wires the policy actors, the memory actor and
// optionally environment host actors (envs.Pool) into a joyagents.Trainer;
// ATGRPO samples over environment host actors when its Envs is set. Both
// actor paths give exactly the in-process results on a seeded run. Policies
// are placed by the cluster with TeamConfig's spawn options (per role too),
// so they may sit on different nodes and GPUs (Team.Placements reports
// where). With TeamConfig.Replicas every policy actor is N data-parallel
// replicas in a collective group, placed through a placement group: they
// split the sampling, each trains on its shard of every mini-batch, and an
// allreduce of the gradients keeps them bit-identical (replicas.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"troupe/actors"
	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
	"troupe/algorithms/policy/tokenizer"
	"troupe/algorithms/rl"
	"troupe/gpu/compute"
	"troupe/gpu/compute/backends"
)

// TypeName is the actor type name the policy actor is registered under.
const TypeName = "Policy"

func init() { actors.MustRegister(TypeName, NewPolicy) }

// Sentinel errors.
var (
	// ErrConfig reports an unusable policy configuration.
	ErrConfig = errors.New("agent: invalid config")
	// ErrInput reports a request the policy cannot serve (prompt too long,
	// mismatched lengths, tokens out of range).
	ErrInput = errors.New("agent: bad request")
	// ErrCheckpoint reports a checkpoint that cannot be used.
	ErrCheckpoint = errors.New("agent: bad checkpoint")
)

// Config builds one policy actor.
type Config struct {
	// Name is the policy name ("shared" or a role); it selects the actor's
	// buffer in UpdateFrom and is written into checkpoints.
	Name string
	// Model is the shape of a from-scratch model of the Llama family
	// (RMSNorm, RoPE, GQA with KVHeads key/value heads, SwiGLU; see
	// policy.Config.HF). Vocab 0 means the character tokenizer's size;
	// ignored with ModelDir or a model Checkpoint (an adapter checkpoint
	// goes on it).
	Model policy.Config
	// KVHeads is a from-scratch model's key/value heads (0: Model.Heads).
	KVHeads int
	// Intermediate is a from-scratch model's MLP width (0: about 8/3
	// Model.Width, as policy.Config.HF sizes it), e.g. 4864 for the
	// Qwen2.5-0.5B shape.
	Intermediate int
	// ModelDir, if set, is a pretrained Hugging Face model directory
	// (config.json, safetensors, tokenizer.json; Llama, Qwen2, Qwen3,
	// Mistral, SmolLM): the policy loads it with its own tokenizer, and
	// Checkpoint, if also set, is a directory of trained weights for it.
	ModelDir string
	// NoChat turns off rendering prompts through the tokenizer's chat
	// template (a user turn and the assistant's generation prompt), which a
	// ModelDir policy does when the model has a template.
	NoChat bool
	// System is an optional system message for chat prompts.
	System string
	// Seed initialises the weights.
	Seed uint64
	// Alphabet of the character tokenizer; "" means envs.Alphabet().
	Alphabet string
	// Optim is the AdamW setting; zero means policy.DefaultOptim().
	Optim policy.Optim
	// Loss is the GRPO loss; zero means grpo.DefaultConfig().
	Loss grpo.Config
	// Epochs is PPO's ppo_epochs: passes over the batch per Update, each
	// split into mini-batches (the clip keeps later steps near the sampling
	// policy). 0 means 1.
	Epochs int
	// MiniBatch is PPO's mini-batch: samples per optimiser step (verl's
	// ppo_mini_batch_size). 0 means DefaultMiniBatch (16); WholeBatch (−1)
	// is one step per epoch on the whole batch.
	MiniBatch int
	// Shuffle permutes the batch (seeded by the optimiser's step count)
	// before it is split in every epoch; false keeps the buffer's order,
	// as verl's default (actor shuffle: False).
	Shuffle bool
	// MicroBatch caps the sequences per forward/backward pass (gradients
	// are accumulated, the result is the same). 0 means 64.
	MicroBatch int
	// MaxNewTokens caps a sampled completion (EOS included). 0 means 8.
	MaxNewTokens int
	// Temperature of sampling; 0 means 1. Log-probs are always those of
	// the temperature-1 policy, so keep 1 for exact on-policy ratios.
	Temperature float32
	// Checkpoint, if set, loads the model (shape and weights) from this
	// Hugging Face model directory (what Save wrote) instead of
	// initialising it, or, if it holds a PEFT adapter, that adapter onto
	// the base (ModelDir's model, or Model's from the seed): see
	// policy.FromCheckpoint. An adapter brings its LoRA settings when LoRA
	// is unset, and must compute as LoRA when it is set.
	Checkpoint string
	// LoRA, if LoRA.Rank > 0, trains LoRA adapters on a frozen base
	// instead of all weights. Each adapter is initialised as PEFT does from Seed and its
	// name, so an adapter of a role starts the same in any actor.
	LoRA policy.LoRAConfig
	// Adapters names the actor's adapters, one per role it serves (one
	// actor, one adapter per role); requests name the one to use. Empty
	// with LoRA set means one adapter called Name.
	Adapters []string
	// BaseBF16 keeps a LoRA base's matrices in BF16 (half the memory).
	BaseBF16 bool
	// Decoupled trains on samples of older policy versions with AReaL's
	// decoupled PPO objective (the learner of a run with rollout workers):
	// before an update the policy recomputes the batch's log-probs (the
	// proximal policy), takes PPO's ratio against them and weighs every
	// token by π_prox/π_behav, dropping the tokens whose weight exceeds
	// ISCap. Off, the ratio is against the behaviour log-probs (on-policy).
	Decoupled bool
	// ISCap is the cap on the behaviour importance weight π_prox/π_behav
	// (AReaL's behav_imp_weight_cap): tokens above it are dropped from
	// the loss. 0 means DefaultISCap; it must be > 1.
	ISCap float64
	// ComputeBF16 runs a Llama-family model's matmuls in BF16 with float32
	// weights, gradients and optimizer (mixed precision, as
	// torch.autocast(dtype=torch.bfloat16)): about twice the matmul speed
	// on CPUs with AVX512_BF16, log-probs to about 1e-2 instead of 1e-4.
	// See policy.Llama.SetComputeDType.
	ComputeBF16 bool
	// ReplicaGroup, if set, names the collective group of the policy's
	// data-parallel replicas (TeamConfig.Replicas) this actor is one of:
	// its updates train on its shard of every mini-batch and sum the
	// gradients over the group (see replicas.go).
	ReplicaGroup string
	// Backend is "auto" (or ""), "cpu" or "cuda": see backends.ForPlacement.
	// With auto the actor computes on the GPU it was placed on (CUDA on a
	// real GPU, the CPU metered against a simulated one) and on the CPU
	// when it was given none. Scripts fill it from TROUPE_BACKEND.
	Backend string
}

// Policy is the policy actor: a model with its tokenizer and optimiser.
// It is not safe for concurrent use; the actor runtime serialises calls.
type Policy struct {
	cfg   Config
	model policy.LM
	tok   codec
	alpha string // the character tokenizer's alphabet ("" for a pretrained model)
	src   string // a pretrained model's directory: its tokenizer files go into saved checkpoints
	where string // the backend and why, e.g. "cuda:0 (NVIDIA A100, sm_80)"
	gen   int64  // tokens generated, for throughput reports
	train int64  // tokens trained on

	clock   phaseClock // where the actor's time went (Timeline)
	version int64      // the version of the last ImportWeights

	replicaHash uint64 // the trainable weights' hash after the last data-parallel update
}

// NewPolicy builds a policy from cfg (the actor constructor).
func NewPolicy(ctx context.Context, cfg Config) (*Policy, error) {
	if cfg.Alphabet == "" {
		cfg.Alphabet = envs.Alphabet()
	}
	if cfg.Epochs == 0 {
		cfg.Epochs = 1
	}
	if cfg.MicroBatch == 0 {
		cfg.MicroBatch = 64
	}
	if cfg.MiniBatch == 0 {
		cfg.MiniBatch = DefaultMiniBatch
	}
	if cfg.MaxNewTokens == 0 {
		cfg.MaxNewTokens = 8
	}
	if cfg.Temperature == 0 {
		cfg.Temperature = 1
	}
	if cfg.ISCap == 0 {
		cfg.ISCap = DefaultISCap
	}
	if cfg.Loss == (grpo.Config{}) {
		cfg.Loss = grpo.DefaultConfig()
	}
	if cfg.Optim == (policy.Optim{}) {
		cfg.Optim = policy.DefaultOptim()
	}
	switch {
	case cfg.Epochs < 0 || cfg.MicroBatch < 0 || cfg.MaxNewTokens < 0:
		return nil, fmt.Errorf("%w: negative epochs %d, micro-batch %d or max new tokens %d", ErrConfig, cfg.Epochs, cfg.MicroBatch, cfg.MaxNewTokens)
	case cfg.MiniBatch < WholeBatch:
		return nil, fmt.Errorf("%w: mini-batch %d (want > 0, or %d for the whole batch)", ErrConfig, cfg.MiniBatch, WholeBatch)
	case cfg.Temperature < 0:
		return nil, fmt.Errorf("%w: temperature %v < 0", ErrConfig, cfg.Temperature)
	case !(cfg.ISCap > 1):
		return nil, fmt.Errorf("%w: importance weight cap %v (want > 1)", ErrConfig, cfg.ISCap)
	}
	if err := cfg.Loss.Validate(); err != nil {
		return nil, fmt.Errorf("%w: loss: %w", ErrConfig, err)
	}
	p := &Policy{cfg: cfg}
	// Where the model comes from is read and checked once, before a backend
	// is chosen: a bad checkpoint fails without touching a GPU.
	r, err := p.resolve()
	if err != nil {
		return nil, err
	}
	// The backend follows the placement: CUDA on a real GPU, the CPU metered
	// against a simulated one (its busy time drives the GPU's simulated
	// utilization), the CPU otherwise. A GPU that cannot be used is an
	// error, never a silent fallback.
	var pl backends.Placement
	if info, ok := actors.Self(ctx); ok {
		pl = backends.Placement{Node: info.Node, Actor: info.Name, GPUs: info.GPUs, UUIDs: info.GPUUUIDs, Simulated: info.SimulatedGPUs}
		if pl.Actor == "" {
			pl.Actor = info.ID
		}
	}
	be, where, err := backends.ForPlacement(pl, cfg.Backend)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("%w: policy %q: compute backend: %w", ErrConfig, cfg.Name, err)
	}
	p.where = where
	if err := p.build(be, r); err != nil {
		return nil, err
	}
	if err := p.addAdapters(); err != nil {
		p.model.Free()
		return nil, err
	}
	cfg = p.cfg
	if cfg.ComputeBF16 {
		m, ok := p.model.(*policy.Llama)
		if !ok {
			p.model.Free()
			return nil, fmt.Errorf("%w: ComputeBF16 needs a model of the Llama family, not %s", ErrConfig, p.model.Family())
		}
		if err := m.SetComputeDType(hf.BF16); err != nil {
			p.model.Free()
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	p.model.SetOptimizer(cfg.Optim)
	return p, nil
}

// resolve derives where the model comes from (ModelDir's pretrained model
// or Model's from-scratch shape, under Checkpoint's weights when given: a
// model directory, or a PEFT adapter on that base) and resolves that
// source: the one place that reads what the directories hold. A trained
// adapter brings its LoRA settings when LoRA is unset.
func (p *Policy) resolve() (*policy.Resolved, error) {
	cfg := &p.cfg
	var base policy.Source
	var shapeErr error // a model checkpoint needs no from-scratch shape
	if cfg.ModelDir != "" {
		base = policy.FromHF(cfg.ModelDir)
	} else if hc, err := cfg.scratch(); err == nil {
		base = policy.FromScratch(hc)
	} else if cfg.Checkpoint == "" {
		return nil, err
	} else {
		shapeErr = err
	}
	src := base
	if cfg.Checkpoint != "" {
		src = policy.FromCheckpoint(cfg.Checkpoint, base)
	}
	r, err := src.Resolve()
	switch {
	case err != nil && shapeErr != nil && errors.Is(err, policy.ErrNoBase):
		return nil, fmt.Errorf("%w: %w; the from-scratch base: %w", ErrCheckpoint, err, shapeErr)
	case err != nil && cfg.Checkpoint == "" && cfg.ModelDir == "":
		return nil, fmt.Errorf("%w: model: %w", ErrConfig, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if ad := r.Adapter; ad != nil {
		switch {
		case cfg.LoRA.Rank == 0:
			cfg.LoRA = ad.Config
		case !ad.Config.Matches(cfg.LoRA):
			r.Close()
			return nil, fmt.Errorf("%w: %s: adapter r=%d scaling %v targets %v, policy %q has r=%d scaling %v targets %v",
				ErrCheckpoint, ad.Dir, ad.Config.Rank, ad.Config.Scaling(), ad.Config.Targets, cfg.Name, cfg.LoRA.Rank, cfg.LoRA.Scaling(), cfg.LoRA.Targets)
		}
		if len(cfg.Adapters) > 1 {
			r.Close()
			return nil, fmt.Errorf("%w: adapter checkpoint %s for %d adapters", ErrConfig, ad.Dir, len(cfg.Adapters))
		}
	}
	if cfg.LoRA.Rank > 0 && len(cfg.Adapters) == 0 {
		cfg.Adapters = []string{cfg.Name}
	}
	return r, nil
}

// scratch is the Hugging Face config of the from-scratch model: Model with
// KVHeads key/value heads, of the character tokenizer's vocabulary when
// Model.Vocab is 0.
func (c *Config) scratch() (hf.Config, error) {
	tok, err := tokenizer.NewChar(c.Alphabet)
	if err != nil {
		return hf.Config{}, fmt.Errorf("%w: tokenizer: %w", ErrConfig, err)
	}
	if c.Model.Vocab == 0 {
		c.Model.Vocab = tok.Vocab()
	}
	if c.Model.Vocab < tok.Vocab() {
		return hf.Config{}, fmt.Errorf("%w: model vocab %d < tokenizer vocab %d", ErrConfig, c.Model.Vocab, tok.Vocab())
	}
	hc, err := c.Model.HF(c.KVHeads)
	if err != nil {
		return hf.Config{}, fmt.Errorf("%w: model: %w", ErrConfig, err)
	}
	if c.Intermediate != 0 {
		hc.IntermediateSize = c.Intermediate
		if err := hc.Validate(); err != nil {
			return hf.Config{}, fmt.Errorf("%w: model: %w", ErrConfig, err)
		}
	}
	return hc, nil
}

// build loads the resolved model on be with its codec: a pretrained
// model's own tokenizer (ModelDir's, also for trained weights), or the
// character tokenizer of the alphabet a checkpoint was trained with.
func (p *Policy) build(be compute.Backend, r *policy.Resolved) error {
	defer r.Close()
	cfg := &p.cfg
	// errors name the directory of the weights, or say the config is bad
	bad, what := ErrCheckpoint, r.Dir+": "
	switch {
	case r.Dir == "" && cfg.Checkpoint != "": // an adapter on a from-scratch base
		what = cfg.Checkpoint + ": "
	case r.Dir == "":
		bad, what = ErrConfig, ""
	}
	var c codec
	var vocab int
	if cfg.ModelDir != "" {
		tok, err := tokenizer.Load(cfg.ModelDir)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCheckpoint, cfg.ModelDir, err)
		}
		hc, err := newHFCodec(tok, !cfg.NoChat, cfg.System)
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.ModelDir, err)
		}
		c, vocab, p.src = hc, tok.Vocab(), cfg.ModelDir
	} else {
		if a, ok := r.Meta["alphabet"]; ok {
			cfg.Alphabet = a
		}
		tok, err := tokenizer.NewChar(cfg.Alphabet)
		if err != nil {
			return fmt.Errorf("%w: %stokenizer: %w", bad, what, err)
		}
		c, vocab, p.alpha = charCodec{tok}, tok.Vocab(), cfg.Alphabet
	}
	if r.Config.VocabSize < vocab {
		return fmt.Errorf("%w: %smodel vocab %d < tokenizer vocab %d", bad, what, r.Config.VocabSize, vocab)
	}
	opt := policy.LoadOptions{Seed: cfg.Seed, BF16Base: cfg.BaseBF16 && cfg.LoRA.Rank > 0}
	if r.Adapter != nil {
		opt.Adapter = cfg.Adapters[0]
	}
	m, err := r.Load(be, opt)
	if err != nil {
		if bad == ErrConfig {
			return fmt.Errorf("%w: model: %w", ErrConfig, err)
		}
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	p.model, p.tok = m, c
	return nil
}

// Model returns the policy's model (for in-process use, e.g. tests).
func (p *Policy) Model() policy.LM { return p.model }

// promptTokens renders a prompt with room left in the context for the
// completion.
func (p *Policy) promptTokens(text string) ([]int32, error) {
	return p.tok.Prompt(text, p.model.ContextLen()-p.cfg.MaxNewTokens)
}

// SampleRequest asks for K completions of every prompt.
type SampleRequest struct {
	Prompts []string
	K       int
	Seed    int64
	// Temperature, if > 0, overrides the policy's sampling temperature
	// (evaluation decoding); log-probs stay those of the temperature-1
	// policy, so training samples should leave it 0.
	Temperature float32
	// Greedy decodes by argmax (temperature 0, as the paper evaluates);
	// it overrides Temperature.
	Greedy bool
	// NoLogProbs skips the scoring pass: the completions carry no
	// log-probs (evaluation, which needs only the text).
	NoLogProbs bool
	// Adapter names the LoRA adapter (the role) to sample with; "" is the
	// actor's first.
	Adapter string
	// RowOffset is the index, in a whole request, of this part's first
	// completion (its first prompt's index × K): a request split over
	// data-parallel replicas samples as the whole (policy.GenerateOptions).
	RowOffset int
}

// Sample implements rl.Sampler as an actor method: K completions per prompt
// with their temperature-1 log-probs.
func (p *Policy) Sample(ctx context.Context, req SampleRequest) ([][]rl.Completion, error) {
	if req.K < 1 {
		return nil, fmt.Errorf("%w: sample k = %d", ErrInput, req.K)
	}
	defer p.clock.since(&p.clock.rollout, time.Now())
	if err := p.use(req.Adapter); err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	n := len(req.Prompts) * req.K
	if n == 0 {
		return [][]rl.Completion{}, nil
	}
	prompts := make([][]int32, 0, n)
	for _, t := range req.Prompts {
		pt, err := p.promptTokens(t)
		if err != nil {
			return nil, fmt.Errorf("sample: %w", err)
		}
		for j := 0; j < req.K; j++ {
			prompts = append(prompts, pt)
		}
	}
	temp := p.cfg.Temperature
	if req.Temperature > 0 {
		temp = req.Temperature
	}
	if req.Greedy {
		temp = 0 // policy.Generate: argmax
	}
	gen, err := p.model.Generate(prompts, policy.GenerateOptions{
		MaxNewTokens: p.cfg.MaxNewTokens,
		Temperature:  temp,
		Seed:         uint64(req.Seed),
		RowOffset:    req.RowOffset,
		Stop:         p.tok.Stop(),
		VocabLimit:   p.tok.Vocab(),
	})
	if err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	// Score the sampled tokens with one teacher-forced pass: the behaviour
	// log-probs the GRPO ratio needs.
	seqs := make([][]int32, n)
	for i := range gen {
		p.gen += int64(len(gen[i]))
		seqs[i] = append(append([]int32(nil), prompts[i]...), gen[i]...)
	}
	var lps [][]float32
	if !req.NoLogProbs {
		if lps, err = p.logProbsChunked(seqs); err != nil {
			return nil, fmt.Errorf("sample: score: %w", err)
		}
	}
	out := make([][]rl.Completion, len(req.Prompts))
	for i := range out {
		out[i] = make([]rl.Completion, req.K)
		for j := range out[i] {
			r := i*req.K + j
			g := gen[r]
			c := rl.Completion{Text: p.tok.Decode(g), Tokens: make([]int, len(g))}
			for t, id := range g {
				c.Tokens[t] = int(id)
			}
			if lps != nil {
				lp := lps[r]
				off := len(lp) - len(g)
				c.LogProbs = append([]float32(nil), lp[off:]...)
			}
			out[i][j] = c
		}
	}
	return out, nil
}

// logProbsChunked scores sequences in micro-batches.
func (p *Policy) logProbsChunked(seqs [][]int32) ([][]float32, error) {
	out := make([][]float32, 0, len(seqs))
	for lo := 0; lo < len(seqs); lo += p.cfg.MicroBatch {
		hi := min(lo+p.cfg.MicroBatch, len(seqs))
		lp, err := p.model.LogProbs(policy.Batch{Tokens: seqs[lo:hi]})
		if err != nil {
			return nil, err
		}
		out = append(out, lp...)
	}
	return out, nil
}

// LogProbsRequest asks for the log-probs of given completions.
type LogProbsRequest struct {
	Prompts     []string
	Completions []rl.Completion
	Adapter     string // the LoRA adapter to score with; "" the actor's first
}

// LogProbs implements rl.Scorer as an actor method.
func (p *Policy) LogProbs(ctx context.Context, req LogProbsRequest) ([][]float32, error) {
	if len(req.Prompts) != len(req.Completions) {
		return nil, fmt.Errorf("%w: %d prompts for %d completions", ErrInput, len(req.Prompts), len(req.Completions))
	}
	defer p.clock.since(&p.clock.train, time.Now())
	if err := p.use(req.Adapter); err != nil {
		return nil, fmt.Errorf("log-probs: %w", err)
	}
	seqs, offs, err := p.sequences(req.Prompts, req.Completions)
	if err != nil {
		return nil, err
	}
	lps, err := p.logProbsChunked(seqs)
	if err != nil {
		return nil, fmt.Errorf("log-probs: %w", err)
	}
	out := make([][]float32, len(seqs))
	for i, lp := range lps {
		out[i] = append([]float32{}, lp[offs[i]:]...)
	}
	return out, nil
}

// sequences renders (prompt, completion) pairs as token sequences and the
// index in each sequence's log-probs where the completion starts.
func (p *Policy) sequences(prompts []string, comps []rl.Completion) ([][]int32, []int, error) {
	seqs := make([][]int32, len(prompts))
	offs := make([]int, len(prompts))
	V, T := p.model.VocabSize(), p.model.ContextLen()
	for i, pr := range prompts {
		s, err := p.promptTokens(pr)
		if err != nil {
			return nil, nil, err
		}
		offs[i] = len(s) - 1
		for _, id := range comps[i].Tokens {
			if id < 0 || id >= V {
				return nil, nil, fmt.Errorf("%w: completion %d has token %d outside vocab %d", ErrInput, i, id, V)
			}
			s = append(s, int32(id))
		}
		if len(s) > T+1 {
			return nil, nil, fmt.Errorf("%w: completion %d: %d tokens exceed context %d", ErrInput, i, len(s), T)
		}
		seqs[i] = s
	}
	return seqs, offs, nil
}

// Update implements rl.Learner as an actor method: PPO on the clipped GRPO
// loss of batch (grpo.Loss → d loss/d logp → backprop), Epochs passes of
// one AdamW step per mini-batch of MiniBatch samples (see update, ppo.go).
func (p *Policy) Update(ctx context.Context, batch []rl.Sample) (rl.UpdateStats, error) {
	if err := p.use(""); err != nil {
		return rl.UpdateStats{}, fmt.Errorf("update %s: %w", p.cfg.Name, err)
	}
	return p.update(ctx, batch)
}

// UpdateFrom is Update on buffers[Name]: the form a compiled graph's
// fan-out uses, where every policy actor receives the step's buffers and
// trains on its own. It reports the stats under the policy's name.
func (p *Policy) UpdateFrom(ctx context.Context, buffers map[string][]rl.Sample) (NamedStats, error) {
	st, err := p.Update(ctx, buffers[p.cfg.Name])
	return NamedStats{Name: p.cfg.Name, Stats: st}, err
}

// NamedStats is one policy's update statistics, named.
type NamedStats struct {
	Name  string
	Stats rl.UpdateStats
}

// Example is one supervised (prompt, answer) pair.
type Example struct {
	Prompt string
	Answer string
}

// SFTRequest is a supervised warm start.
type SFTRequest struct {
	Examples  []Example
	Epochs    int     // passes over the examples (≥ 1)
	BatchSize int     // examples per optimiser step (≥ 1)
	LR        float32 // learning rate during SFT; 0 keeps the optimiser's
	Seed      uint64  // shuffling seed
	Adapter   string  // the LoRA adapter to train; "" the actor's first
}

// SFTStats reports a warm start.
type SFTStats struct {
	Steps     int
	FirstLoss float64 // mean cross-entropy of the first step
	LastLoss  float64 // mean over the last epoch's steps
	Tokens    int64   // completion tokens trained on
}

// SFT trains on examples with cross-entropy on the answer tokens (and EOS)
// only: the warm start from expert transcripts.
func (p *Policy) SFT(ctx context.Context, req SFTRequest) (st SFTStats, err error) {
	defer p.clock.since(&p.clock.train, time.Now())
	if req.Epochs < 1 || req.BatchSize < 1 {
		return st, fmt.Errorf("%w: sft epochs %d, batch size %d (both must be ≥ 1)", ErrInput, req.Epochs, req.BatchSize)
	}
	if len(req.Examples) == 0 {
		return st, fmt.Errorf("%w: sft without examples", ErrInput)
	}
	if err := p.use(req.Adapter); err != nil {
		return st, fmt.Errorf("sft: %w", err)
	}
	seqs := make([][]int32, len(req.Examples))
	ws := make([][]float32, len(req.Examples))
	for i, ex := range req.Examples {
		s, err := p.promptTokens(ex.Prompt)
		if err != nil {
			return st, fmt.Errorf("sft example %d: %w", i, err)
		}
		start := len(s)
		s = append(s, p.tok.Answer(ex.Answer)...)
		if T := p.model.ContextLen(); len(s) > T+1 {
			return st, fmt.Errorf("%w: sft example %d: %d tokens exceed context %d", ErrInput, i, len(s), T)
		}
		w := make([]float32, len(s)-1)
		for t := start - 1; t < len(w); t++ {
			w[t] = 1
		}
		seqs[i], ws[i] = s, w
	}
	saved := p.model.Optimizer()
	if req.LR > 0 {
		o := saved
		o.LR = req.LR
		p.model.SetOptimizer(o)
	}
	defer p.model.SetOptimizer(saved)
	r := rand.New(rand.NewPCG(req.Seed, 7))
	order := make([]int, len(seqs))
	for i := range order {
		order[i] = i
	}
	dp, err := p.dataParallel(ctx)
	if err != nil {
		return st, fmt.Errorf("sft %s: %w", p.cfg.Name, err)
	}
	defer dp.leaveOnError(&err)
	var partial []float64 // with dp: each step's loss from this replica's shard
	for e := 0; e < req.Epochs; e++ {
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		var sum float64
		var n int
		for lo := 0; lo < len(order); lo += req.BatchSize {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			hi := min(lo+req.BatchSize, len(order))
			b := policy.Batch{}
			for _, i := range order[lo:hi] {
				b.Tokens = append(b.Tokens, seqs[i])
				b.Weights = append(b.Weights, ws[i])
			}
			var s policy.StepStats
			if dp != nil {
				s, err = p.sftStep(ctx, dp, b)
				partial = append(partial, s.Loss)
			} else {
				s, err = p.model.TrainStep(b)
			}
			if err != nil {
				return st, fmt.Errorf("sft %s: %w", p.cfg.Name, err)
			}
			if st.Steps == 0 {
				st.FirstLoss = s.Loss
			}
			st.Steps++
			st.Tokens += int64(s.Tokens)
			sum += s.Loss
			n++
		}
		st.LastLoss = sum / float64(n)
	}
	if dp != nil {
		if err := p.mergeSFT(ctx, dp, &st, partial, (len(order)+req.BatchSize-1)/req.BatchSize); err != nil {
			return st, fmt.Errorf("sft %s: %w", p.cfg.Name, err)
		}
	}
	return st, nil
}

// SaveRequest names a checkpoint directory and extra metadata.
type SaveRequest struct {
	Path string
	Meta map[string]string
	// Adapter names the LoRA adapter to save ("" the actor's first): a
	// LoRA policy saves its adapter in PEFT's layout, not the base.
	Adapter string
}

// Save writes a checkpoint (atomically) with the tokenizer alphabet,
// policy name and optimiser step count in its metadata, and returns the
// path: a Hugging Face model directory (which, for a pretrained model, also
// gets the tokenizer files, so that it opens in transformers and in
// `troupe generate` as it is).
func (p *Policy) Save(ctx context.Context, req SaveRequest) (string, error) {
	if req.Path == "" {
		return "", fmt.Errorf("%w: save without a path", ErrInput)
	}
	if p.lora() != nil {
		return p.saveAdapter(req)
	}
	meta := map[string]string{"policy": p.cfg.Name, "steps": strconv.Itoa(p.model.Steps())}
	if p.alpha != "" {
		meta["alphabet"] = p.alpha
	}
	for k, v := range req.Meta {
		meta[k] = v
	}
	if err := p.model.SaveCheckpoint(req.Path, meta); err != nil {
		return "", fmt.Errorf("save %s: %w", req.Path, err)
	}
	if p.src != "" {
		if err := copyTokenizerFiles(p.src, req.Path); err != nil {
			return "", fmt.Errorf("save %s: %w", req.Path, err)
		}
	}
	return req.Path, nil
}

// tokenizerFiles are what a Hugging Face model directory holds besides the
// weights and config.json.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
	"generation_config.json", "chat_template.jinja", "chat_template.json"}

// copyTokenizerFiles copies the tokenizer files of model directory src
// into dst (those that exist).
func copyTokenizerFiles(src, dst string) error {
	for _, name := range tokenizerFiles {
		b, err := os.ReadFile(filepath.Join(src, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		tmp := filepath.Join(dst, "."+name+".tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dst, name)); err != nil {
			return err
		}
	}
	return nil
}

// Load replaces the weights with those of a checkpoint of the same shape
// (a LoRA policy's: its first adapter's, from a PEFT adapter directory).
func (p *Policy) Load(ctx context.Context, path string) (WeightStats, error) {
	if p.lora() != nil {
		if err := p.loadAdapter(path, ""); err != nil {
			return WeightStats{}, err
		}
		return p.Weights(ctx, struct{}{})
	}
	r, err := policy.FromHF(path).Resolve()
	if err != nil {
		return WeightStats{}, fmt.Errorf("%w: load %s: %w", ErrCheckpoint, path, err)
	}
	if a, ok := r.Meta["alphabet"]; ok && a != p.alpha {
		r.Close()
		return WeightStats{}, fmt.Errorf("%w: %s was trained with alphabet %q, policy uses %q", ErrCheckpoint, path, a, p.alpha)
	}
	m, err := r.Load(p.model.Backend(), policy.LoadOptions{})
	if err != nil {
		return WeightStats{}, fmt.Errorf("%w: load %s: %w", ErrCheckpoint, path, err)
	}
	defer m.Free()
	if err := p.model.CopyWeightsFrom(m); err != nil {
		return WeightStats{}, fmt.Errorf("%w: load %s: %w", ErrCheckpoint, path, err)
	}
	return p.Weights(ctx, struct{}{})
}

// WeightStats describes a policy's parameters and work done.
type WeightStats struct {
	Name      string
	Params    int
	Norm      float64 // L2 norm of all parameters
	Steps     int     // optimiser steps taken
	GenTokens int64   // tokens generated so far
	TrainTok  int64   // tokens run through training forward/backward passes
	Family    string  // the Hugging Face model_type ("llama", "qwen2", ...)
	Context   int     // the model's context length
	// Backend is the compute backend the actor runs and why, e.g.
	// "cuda:0 (NVIDIA H100, sm_90)" or "cpu metered as simulated GPU 3".
	Backend string
}

// normLimit bounds the models whose weight norm Weights computes: it copies
// the weights to the host, which a pretrained model's size does not allow.
const normLimit = 16 << 20

// Weights reports the parameter count, norm (0 above normLimit parameters)
// and counters.
// A LoRA policy reports its first adapter's (see AdapterWeights).
func (p *Policy) Weights(ctx context.Context, _ struct{}) (WeightStats, error) {
	if p.lora() != nil {
		return p.AdapterWeights(ctx, "")
	}
	ws := WeightStats{Name: p.cfg.Name, Params: p.model.NumParams(), Steps: p.model.Steps(),
		GenTokens: p.gen, TrainTok: p.train, Family: p.model.Family(), Context: p.model.ContextLen(), Backend: p.where}
	if ws.Params <= normLimit {
		w, err := p.model.Weights()
		if err != nil {
			return WeightStats{}, fmt.Errorf("weights: %w", err)
		}
		var ss float64
		for _, x := range w {
			ss += float64(x) * float64(x)
		}
		ws.Norm = math.Sqrt(ss)
	}
	return ws, nil
}
