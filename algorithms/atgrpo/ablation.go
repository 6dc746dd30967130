package atgrpo

import (
	"context"
	"fmt"
	"strconv"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
)

// This file holds the paper's own ablations of AT-GRPO: other group keys
// than (env, role, turn), and independent (non-tree) sampling with the
// same number of samples. They exist to test the claim that agent- and
// turn-wise grouping with tree sampling is what helps; the defaults are
// AT-GRPO's.

// Grouping is the key GRPO advantages are computed within.
type Grouping int

const (
	// AgentTurn is AT-GRPO's key (env, role, turn): the K candidates of
	// one node (default).
	AgentTurn Grouping = iota
	// AgentOnly is (env, role): every sample of one agent in one
	// environment instance, all turns pooled.
	AgentOnly
	// TurnOnly is (env, turn): every agent's samples of one turn pooled.
	TurnOnly
	// Trajectory is trajectory-level GRPO: the K independent episodes of
	// one environment instance form the group, each episode's return (Σ
	// α·team + local over all its actions) is its reward, and every action
	// of an episode gets that episode's advantage. It needs Independent
	// sampling (a tree has one trajectory per instance).
	Trajectory
)

// ParseGrouping reads a grouping by name: "" or "agent-turn", "agent",
// "turn", "trajectory".
func ParseGrouping(s string) (Grouping, error) {
	switch s {
	case "", "agent-turn":
		return AgentTurn, nil
	case "agent":
		return AgentOnly, nil
	case "turn":
		return TurnOnly, nil
	case "trajectory":
		return Trajectory, nil
	}
	return 0, fmt.Errorf("%w: unknown grouping %q (agent-turn, agent, turn, trajectory)", ErrConfig, s)
}

// String names the grouping as ParseGrouping reads it.
func (g Grouping) String() string {
	switch g {
	case AgentTurn:
		return "agent-turn"
	case AgentOnly:
		return "agent"
	case TurnOnly:
		return "turn"
	case Trajectory:
		return "trajectory"
	}
	return "unknown"
}

// Sampling is how a step's samples are drawn.
type Sampling int

const (
	// Tree is AT-GRPO's tree sampling: K candidates at every node, the
	// episode continuing from the best (default).
	Tree Sampling = iota
	// Independent runs K independent episodes of each environment
	// instance (copies of the same initial state), one sampled action per
	// turn: about the same number of samples as the tree (K per node along
	// one path), but the k-th samples of a (env, role, turn) group no
	// longer share an observation after the first turn.
	Independent
)

// ParseSampling reads a sampler by name: "" or "tree", "independent".
func ParseSampling(s string) (Sampling, error) {
	switch s {
	case "", "tree":
		return Tree, nil
	case "independent":
		return Independent, nil
	}
	return 0, fmt.Errorf("%w: unknown sampler %q (tree, independent)", ErrConfig, s)
}

// String names the sampler as ParseSampling reads it.
func (s Sampling) String() string {
	if s == Independent {
		return "independent"
	}
	if s == Tree {
		return "tree"
	}
	return "unknown"
}

// groupKey is the key of a node under g: the Sample.Group value.
func (g Grouping) groupKey(k GroupKey) string {
	switch g {
	case AgentOnly:
		return "env" + strconv.Itoa(k.Env) + "/" + k.Role
	case TurnOnly:
		return "env" + strconv.Itoa(k.Env) + "/t" + strconv.Itoa(k.Turn)
	case Trajectory:
		return "env" + strconv.Itoa(k.Env)
	}
	return k.String()
}

// regroup recomputes every candidate's advantage of rolls under cfg's
// grouping (across policies: a turn's group holds every agent's samples)
// and rebuilds the per-policy buffers from rolls, in rollout, node and
// candidate order. Under Trajectory each rollout is one member of its
// instance's group, with its return as the reward.
func regroup(cfg Config, rolls []Rollout) (map[string][]rl.Sample, error) {
	type at struct{ r, n, c int }
	var (
		keys    []string
		rewards []float64
		where   [][]at
	)
	if cfg.Grouping == Trajectory {
		where = make([][]at, len(rolls))
		for r := range rolls {
			ret := 0.0
			for n, node := range rolls[r].Nodes {
				for c := range node.Candidates {
					where[r] = append(where[r], at{r, n, c})
				}
				ret += node.Candidates[node.Chosen].Reward
			}
			keys = append(keys, "env"+strconv.Itoa(rolls[r].Env))
			rewards = append(rewards, ret)
		}
	} else {
		for r := range rolls {
			for n, node := range rolls[r].Nodes {
				for c, cand := range node.Candidates {
					keys = append(keys, cfg.Grouping.groupKey(node.Key))
					rewards = append(rewards, cand.Reward)
					where = append(where, []at{{r, n, c}})
				}
			}
		}
	}
	adv, err := grpo.KeyedAdvantages(rewards, keys, cfg.Advantage)
	if err != nil {
		return nil, err
	}
	for i, ws := range where {
		for _, w := range ws {
			rolls[w.r].Nodes[w.n].Candidates[w.c].Advantage = adv[i]
		}
	}
	buffers := map[string][]rl.Sample{}
	for r, roll := range rolls {
		for _, node := range roll.Nodes {
			for _, c := range node.Candidates {
				reward := c.Reward
				if cfg.Grouping == Trajectory {
					reward = rewards[r]
				}
				buffers[node.Policy] = append(buffers[node.Policy], rl.Sample{
					Prompt: node.Prompt, Completion: c.Completion, Group: cfg.Grouping.groupKey(node.Key),
					UID: uid(roll.Env), Role: node.Key.Role, Reward: reward, Advantage: c.Advantage,
				})
			}
		}
	}
	return buffers, nil
}

