// Package joyagents implements JoyAgents-R1 ("JoyAgents-R1: Joint
// Evolution Dynamics for Versatile Multi-LLM Agents with Reinforcement
// Learning", arXiv 2506.19846): GRPO for heterogeneous agents that act in
// sequence, with three additions.
//
// # Node-wise Monte Carlo sampling (the paper's node-wise Monte Carlo sampling)
//
// Sampling G whole joint trajectories explores G of the G^L joint action
// sequences of L agent steps and gives no per-agent groups. Instead one
// trajectory is rolled through its nodes 1..L, a node being one (agent,
// turn) step. At node l, with prefix state s_l, the node's agent samples G
// alternatives from the same prompt; each alternative is applied to a Clone
// of s_l and completed to the end with the current policies of all agents
// (one sample per later node). The G final trajectory rewards form node l's
// group and get GRPO advantages (grpo.Advantages) inside it. The backbone
// trajectory continues with alternative 0, an ordinary on-policy sample, so
// every prefix stays on-policy. Cost: L groups of G, i.e. L·G alternatives,
// not G^L. The backbones of a step advance in lockstep, so one Sample call
// serves a node of every backbone, and one call per later node completes all
// of their branches.
//
// # Master agent (the paper's hierarchy)
//
// In an environment that routes its turns (envs.Router, e.g. routepath),
// a master agent's action chooses the sub-agent that acts next, and only
// that role is asked at each node position and in the playouts. The
// master's node is an ordinary node: its G alternative routes are each
// played out to the end by the sub-agents they route to, so the route
// earns a grouped advantage of its own and the master is trained by RL
// with the sub-agents.
//
// # Marginal-benefit selection (the paper's marginal benefit-driven selection)
//
// Groups are ranked by the unbiased variance of their rewards (a group
// whose alternatives all score the same carries no gradient); only the top
// K groups of the step are kept, and only the agents that own them are
// updated, each on the samples of its selected groups. K = DefaultTopK (5)
// unless set; K = 0 keeps all. Ties keep trajectory order (environment, then
// node).
//
// # Memory evolution (the paper's adaptive memory evolution)
//
// Each agent has a Memory of (situation, answer, reward, time) entries.
// GRPO groups are its free supervision: an answer whose memory reward
// (accuracy + format, no efficiency term) is an outlier of the step is
// inserted (or replaces the entry with the most similar situation, if it
// scores at least as well), and entries similar to an answer that is an
// outlier on the low side are removed. The paper's outlier rule, μ ± 1.96σ
// inside each group, can barely fire at the group sizes used here (with
// the unbiased std the largest z-score in a group of G is (G−1)/√G: 2.04 at
// G = 6), so the default rule (ThresholdPooled) keeps its intent, the 2.5%
// tails, on the distribution of the agent's memory rewards pooled over the
// groups of one evolution: an answer at or above the pooled 97.5% quantile
// that beats its group's mean is inserted, one at or below the 2.5% quantile
// that falls short of it removes similar entries (ThresholdGroupZ is the
// paper's rule). Entry score = α·(reward − μ_group) + β·exp(−age/τ),
// α = β = 1. The memory evolves after every node position during sampling,
// with that position's groups of all backbones, so that the rest of the step
// can use it (MemoryConfig.PerStep: once per step, in the update); the
// feedback of memory answers is applied in the update.
//
// The memory is read whenever an agent acts, in training (NodeSampler) and
// in evaluation (WithMemory): a situation within SkipEdits character edits
// of a remembered one whose entry scores at least SkipScore is answered
// with the remembered answer without sampling (the paper's skipping of
// repeated reasoning), and otherwise the most similar entry's answer is
// appended to the observation as a hint (HintPrefix + answer; the training
// scripts make the context that much longer and show hints in part of the
// warm start). Similarity is character trigram Jaccard (see Similarity).
// Because a skipped node forms no group, every trajectory that used a
// memory answer reports its memory reward back (Memory.Feedback): falling
// short of the entry's recorded reward lowers the entry's score, so wrong
// advice stops being used and is replaced.
//
// # Reward
//
// R = accuracy + format − efficiency per trajectory, computed from the
// environment: accuracy = Σ team rewards (+ LocalWeight × Σ local rewards,
// 0 by default), format = FormatWeight × share of valid actions, efficiency
// = EfficiencyWeight × number of actions.
// Memory uses accuracy + format only.
//
// # Dr. MAS option
//
// With Config.DrMAS, advantages are not normalised per group but per agent
// and task, as Dr. MAS's code does it (arXiv 2602.08847, "agent-wise
// advantage normalization"; verl's compute_grpo_outcome_advantage with
// group_by_agent_id keys samples by (prompt uid, agent)): A = (R − μ)/(σ +
// 1e-6) with μ, σ the mean and unbiased std of all of agent k's alternative
// rewards on the same backbone (the task), every node pooled (R − μ under
// MeanCentered).
//
// # Actors
//
// The training step runs the same over in-process values and over actors:
// the sampler drives an envs.Batch (envs.LocalBatch in the driver, or an
// envs.Pool of environment host actors; Trainer.Envs), memory is a
// MemoryBank (LocalBank in the driver, or a MemoryClient of the memory
// actor, MemoryActor; Trainer.Memory), and the update is an Updater
// (rl.UpdateAll then memory evolution, or agent.JoyGraph: the policy actors
// and the memory actor as one compiled actor graph; Trainer.Update). A
// seeded run gives identical statistics, memories and weights either way.
package joyagents

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
)

