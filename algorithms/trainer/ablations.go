package trainer

import (
	"fmt"

	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
)

// advantageMode reads Options.Advantage: "" or "std" is GRPO's, "mean"
// Dr. GRPO's.
func advantageMode(s string) (grpo.AdvantageMode, error) {
	switch s {
	case "", "std":
		return grpo.StdNormalized, nil
	case "mean":
		return grpo.MeanCentered, nil
	}
	return 0, fmt.Errorf("%w: unknown advantage %q (std, mean)", ErrAlgorithm, s)
}

// atgrpoVariant reads the AT-GRPO ablations of o: the group key, the
// sampler and the advantage mode (defaults: AT-GRPO's).
func atgrpoVariant(o Options) (atgrpo.Grouping, atgrpo.Sampling, grpo.AdvantageMode, error) {
	g, err := atgrpo.ParseGrouping(o.ATGRPO.Grouping)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w: %v", ErrAlgorithm, err)
	}
	s, err := atgrpo.ParseSampling(o.ATGRPO.Sampler)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%w: %v", ErrAlgorithm, err)
	}
	if g == atgrpo.Trajectory && s != atgrpo.Independent {
		return 0, 0, 0, fmt.Errorf("%w: --grouping trajectory needs --sampler independent (a tree has one trajectory per grid)", ErrAlgorithm)
	}
	if s == atgrpo.Independent && (o.EnvActors > 0 || o.Async.RolloutWorkers > 0) {
		return 0, 0, 0, fmt.Errorf("%w: --sampler independent copies environments in the driver: no --env-actors or rollout workers", ErrAlgorithm)
	}
	m, err := advantageMode(o.Advantage)
	if err == nil && o.Async.RolloutWorkers > 0 && (g != atgrpo.AgentTurn || m != grpo.StdNormalized) {
		// The rollout workers' chunked sampler computes AT-GRPO's own
		// advantages.
		err = fmt.Errorf("%w: --grouping and --adv are not implemented with rollout workers", ErrAlgorithm)
	}
	return g, s, m, err
}

// memoryKey reads Options.Joy.MemoryKey: the environment whose situation
// abstraction keys JoyAgents-R1's memory ("" for the raw observation).
func memoryKey(o Options) (string, error) {
	switch o.Joy.MemoryKey {
	case "", "raw":
		return "", nil
	case "situation":
		env, _, err := envs.Resolve(o.Env, o.EnvConfig)
		if err != nil {
			return "", err
		}
		if !envs.HasSituation(env) {
			return "", fmt.Errorf("%w: --memory-key situation: %s has no situation abstraction", ErrAlgorithm, env)
		}
		return env, nil
	}
	return "", fmt.Errorf("%w: unknown memory key %q (raw, situation)", ErrAlgorithm, o.Joy.MemoryKey)
}

// dapoResample reads Options.ATGRPO.Resample with f, the group filter:
// resampling needs the "dapo" filter (set when there is none) and
// environments made in the driver.
func dapoResample(o Options, f rl.GroupFilter) (int, rl.GroupFilter, error) {
	n := o.ATGRPO.Resample
	switch {
	case n == 0:
		return 0, f, nil
	case n < 0:
		return 0, f, fmt.Errorf("%w: --resample %d, want >= 0", ErrAlgorithm, n)
	case f.Method == rl.FilterNone:
		f = rl.GroupFilter{Method: rl.FilterDAPO}
	case f.Method != rl.FilterDAPO:
		return 0, f, fmt.Errorf("%w: --resample refills the groups --filter dapo drops, not --filter %s's", ErrAlgorithm, f.Method)
	}
	if o.EnvActors > 0 || o.Async.RolloutWorkers > 0 {
		return 0, f, fmt.Errorf("%w: --resample makes its grids in the driver: no --env-actors or rollout workers", ErrAlgorithm)
	}
	return n, f, nil
}
