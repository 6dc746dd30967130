package atgrpo

import (
	"context"
	"fmt"

	"troupe/algorithms/envs"
	"troupe/algorithms/rl"
)

// DAPO's dynamic sampling ("DAPO: An Open-Source LLM Reinforcement Learning
// System at Scale", arXiv 2503.14476) over-samples and drops the groups
// whose rewards are all equal (they have no advantage, so no gradient) until
// the batch is full of groups that do. The "dapo" group filter alone drops
// them and trains on what is left; Resample refills the step.

// Resample tops up one step's rollouts and buffers DAPO-style: while fewer
// of its groups than it first held have reward variance (per policy, by
// Sample.Group, as the filter counts them), it tree-samples (or, with the
// independent sampler, plays) another round of fresh environment instances,
// at most cfg.Envs at a time and cfg.Resample in all, and appends their
// rollouts and samples. Extra instance j (j = 0, 1, ...) is newEnv(cfg.Envs
// + j, DeriveSeed(cfg.Seed, step, cfg.Envs + j, 1)), the seed a step's
// instance of that index gets, and round r samples with seed
// DeriveSeed(cfg.Seed, -2, r): the same seed resamples the same grids with
// the same draws. Group keys and UIDs number the extra instances on from
// cfg.Envs. The zero-variance groups stay in the buffers: cfg's "dapo"
// filter drops them in Prepare. rolls and buffers are not modified.
func Resample(ctx context.Context, cfg Config, pols *Policies, newEnv EnvFactory, step int64, rolls []Rollout, buffers map[string][]rl.Sample) ([]Rollout, map[string][]rl.Sample, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if newEnv == nil {
		return nil, nil, fmt.Errorf("%w: resampling needs an environment factory", ErrConfig)
	}
	out := make(map[string][]rl.Sample, len(buffers))
	for name, b := range buffers {
		out[name] = b[:len(b):len(b)] // appends copy
	}
	rolls = rolls[:len(rolls):len(rolls)]
	target, useful := groupVariance(buffers)
	base := max(cfg.Envs, countInstances(rolls))
	extra := 0
	for round := int64(1); useful < target && extra < cfg.Resample; round++ {
		n := min(cfg.Envs, cfg.Resample-extra)
		es := make([]envs.Env, n)
		for j := range es {
			i := base + extra + j
			e, err := newEnv(i, rl.DeriveSeed(cfg.Seed, step, int64(i), 1))
			if err != nil {
				return nil, nil, fmt.Errorf("resample: make env %d: %w", i, err)
			}
			es[j] = e
		}
		sub := cfg
		sub.Seed, sub.Resample, sub.envBase = rl.DeriveSeed(cfg.Seed, -2, round), 0, base+extra
		r2, b2, err := TreeRollouts(ctx, sub, pols, es, step)
		if err != nil {
			return nil, nil, fmt.Errorf("resample round %d: %w", round, err)
		}
		rolls = append(rolls, r2...)
		for _, name := range sortedNames(b2) {
			out[name] = append(out[name], b2[name]...)
		}
		_, useful = groupVariance(out)
		extra += n
	}
	return rolls, out, nil
}

// groupVariance counts the groups of buffers (per policy, by Sample.Group)
// and those whose rewards are not all equal.
func groupVariance(buffers map[string][]rl.Sample) (groups, useful int) {
	for _, name := range sortedNames(buffers) {
		first := map[string]float64{}
		mixed := map[string]bool{}
		for _, s := range buffers[name] {
			r, seen := first[s.Group]
			if !seen {
				first[s.Group] = s.Reward
				continue
			}
			if r != s.Reward {
				mixed[s.Group] = true
			}
		}
		groups += len(first)
		useful += len(mixed)
	}
	return groups, useful
}

// countInstances is the number of distinct environment instances of rolls
// (the independent sampler has K rollouts per instance).
func countInstances(rolls []Rollout) int {
	seen := map[int]bool{}
	for _, r := range rolls {
		seen[r.Env] = true
	}
	return len(seen)
}