// Sentinel errors.
var (
	// ErrConfig reports an invalid configuration.
	ErrConfig = errors.New("joyagents: invalid config")
	// ErrEnv reports environments that cannot be driven.
	ErrEnv = errors.New("joyagents: environment")
	// ErrPolicy reports a missing or misbehaving policy (rl.ErrPolicy).
	ErrPolicy = rl.ErrPolicy
)

// RewardConfig weighs the terms of R.
type RewardConfig struct {
	FormatWeight     float64 // × share of valid actions
	EfficiencyWeight float64 // × number of actions
	LocalWeight      float64 // × Σ the agents' local rewards, added to accuracy (0: team outcome only)
}

// DefaultRewardConfig: format weight 0.5, efficiency 0.05 per action.
func DefaultRewardConfig() RewardConfig {
	return RewardConfig{FormatWeight: 0.5, EfficiencyWeight: 0.05}
}

// Outcome accumulates what a trajectory did.
type Outcome struct {
	Team    float64 // Σ team reward
	Local   float64 // Σ local rewards of every acting agent
	Actions int
	Valid   int
	Success bool

	used []memUse // nodes answered from memory, for Memory.Feedback
}

// memUse is one action answered from memory.
type memUse struct{ role, situation, answer string }

func (o *Outcome) add(st envs.Step) {
	o.Team += st.Team
	o.Local += st.Local
	o.Actions++
	if st.Valid {
		o.Valid++
	}
}

// Reward is a trajectory's reward decomposition.
type Reward struct {
	Accuracy, Format, Efficiency float64
}

// Total is R = accuracy + format − efficiency (the RL reward).
func (r Reward) Total() float64 { return r.Accuracy + r.Format - r.Efficiency }

// Memory is the memory reward accuracy + format.
func (r Reward) Memory() float64 { return r.Accuracy + r.Format }

// Of computes the reward of an outcome.
func (c RewardConfig) Of(o Outcome) Reward {
	r := Reward{Accuracy: o.Team + c.LocalWeight*o.Local, Efficiency: c.EfficiencyWeight * float64(o.Actions)}
	if o.Actions > 0 {
		r.Format = c.FormatWeight * float64(o.Valid) / float64(o.Actions)
	}
	return r
}

// Config configures a JoyAgents-R1 step.
type Config struct {
	G        int // alternatives per node (group size)
	Envs     int // backbone trajectories per step
	MaxTurns int // rounds after which an episode is cut off
	TopK     int // groups kept by marginal-benefit selection; 0 = all
	// TopFrac > 0 replaces TopK by a per-agent selection: each agent keeps
	// its ceil(TopFrac × n) groups of largest variance out of its n
	// (SelectTopFrac), so every agent's update has data as the step grows.
	TopFrac   float64
	Advantage grpo.AdvantageMode // GRPO or Dr. GRPO advantages
	DrMAS     bool               // Dr. MAS: normalise per (backbone, agent), every node pooled, instead of per group
	Reward    RewardConfig
	UseMemory bool
	Memory    MemoryConfig
	Seed      int64
}

// DefaultTopK is the default marginal-benefit selection: the 5 groups of
// the step with the largest reward variance. The paper ablates K = 1, 2, 5
// and all; 5 is the largest short of all, since with 4 backbones of about
// 12 nodes (Plan-Path 6×6) a step has about 50 groups, and top-1 or top-2
// would train on 6 or 12 samples a step.
const DefaultTopK = 5

// DefaultConfig: G = 8, 4 trajectories, 32 rounds, top-K = DefaultTopK,
// GRPO advantages, memory on with DefaultMemoryConfig.
func DefaultConfig() Config {
	return Config{G: 8, Envs: 4, MaxTurns: 32, TopK: DefaultTopK, Reward: DefaultRewardConfig(), UseMemory: true, Memory: DefaultMemoryConfig()}
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.G < 1:
		return fmt.Errorf("%w: G = %d, want >= 1", ErrConfig, c.G)
	case c.Envs < 1:
		return fmt.Errorf("%w: Envs = %d, want >= 1", ErrConfig, c.Envs)
	case c.MaxTurns < 1:
		return fmt.Errorf("%w: MaxTurns = %d, want >= 1", ErrConfig, c.MaxTurns)
	case c.TopK < 0:
		return fmt.Errorf("%w: TopK = %d, want >= 0 (0 = all)", ErrConfig, c.TopK)
	case !(c.TopFrac >= 0 && c.TopFrac <= 1):
		return fmt.Errorf("%w: TopFrac = %v, want 0..1 (0: TopK)", ErrConfig, c.TopFrac)
	case c.UseMemory && c.Memory.Capacity < 1:
		return fmt.Errorf("%w: memory capacity %d, want >= 1", ErrConfig, c.Memory.Capacity)
	case c.UseMemory && !(c.Memory.Tail >= 0 && c.Memory.Tail < 0.5):
		return fmt.Errorf("%w: memory tail %v, want in [0, 0.5)", ErrConfig, c.Memory.Tail)
	}
	return nil
}

