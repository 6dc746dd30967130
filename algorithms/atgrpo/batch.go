package atgrpo

import (
	"context"
	"fmt"
	"strconv"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
)

// TreeRolloutsBatch is TreeRollouts on the episodes ep of an envs.Batch,
// e.g. an envs.Pool of environment host actors: per (round, role) one
// Observe call for every live episode, one Sample call, one Branch call
// that clones and steps the K candidates of every episode where the
// episodes live, and one Drop of the branches not taken. It makes the same
// calls to the policies with the same seeds as TreeRollouts and returns the
// same rollouts and buffers for the same environments (TestBatchMatches
// checks this).
func TreeRolloutsBatch(ctx context.Context, cfg Config, pols *Policies, b envs.Batch, ep envs.Episodes, step int64) ([]Rollout, map[string][]rl.Sample, error) {
	if cfg.Sampler == Independent {
		return nil, nil, fmt.Errorf("%w: independent sampling copies local environments (TreeRollouts), not a batch's", ErrConfig)
	}
	rolls, buffers, _, err := treeRollouts(ctx, cfg, pols, b, ep, step)
	return rolls, buffers, err
}

// treeRollouts is the tree sampler behind TreeRollouts and
// TreeRolloutsBatch; it also returns, per episode, the instance of the
// branch it ended in.
func treeRollouts(ctx context.Context, cfg Config, pols *Policies, b envs.Batch, ep envs.Episodes, step int64) ([]Rollout, map[string][]rl.Sample, []envs.Ref, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, nil, err
	}
	roles := ep.Roles
	if len(roles) == 0 || len(ep.Refs) == 0 || len(ep.States) != len(ep.Refs) {
		return nil, nil, nil, fmt.Errorf("%w: %d episodes with %d states and roles %v", ErrEnv, len(ep.Refs), len(ep.States), roles)
	}
	refs := append([]envs.Ref(nil), ep.Refs...)
	states := append([]envs.State(nil), ep.States...)
	pick := func(idx []int) []envs.Ref {
		out := make([]envs.Ref, len(idx))
		for k, e := range idx {
			out[k] = refs[e]
		}
		return out
	}
	rolls := make([]Rollout, len(refs))
	for i := range rolls {
		rolls[i].Env = cfg.envBase + i
	}
	buffers := map[string][]rl.Sample{}
	for round := 0; round < cfg.MaxTurns; round++ {
		active := 0
		for ri, role := range roles {
			name, pol, err := pols.For(role)
			if err != nil {
				return nil, nil, nil, err
			}
			var idx []int
			for e, st := range states {
				if st.Acts(role) {
					idx = append(idx, e)
				}
			}
			if len(idx) == 0 {
				continue // (a Router may give the turn to the next role)
			}
			prompts, err := b.Observe(ctx, pick(idx), role)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%w: observe for role %s round %d: %v", ErrEnv, role, round, err)
			}
			active += len(idx)
			out, err := pol.Sample(ctx, prompts, cfg.K, rl.DeriveSeed(cfg.Seed, step, int64(round), int64(ri)))
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%w: %s sampling for role %s round %d: %w", ErrPolicy, name, role, round, err)
			}
			if len(out) != len(prompts) {
				return nil, nil, nil, fmt.Errorf("%w: %s returned %d candidate lists for %d prompts", ErrPolicy, name, len(out), len(prompts))
			}
			actions := make([][]string, len(idx))
			for j := range idx {
				if len(out[j]) != cfg.K {
					return nil, nil, nil, fmt.Errorf("%w: %s returned %d candidates, want K = %d", ErrPolicy, name, len(out[j]), cfg.K)
				}
				actions[j] = make([]string, cfg.K)
				for c, comp := range out[j] {
					actions[j][c] = comp.Text
				}
			}
			kids, res, err := b.Branch(ctx, pick(idx), role, actions)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("%w: branch role %s round %d: %v", ErrEnv, role, round, err)
			}
			var drop []envs.Ref
			for j, e := range idx {
				node := Node{Key: GroupKey{Env: cfg.envBase + e, Role: role, Turn: states[e].Turn}, Policy: name, Prompt: prompts[j]}
				rewards := make([]float64, cfg.K)
				for c, comp := range out[j] {
					st := res[j][c].Step
					rewards[c] = cfg.Alpha*st.Team + st.Local
					node.Candidates = append(node.Candidates, Candidate{Completion: comp, Step: st, Reward: rewards[c]})
				}
				adv := grpo.Advantages(rewards, cfg.Advantage)
				best := 0
				for c := range node.Candidates {
					node.Candidates[c].Advantage = adv[c]
					if rewards[c] > rewards[best] {
						best = c
					}
					buffers[name] = append(buffers[name], rl.Sample{
						Prompt: node.Prompt, Completion: node.Candidates[c].Completion, Group: node.Key.String(),
						UID: uid(cfg.envBase + e), Role: role, Reward: rewards[c], Advantage: adv[c],
					})
				}
				node.Chosen = best
				drop = append(drop, refs[e])
				for c, k := range kids[j] {
					if c != best {
						drop = append(drop, k)
					}
				}
				refs[e], states[e] = kids[j][best], res[j][best].State
				rolls[e].TeamReturn += node.Candidates[best].Step.Team
				rolls[e].Nodes = append(rolls[e].Nodes, node)
			}
			if err := b.Drop(ctx, drop); err != nil {
				return nil, nil, nil, fmt.Errorf("%w: drop branches: %v", ErrEnv, err)
			}
		}
		if active == 0 {
			break
		}
	}
	for e, st := range states {
		rolls[e].Success = st.Success
		rolls[e].Turns = st.Turn
	}
	if cfg.Grouping != AgentTurn {
		var err error
		if buffers, err = regroup(cfg, rolls); err != nil {
			return nil, nil, nil, err
		}
	}
	return rolls, buffers, refs, nil
}

// uid is the Dr. MAS "prompt uid" of environment instance e of a step: the
// task every sample of that instance's tree belongs to.
func uid(e int) string { return "env" + strconv.Itoa(e) }