// independentRollouts plays cfg.K independent episodes of each of the
// episodes ep (copies in b: episode e's copies are ep.Refs[e·K .. e·K+K-1]),
// one sampled action per turn, with the same Sample calls per (round,
// role) as the tree sampler (one call for every live episode, seeded by
// (Seed, step, round, role)). Each copy is a Rollout whose nodes hold one
// candidate; Rollout.Env is the instance e it copies. Advantages are then
// computed under cfg's grouping (regroup).
func independentRollouts(ctx context.Context, cfg Config, pols *Policies, b envs.Batch, ep envs.Episodes, step int64) ([]Rollout, map[string][]rl.Sample, error) {
	roles := ep.Roles
	refs, states := ep.Refs, append([]envs.State(nil), ep.States...)
	rolls := make([]Rollout, len(refs))
	for i := range rolls {
		rolls[i].Env = cfg.envBase + i/cfg.K
	}
	for round := 0; round < cfg.MaxTurns; round++ {
		active := 0
		for ri, role := range roles {
			name, pol, err := pols.For(role)
			if err != nil {
				return nil, nil, err
			}
			var idx []int
			var live []envs.Ref
			for i, st := range states {
				if st.Acts(role) {
					idx = append(idx, i)
					live = append(live, refs[i])
				}
			}
			if len(idx) == 0 {
				continue // (a Router may give the turn to the next role)
			}
			active += len(idx)
			prompts, err := b.Observe(ctx, live, role)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: observe for role %s round %d: %v", ErrEnv, role, round, err)
			}
			out, err := pol.Sample(ctx, prompts, 1, rl.DeriveSeed(cfg.Seed, step, int64(round), int64(ri)))
			if err != nil {
				return nil, nil, fmt.Errorf("%w: %s sampling for role %s round %d: %w", ErrPolicy, name, role, round, err)
			}
			if len(out) != len(prompts) {
				return nil, nil, fmt.Errorf("%w: %s returned %d candidate lists for %d prompts", ErrPolicy, name, len(out), len(prompts))
			}
			actions := make([]string, len(idx))
			for j := range idx {
				if len(out[j]) != 1 {
					return nil, nil, fmt.Errorf("%w: %s returned %d completions, want 1", ErrPolicy, name, len(out[j]))
				}
				actions[j] = out[j][0].Text
			}
			res, err := b.Step(ctx, live, role, actions)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: step role %s round %d: %v", ErrEnv, role, round, err)
			}
			for j, i := range idx {
				s := res[j].Step
				node := Node{Key: GroupKey{Env: rolls[i].Env, Role: role, Turn: states[i].Turn}, Policy: name, Prompt: prompts[j],
					Candidates: []Candidate{{Completion: out[j][0], Step: s, Reward: cfg.Alpha*s.Team + s.Local}}}
				rolls[i].Nodes = append(rolls[i].Nodes, node)
				rolls[i].TeamReturn += s.Team
				states[i] = res[j].State
			}
		}
		if active == 0 {
			break
		}
	}
	for i, st := range states {
		rolls[i].Success = st.Success
		rolls[i].Turns = st.Turn
	}
	buffers, err := regroup(cfg, rolls)
	if err != nil {
		return nil, nil, err
	}
	return rolls, buffers, nil
}

// independentLocal copies each of es K times and samples the copies
// independently; es are left as they were.
func independentLocal(ctx context.Context, cfg Config, pols *Policies, es []envs.Env, step int64) ([]Rollout, map[string][]rl.Sample, error) {
	copies := make([]envs.Env, 0, len(es)*cfg.K)
	for _, e := range es {
		for range cfg.K {
			copies = append(copies, e.Clone())
		}
	}
	b, ep, err := envs.LocalOf(copies)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrEnv, err)
	}
	return independentRollouts(ctx, cfg, pols, b, ep, step)
}