// Alternative is one of a node's G samples and where it led.
type Alternative struct {
	Completion rl.Completion
	Outcome    Outcome // of the whole trajectory: prefix, this action, completion
	Reward     Reward
	Advantage  float64
}

// Group is one node's G alternatives.
type Group struct {
	Env       int    // environment instance
	Node      int    // index of the node in the backbone trajectory
	Role      string // the agent acting at the node
	Policy    string // name of its policy
	Turn      int    // env.Turn() at the node
	Situation string // the raw observation (memory key)
	Prompt    string // the observation plus memory hint (what was sampled from)
	Alts      []Alternative
	Variance  float64 // unbiased variance of the alternatives' total rewards
}

// Key renders the group key "env0/n3/planner".
func (g *Group) Key() string { return fmt.Sprintf("env%d/n%d/%s", g.Env, g.Node, g.Role) }

// UID is the Dr. MAS "prompt uid" of the group: its backbone, "env0".
func (g *Group) UID() string { return "env" + strconv.Itoa(g.Env) }

// Trajectory is one backbone trajectory and its node groups.
type Trajectory struct {
	Env     int
	Nodes   int // L: agent steps on the backbone, sampled or answered from memory
	Skipped int // nodes answered from memory (no group)
	Outcome Outcome
	Reward  Reward
	Groups  []*Group
}

// Counts are sampling costs.
type Counts struct {
	NodeSamples       int // alternatives sampled at nodes (Σ L·G)
	CompletionSamples int // single samples drawn to complete branches
	SkippedActions    int // actions answered from memory (backbone and completions)
	HintedActions     int // actions sampled from a prompt with a memory hint
	Actions           int // every action taken (sampled, completed or answered from memory)
}

// NodeSampler runs node-wise Monte Carlo sampling.
type NodeSampler struct {
	Config   Config       // G, MaxTurns, reward and memory settings
	Policies *rl.Policies // who acts for each role
	// Memories by role; consulted only with Config.UseMemory (nil or
	// missing roles mean no memory for that role). Ignored when Bank is set.
	Memories map[string]*Memory
	// Bank, if set, is the memory consulted (e.g. a MemoryClient of a
	// memory actor) instead of Memories.
	Bank   MemoryBank
	Now    int64 // the training step, for memory decay
	Counts Counts
	// Evolved sums the memory evolution done during sampling (every
	// node position's groups, unless Config.Memory.PerStep), and Sizes
	// are the memory sizes after the last one.
	Evolved GroupUpdate
	Sizes   map[string]int
}

// evolveOnline applies one node position's groups to the memory during
// sampling (see MemoryConfig.PerStep).
func (s *NodeSampler) evolveOnline(ctx context.Context, roles []string, groups []*Group) error {
	b := s.bank()
	if b == nil || s.Config.Memory.PerStep || len(groups) == 0 {
		return nil
	}
	req := EvolveRequest{Now: s.Now, Roles: slices.Clone(roles), Groups: groupRecords(groups)}
	res, err := b.Evolve(ctx, req)
	if err != nil {
		return fmt.Errorf("memory evolution during sampling: %w", err)
	}
	s.Evolved.Inserted += res.Update.Inserted
	s.Evolved.Replaced += res.Update.Replaced
	s.Evolved.Removed += res.Update.Removed
	s.Sizes = res.Sizes
	return nil
}

func (s *NodeSampler) bank() MemoryBank {
	switch {
	case !s.Config.UseMemory:
		return nil
	case s.Bank != nil:
		return s.Bank
	case s.Memories != nil:
		return &LocalBank{Config: s.Config.Memory, Memories: s.Memories}
	}
	return nil
}

// advise asks memory about role's observations: one Advice each (all
// zero, i.e. sample from the bare observation, without memory).
func (s *NodeSampler) advise(ctx context.Context, role string, obs []string) ([]Advice, error) {
	b := s.bank()
	if b == nil {
		return make([]Advice, len(obs)), nil
	}
	req := AdviceRequest{Now: s.Now, Queries: make([]Query, len(obs))}
	for i, o := range obs {
		req.Queries[i] = Query{Role: role, Situation: o}
	}
	out, err := b.Advise(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("memory advice for %s: %w", role, err)
	}
	if len(out) != len(obs) {
		return nil, fmt.Errorf("%w: %d advices for %d observations", ErrMemory, len(out), len(obs))
	}
	return out, nil
}

// Rollouts runs node-wise sampling on every env of es (each advanced in
// place along its backbone; instance e's groups are keyed env e) for
// training step step. It is RolloutsBatch over the instances in this
// process.
func (s *NodeSampler) Rollouts(ctx context.Context, es []envs.Env, step int64) ([]*Trajectory, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, err
	}
	if _, err := envs.CommonRoles(es); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEnv, err)
	}
	b, ep, err := envs.LocalOf(es)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEnv, err)
	}
	return s.RolloutsBatch(ctx, b, ep, step)
}

// RolloutsBatch runs node-wise sampling on the episodes ep of batch b (an
// envs.LocalBatch in this process or an envs.Pool of environment actors;
// the results are the same). The backbones advance in lockstep, one node
// each per iteration, so one Sample call (k = G) serves a node of every
// backbone, one Branch call makes all of their alternatives, and one call
// per later node completes all of their branches. Branches are dropped
// once scored.
func (s *NodeSampler) RolloutsBatch(ctx context.Context, b envs.Batch, ep envs.Episodes, step int64) ([]*Trajectory, error) {
	cfg := s.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	roles := ep.Roles
	if len(roles) == 0 || len(ep.Refs) == 0 || len(ep.States) != len(ep.Refs) {
		return nil, fmt.Errorf("%w: %d episodes with %d states and roles %v", ErrEnv, len(ep.Refs), len(ep.States), roles)
	}
	refs := slices.Clone(ep.Refs)
	states := slices.Clone(ep.States)
	trs := make([]*Trajectory, len(refs))
	for i := range trs {
		trs[i] = &Trajectory{Env: i}
	}
	live := func(st envs.State) bool { return !st.Done && st.Turn < cfg.MaxTurns }
	pick := func(idx []int) []envs.Ref {
		out := make([]envs.Ref, len(idx))
		for k, e := range idx {
			out[k] = refs[e]
		}
		return out
	}
	for p := 0; ; p++ {
		if !slices.ContainsFunc(states, live) {
			break
		}
		// The cap guards against an environment whose turn never advances.
		if p > (cfg.MaxTurns+1)*len(roles) {
			return nil, fmt.Errorf("%w: episodes did not finish %d rounds in %d steps", ErrEnv, cfg.MaxTurns, p)
		}
		ri := p % len(roles)
		role := roles[ri]
		name, pol, err := s.Policies.For(role)
		if err != nil {
			return nil, err
		}
		var liveIdx []int
		for e, st := range states {
			if live(st) && st.Acts(role) {
				liveIdx = append(liveIdx, e)
			}
		}
		if len(liveIdx) == 0 {
			continue // a Router routed every live turn to another role
		}
		obs, err := b.Observe(ctx, pick(liveIdx), role)
		if err != nil {
			return nil, fmt.Errorf("%w: observe for %s at position %d: %v", ErrEnv, role, p, err)
		}
		adv, err := s.advise(ctx, role, obs)
		if err != nil {
			return nil, err
		}
		var idx, skipIdx []int
		var prompts, situations, skipAns []string
		for k, e := range liveIdx {
			trs[e].Nodes++
			if adv[k].Skip {
				skipIdx = append(skipIdx, e)
				skipAns = append(skipAns, adv[k].Answer)
				trs[e].Outcome.used = append(trs[e].Outcome.used, memUse{role, obs[k], adv[k].Answer})
				trs[e].Skipped++
				s.Counts.SkippedActions++
				continue
			}
			idx = append(idx, e)
			prompts = append(prompts, obs[k]+adv[k].Hint)
			situations = append(situations, obs[k])
			if adv[k].Hint != "" {
				s.Counts.HintedActions++
			}
		}
		s.Counts.Actions += len(liveIdx)
		if len(skipIdx) > 0 {
			res, err := b.Step(ctx, pick(skipIdx), role, skipAns)
			if err != nil {
				return nil, fmt.Errorf("%w: memory answers for %s at position %d: %v", ErrEnv, role, p, err)
			}
			for k, e := range skipIdx {
				trs[e].Outcome.add(res[k].Step)
				states[e] = res[k].State
			}
		}
		if len(idx) == 0 {
			continue
		}
		out, err := pol.Sample(ctx, prompts, cfg.G, rl.DeriveSeed(cfg.Seed, step, int64(p), 0))
		if err != nil {
			return nil, fmt.Errorf("%w: %s sampling nodes at position %d: %v", ErrPolicy, name, p, err)
		}
		if len(out) != len(prompts) {
			return nil, fmt.Errorf("%w: %s returned %d candidate lists for %d prompts", ErrPolicy, name, len(out), len(prompts))
		}
		s.Counts.NodeSamples += cfg.G * len(idx)
		groups := make([]*Group, len(idx))
		actions := make([][]string, len(idx))
		for k, e := range idx {
			if len(out[k]) != cfg.G {
				return nil, fmt.Errorf("%w: %s returned %d alternatives, want G = %d", ErrPolicy, name, len(out[k]), cfg.G)
			}
			groups[k] = &Group{Env: e, Node: trs[e].Nodes - 1, Role: role, Policy: name, Turn: states[e].Turn, Situation: situations[k], Prompt: prompts[k]}
			actions[k] = make([]string, cfg.G)
			for j, c := range out[k] {
				actions[k][j] = c.Text
			}
		}
		kids, res, err := b.Branch(ctx, pick(idx), role, actions)
		if err != nil {
			return nil, fmt.Errorf("%w: branch %s's alternatives at position %d: %v", ErrEnv, role, p, err)
		}
		branches := make([]envs.Ref, 0, len(idx)*cfg.G)
		bstates := make([]envs.State, 0, len(idx)*cfg.G)
		outs := make([]Outcome, 0, len(idx)*cfg.G)
		for k, e := range idx {
			for j := range kids[k] {
				o := trs[e].Outcome
				o.used = slices.Clip(o.used) // appends must not share the backbone's array
				o.add(res[k][j].Step)
				branches = append(branches, kids[k][j])
				bstates = append(bstates, res[k][j].State)
				outs = append(outs, o)
			}
		}
		if err := s.playout(ctx, b, roles, branches, bstates, outs, (ri+1)%len(roles), rl.DeriveSeed(cfg.Seed, step, int64(p), 1)); err != nil {
			return nil, err
		}
		if err := b.Drop(ctx, branches); err != nil {
			return nil, fmt.Errorf("%w: drop branches: %v", ErrEnv, err)
		}
		// The backbone continues with alternative 0, an on-policy sample.
		first := make([]string, len(idx))
		for k := range idx {
			first[k] = out[k][0].Text
		}
		back, err := b.Step(ctx, pick(idx), role, first)
		if err != nil {
			return nil, fmt.Errorf("%w: step backbones for %s at position %d: %v", ErrEnv, role, p, err)
		}
		for k, e := range idx {
			g := groups[k]
			totals := make([]float64, cfg.G)
			for j, c := range out[k] {
				bi := k*cfg.G + j
				outs[bi].Success = bstates[bi].Success
				r := cfg.Reward.Of(outs[bi])
				g.Alts = append(g.Alts, Alternative{Completion: c, Outcome: outs[bi], Reward: r})
				totals[j] = r.Total()
			}
			_, std := grpo.MeanStd(totals)
			g.Variance = std * std
			trs[e].Groups = append(trs[e].Groups, g)
			trs[e].Outcome.add(back[k].Step)
			states[e] = back[k].State
		}
		if err := s.evolveOnline(ctx, roles, groups); err != nil {
			return nil, err
		}
	}
	for e, tr := range trs {
		tr.Outcome.Success = states[e].Success
		tr.Reward = cfg.Reward.Of(tr.Outcome)
	}
	return trs, nil
}

// playout completes every branch to the end with one sample per node from
// the acting agent's policy (or its memory), all branches batched per node.
// Branches stay aligned: each starts at role index ri and every Step
// consumes one turn slot.
func (s *NodeSampler) playout(ctx context.Context, b envs.Batch, roles []string, branches []envs.Ref, states []envs.State, outs []Outcome, ri int, seed int64) error {
	active := func(st envs.State) bool { return !st.Done && st.Turn < s.Config.MaxTurns }
	pick := func(idx []int) []envs.Ref {
		out := make([]envs.Ref, len(idx))
		for k, j := range idx {
			out[k] = branches[j]
		}
		return out
	}
	for pos := 0; ; pos++ {
		role := roles[ri]
		var act []int
		for j, st := range states {
			if active(st) && st.Acts(role) {
				act = append(act, j)
			}
		}
		if len(act) > 0 {
			obs, err := b.Observe(ctx, pick(act), role)
			if err != nil {
				return fmt.Errorf("%w: observe branches for %s: %v", ErrEnv, role, err)
			}
			adv, err := s.advise(ctx, role, obs)
			if err != nil {
				return err
			}
			var idx, skipIdx []int
			var prompts, skipAns []string
			for k, j := range act {
				if adv[k].Skip {
					skipIdx = append(skipIdx, j)
					skipAns = append(skipAns, adv[k].Answer)
					outs[j].used = append(outs[j].used, memUse{role, obs[k], adv[k].Answer})
					s.Counts.SkippedActions++
					continue
				}
				idx = append(idx, j)
				prompts = append(prompts, obs[k]+adv[k].Hint)
				if adv[k].Hint != "" {
					s.Counts.HintedActions++
				}
			}
			s.Counts.Actions += len(act)
			if len(skipIdx) > 0 {
				res, err := b.Step(ctx, pick(skipIdx), role, skipAns)
				if err != nil {
					return fmt.Errorf("%w: memory answers on branches for %s: %v", ErrEnv, role, err)
				}
				for k, j := range skipIdx {
					outs[j].add(res[k].Step)
					states[j] = res[k].State
				}
			}
			if len(idx) > 0 {
				name, pol, err := s.Policies.For(role)
				if err != nil {
					return err
				}
				out, err := pol.Sample(ctx, prompts, 1, rl.DeriveSeed(seed, int64(pos)))
				if err != nil {
					return fmt.Errorf("%w: %s completing branches: %v", ErrPolicy, name, err)
				}
				if len(out) != len(prompts) {
					return fmt.Errorf("%w: %s returned %d completions for %d prompts", ErrPolicy, name, len(out), len(prompts))
				}
				acts := make([]string, len(idx))
				for k := range idx {
					if len(out[k]) < 1 {
						return fmt.Errorf("%w: %s returned no completion", ErrPolicy, name)
					}
					acts[k] = out[k][0].Text
				}
				res, err := b.Step(ctx, pick(idx), role, acts)
				if err != nil {
					return fmt.Errorf("%w: step branches for %s: %v", ErrEnv, role, err)
				}
				for k, j := range idx {
					outs[j].add(res[k].Step)
					states[j] = res[k].State
				}
				s.Counts.CompletionSamples += len(idx)
			}
		}
		if !slices.ContainsFunc(states, active) {
			return nil
		}
		if pos > (s.Config.MaxTurns+1)*len(roles) {
			return fmt.Errorf("%w: branches did not finish %d rounds in %d steps", ErrEnv, s.Config.MaxTurns, pos)
		}
		ri = (ri + 1) % len(roles)
	}
}

// Assign sets every alternative's advantage: GRPO inside each group, or
// with drMAS Dr. MAS's agent-wise normalisation keyed by (prompt uid,
// agent), i.e. (backbone Env, Role): every alternative of an agent's nodes on
// one backbone shares that pool's mean and std (verl's
// compute_grpo_outcome_advantage with group_by_agent_id, as Dr. MAS runs
// it).
func Assign(groups []*Group, mode grpo.AdvantageMode, drMAS bool) {
	var rewards []float64
	var keys []string
	for gi, g := range groups {
		key := strconv.Itoa(gi)
		if drMAS {
			key = g.UID() + "\x00" + g.Role
		}
		for _, a := range g.Alts {
			rewards = append(rewards, a.Reward.Total())
			keys = append(keys, key)
		}
	}
	adv, _ := grpo.KeyedAdvantages(rewards, keys, mode) // same lengths by construction
	i := 0
	for _, g := range groups {
		for j := range g.Alts {
			g.Alts[j].Advantage = adv[i]
			i++
		}
	}
}

func totals(g *Group) []float64 {
	out := make([]float64, len(g.Alts))
	for j, a := range g.Alts {
		out[j] = a.Reward.Total()
	}
	return out
}

// SelectTopK returns the k groups with the largest reward variance (all
// when k = 0 or k ≥ len), ordered by variance descending with ties kept in
// input order, and the sorted names of the agents (roles) that own them.
func SelectTopK(groups []*Group, k int) ([]*Group, []string) {
	sel := slices.Clone(groups)
	sort.SliceStable(sel, func(i, j int) bool { return sel[i].Variance > sel[j].Variance })
	if k > 0 && k < len(sel) {
		sel = sel[:k]
	}
	seen := map[string]bool{}
	var agents []string
	for _, g := range sel {
		if !seen[g.Role] {
			seen[g.Role] = true
			agents = append(agents, g.Role)
		}
	}
	sort.Strings(agents)
	return sel, agents
}

// SelectTopFrac is marginal-benefit selection per agent: of each agent's
// (role's) n groups it keeps the ceil(frac × n) with the largest reward
// variance (ties in input order), agents in sorted order, and returns them
// with the sorted names of the agents that own them. frac ≥ 1 keeps all.
func SelectTopFrac(groups []*Group, frac float64) ([]*Group, []string) {
	byRole := map[string][]*Group{}
	for _, g := range groups {
		byRole[g.Role] = append(byRole[g.Role], g)
	}
	var sel []*Group
	agents := slices.Sorted(maps.Keys(byRole))
	for _, role := range agents {
		gs := slices.Clone(byRole[role])
		sort.SliceStable(gs, func(i, j int) bool { return gs[i].Variance > gs[j].Variance })
		k := int(math.Ceil(frac * float64(len(gs))))
		sel = append(sel, gs[:min(k, len(gs))]...)
	}
	return sel, agents
}

// Buffers turns selected groups into per-policy sample buffers.
func Buffers(groups []*Group) map[string][]rl.Sample {
	out := map[string][]rl.Sample{}
	for _, g := range groups {
		for _, a := range g.Alts {
			out[g.Policy] = append(out[g.Policy], rl.Sample{
				Prompt: g.Prompt, Completion: a.Completion, Group: g.Key(), UID: g.UID(), Role: g.Role,
				Reward: a.Reward.Total(), Advantage: a.Advantage,
			})
		}
	}
	return out
}

// Trainer runs JoyAgents-R1 training steps.
type Trainer struct {
	Config   Config
	Policies *rl.Policies
	// NewEnv makes the step's environments in this process; unused when
	// Envs is set.
	NewEnv func(instance int, seed int64) (envs.Env, error)
	// Envs, if set, holds the step's environments instead (e.g. an
	// envs.Pool of environment host actors): each step Resets it with the
	// seeds NewEnv would be given, so a pool of the same environment gives
	// the same run.
	Envs envs.Batch
	// Refs optionally maps a policy name to a frozen reference policy (KL).
	Refs map[string]rl.Scorer
	// Memories by role, in this process; created on first use when
	// Config.UseMemory and Memory is nil.
	Memories map[string]*Memory
	// Memory, if set, is the agents' memory (e.g. a MemoryClient of a
	// memory actor) instead of Memories.
	Memory MemoryBank
	// Update, if set, runs the update step (e.g. agent.JoyGraph: the
	// selected agents' policy actors and the memory actor as one compiled
	// actor graph); it must evolve the same memory as Memory. Nil trains
	// Policies with rl.UpdateAll, then evolves the memory.
	Update Updater

	step int64
}

// StepStats reports one training step.
type StepStats struct {
	Step        int64
	Nodes       int      // Σ L over backbones
	Groups      int      // groups formed (nodes not answered from memory)
	Selected    int      // groups kept by top-K
	Agents      []string // agents updated this step
	Counts      Counts
	Reward      float64 // mean backbone total reward R
	Accuracy    float64 // mean backbone accuracy
	SuccessRate float64 // of the backbones
	BranchMean  float64 // mean total reward over all alternatives
	Memory      GroupUpdate
	MemorySize  map[string]int
	Adv         grpo.AdvStats // over the selected samples
	Updates     map[string]rl.UpdateStats
}

// MemoryBank returns the agents' memory (nil without memory), e.g. for
// evaluation with WithMemory.
func (t *Trainer) MemoryBank() MemoryBank { return t.bank() }

// Steps is the number of training steps taken (the memory's clock).
func (t *Trainer) Steps() int64 { return t.step }

// bank returns the memory the step uses (nil without memory).
func (t *Trainer) bank() MemoryBank {
	if !t.Config.UseMemory {
		return nil
	}
	if t.Memory != nil {
		return t.Memory
	}
	if t.Memories == nil {
		t.Memories = map[string]*Memory{}
	}
	return &LocalBank{Config: t.Config.Memory, Memories: t.Memories}
}

// episodes makes the step's environments.
func (t *Trainer) episodes(ctx context.Context, step int64) (envs.Batch, envs.Episodes, error) {
	cfg := t.Config
	seeds := make([]int64, cfg.Envs)
	for e := range seeds {
		seeds[e] = rl.DeriveSeed(cfg.Seed, step, int64(e), 2)
	}
	if t.Envs != nil {
		ep, err := t.Envs.Reset(ctx, seeds)
		if err != nil {
			return nil, ep, fmt.Errorf("%w: reset environments: %v", ErrEnv, err)
		}
		return t.Envs, ep, nil
	}
	if t.NewEnv == nil {
		return nil, envs.Episodes{}, fmt.Errorf("%w: trainer has no environment factory", ErrConfig)
	}
	es := make([]envs.Env, cfg.Envs)
	for e := range es {
		env, err := t.NewEnv(e, seeds[e])
		if err != nil {
			return nil, envs.Episodes{}, fmt.Errorf("make env %d: %w", e, err)
		}
		es[e] = env
	}
	b, ep, err := envs.LocalOf(es)
	if err != nil {
		return nil, ep, fmt.Errorf("%w: %v", ErrEnv, err)
	}
	return b, ep, nil
}

// Step runs one training step: Rollout, then Train.
func (t *Trainer) Step(ctx context.Context) (StepStats, error) {
	r, err := t.Rollout(ctx)
	if err != nil {
		return StepStats{Step: t.step, MemorySize: map[string]int{}}, err
	}
	return t.Train(ctx, r)
}

// Rollouts are one step's sampled backbones with their node groups, made by
// Rollout and consumed by Train.
type Rollouts struct {
	step  int64
	roles []string
	bank  MemoryBank
	smp   *NodeSampler
	trs   []*Trajectory
}

// Rollout samples one step: Config.Envs backbones with node-wise sampling
// (and, without MemoryConfig.PerStep, memory evolved online at each node).
func (t *Trainer) Rollout(ctx context.Context) (*Rollouts, error) {
	cfg := t.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if t.Update != nil && cfg.UseMemory && t.Memory == nil {
		return nil, fmt.Errorf("%w: a custom Updater evolves its own memory: set Trainer.Memory to that memory, so sampling consults it", ErrConfig)
	}
	step := t.step
	b, ep, err := t.episodes(ctx, step)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", step, err)
	}
	bank := t.bank()
	smp := &NodeSampler{Config: cfg, Policies: t.Policies, Bank: bank, Now: step}
	trs, err := smp.RolloutsBatch(ctx, b, ep, step)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", step, err)
	}
	return &Rollouts{step: step, roles: ep.Roles, bank: bank, smp: smp, trs: trs}, nil
}

// Train trains on r, the last Rollout: advantages → top-K selection →
// parallel updates of the owning agents and memory evolution on every group.
func (t *Trainer) Train(ctx context.Context, r *Rollouts) (StepStats, error) {
	if r == nil || r.step != t.step {
		return StepStats{Step: t.step}, fmt.Errorf("%w: Train wants the rollouts of step %d", ErrConfig, t.step)
	}
	cfg := t.Config
	step, bank, smp, trs := r.step, r.bank, r.smp, r.trs
	st := StepStats{Step: step, MemorySize: map[string]int{}}
	var err error
	var groups []*Group
	var outcomes []Outcome // backbones and branches, for memory feedback
	var branchSum float64
	var branches int
	for _, tr := range trs {
		st.Nodes += tr.Nodes
		st.Reward += tr.Reward.Total()
		st.Accuracy += tr.Reward.Accuracy
		if tr.Outcome.Success {
			st.SuccessRate++
		}
		groups = append(groups, tr.Groups...)
		outcomes = append(outcomes, tr.Outcome)
		for _, g := range tr.Groups {
			for _, a := range g.Alts {
				branchSum += a.Reward.Total()
				branches++
				outcomes = append(outcomes, a.Outcome)
			}
		}
	}
	n := float64(len(trs))
	st.Reward /= n
	st.Accuracy /= n
	st.SuccessRate /= n
	if branches > 0 {
		st.BranchMean = branchSum / float64(branches)
	}
	st.Groups = len(groups)
	st.Counts = smp.Counts
	Assign(groups, cfg.Advantage, cfg.DrMAS)
	var sel []*Group
	var agents []string
	if cfg.TopFrac > 0 {
		sel, agents = SelectTopFrac(groups, cfg.TopFrac)
	} else {
		sel, agents = SelectTopK(groups, cfg.TopK)
	}
	st.Selected, st.Agents = len(sel), agents
	bufs := Buffers(sel)
	var advs []float64
	names := slices.Sorted(maps.Keys(bufs)) // a fixed order: the summary's sums do not depend on map order
	for _, name := range names {
		for _, s := range bufs[name] {
			advs = append(advs, s.Advantage)
		}
	}
	st.Adv = grpo.SummarizeAdvantages(advs)
	if err := rl.FillRefs(ctx, t.Refs, bufs); err != nil {
		return st, fmt.Errorf("step %d: %w", step, err)
	}
	req := UpdateRequest{Buffers: bufs}
	if bank != nil {
		req.Memory = evolveRequest(cfg, step, r.roles, groups, outcomes)
	}
	var res UpdateResult
	if t.Update != nil {
		res, err = t.Update.Update(ctx, req)
	} else {
		res, err = t.updateLocal(ctx, bank, req)
	}
	st.Updates = res.Updates
	if err != nil {
		return st, fmt.Errorf("step %d: %w", step, err)
	}
	if req.Memory != nil {
		st.Memory = res.Memory.Update
		st.Memory.Inserted += smp.Evolved.Inserted
		st.Memory.Replaced += smp.Evolved.Replaced
		st.Memory.Removed += smp.Evolved.Removed
		for r, n := range res.Memory.Sizes {
			st.MemorySize[r] = n
		}
	}
	t.step++
	return st, nil
}

// updateLocal is the default Updater: the policies' updates in parallel
// (rl.UpdateAll), then the memory evolution.
func (t *Trainer) updateLocal(ctx context.Context, bank MemoryBank, req UpdateRequest) (UpdateResult, error) {
	var res UpdateResult
	var err error
	res.Updates, err = rl.UpdateAll(ctx, t.Policies, req.Buffers)
	if err != nil {
		return res, err
	}
	if req.Memory != nil {
		res.Memory, err = bank.Evolve(ctx, *req.Memory)
		if err != nil {
			return res, fmt.Errorf("memory: %w", err)
		}
	}
	return res, nil
}

// groupRecords are groups as memory sees them: answers with their memory
// rewards (accuracy + format).
func groupRecords(groups []*Group) []GroupRecord {
	out := make([]GroupRecord, 0, len(groups))
	for _, g := range groups {
		rec := GroupRecord{Role: g.Role, Situation: g.Situation, Answers: make([]string, len(g.Alts)), Rewards: make([]float64, len(g.Alts))}
		for j, a := range g.Alts {
			rec.Answers[j], rec.Rewards[j] = a.Completion.Text, a.Reward.Memory()
		}
		out = append(out, rec)
	}
	return out
}

// evolveRequest is a step's memory evolution at the update: with
// MemoryConfig.PerStep every group's answers with their memory rewards
// (otherwise the groups were applied during sampling), then the memory
// reward of every trajectory that used a memory answer, backbones and
// branches in order.
func evolveRequest(cfg Config, step int64, roles []string, groups []*Group, outcomes []Outcome) *EvolveRequest {
	req := &EvolveRequest{Now: step, Roles: slices.Clone(roles)}
	if cfg.Memory.PerStep {
		req.Groups = groupRecords(groups)
	}
	for _, o := range outcomes {
		got := cfg.Reward.Of(o).Memory()
		for _, u := range o.used {
			req.Feedback = append(req.Feedback, FeedbackRecord{Role: u.role, Situation: u.situation, Answer: u.answer, Got: got})
		}
	}
	return req
}
