package trainer

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"troupe/actors"
	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/rl"
	"troupe/runtime"
)

func asyncOptions(workers, staleness int) Options {
	return Options{Env: "planpath", EnvConfig: envs.Config{Width: 5, Height: 5, TurnBudget: 3}, Algo: "atgrpo", PerRole: true,
		Steps: 4, K: 2, Envs: 4, Seed: 1, Model: ModelOptions{Layers: 1, Width: 16, Heads: 2}, PPO: PPOOptions{MiniBatch: 4},
		Eval: EvalOptions{Episodes: 1}, Async: AsyncOptions{RolloutWorkers: workers, MaxStaleness: staleness}}
}

func embedded(t *testing.T) actors.Runtime {
	t.Helper()
	rt, err := runtime.Init(context.Background(), runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	return rt
}

// checkStep checks a step record of a run with rollout workers: every
// sample counted once in the staleness distribution, none staler than the
// bound, the weight sync and the learner's timeline reported.
func checkStep(t *testing.T, r StepRecord, bound int) {
	t.Helper()
	n := 0
	for k, c := range r.Staleness {
		s, err := strconv.Atoi(k)
		if err != nil || s < 0 || s > bound {
			t.Errorf("step %d: staleness %q beyond the bound %d", r.Step, k, bound)
		}
		n += c
	}
	if n != r.Samples || n == 0 {
		t.Errorf("step %d: staleness counts %v sum to %d, the step had %d samples", r.Step, r.Staleness, n, r.Samples)
	}
	if r.WeightSync == nil || r.WeightSync.PublishMS <= 0 {
		t.Errorf("step %d: weight sync %+v", r.Step, r.WeightSync)
	}
	for _, k := range []string{"planner/learner", "tool/learner"} {
		p, ok := r.Timeline[k]
		if !ok || p.Train <= 0 || p.Wall <= 0 || p.Rollout != 0 {
			t.Errorf("step %d: timeline %s = %+v, %v (want training and no sampling)", r.Step, k, p, ok)
		}
	}
}

// TestRolloutWorkersLoseOne: a run with two rollout workers per policy
// goes on when one worker's actor is killed between steps: its chunk is
// sampled by the other, every step still trains on all its environments.
func TestRolloutWorkersLoseOne(t *testing.T) {
	ctx := context.Background()
	tr, err := New(ctx, embedded(t), asyncOptions(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	r, err := tr.Step(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkStep(t, r, 0)
	t.Logf("step 1: %.1f ms", 1000*r.StepWall)
	a := tr.algo.(*asyncATGRPO)
	if err := actors.Kill(ctx, a.lanes[0].team.Handles["planner"]); err != nil {
		t.Fatal(err)
	}
	var pulls int
	for s := 2; s <= 4; s++ {
		if r, err = tr.Step(ctx, s); err != nil {
			t.Fatalf("step %d after losing a rollout worker: %v", s, err)
		}
		checkStep(t, r, 0)
		pulls += r.WeightSync.Pulls
		t.Logf("step %d after the kill: %.1f ms", s, 1000*r.StepWall) // the stall, with -v
	}
	a.mu.Lock()
	dead, alive := a.lanes[0].dead, a.alive
	a.mu.Unlock()
	if !dead || alive != 1 {
		t.Fatalf("after the kill: lane 0 dead %v, %d alive; want true, 1", dead, alive)
	}
	if pulls == 0 {
		t.Fatal("the surviving worker never pulled a new version")
	}
	if _, ok := r.Timeline["planner/rollout1"]; !ok {
		t.Errorf("no timeline of the surviving worker: %v", r.Timeline)
	}
}

// TestRolloutWorkersAllLost: with every worker gone the learner's next
// step fails with ErrRolloutWorkers instead of waiting for ever.
func TestRolloutWorkersAllLost(t *testing.T) {
	ctx := context.Background()
	tr, err := New(ctx, embedded(t), asyncOptions(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	if _, err := tr.Step(ctx, 1); err != nil {
		t.Fatal(err)
	}
	a := tr.algo.(*asyncATGRPO)
	for _, l := range a.lanes {
		_ = actors.Kill(ctx, l.team.Handles["tool"])
	}
	// Step 2's chunks may already have been sampled; step 3's cannot be.
	for s := 2; s <= 3; s++ {
		if _, err = tr.Step(ctx, s); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrRolloutWorkers) {
		t.Fatalf("err %v, want ErrRolloutWorkers", err)
	}
}

// TestRolloutWorkersStaleness: with K = 2 no sample is staler than 2, and
// the run trains through.
func TestRolloutWorkersStaleness(t *testing.T) {
	ctx := context.Background()
	o := asyncOptions(2, 2)
	o.Steps = 5
	tr, err := New(ctx, embedded(t), o)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	for s := 1; s <= o.Steps; s++ {
		r, err := tr.Step(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		checkStep(t, r, 2)
	}
}

func TestAsyncOptionsErrors(t *testing.T) {
	ctx := context.Background()
	rt := embedded(t)
	for _, tc := range []struct {
		name string
		edit func(*Options)
	}{
		{"negative workers", func(o *Options) { o.Async.RolloutWorkers = -1 }},
		{"negative staleness", func(o *Options) { o.Async.MaxStaleness = -1 }},
		{"staleness without workers", func(o *Options) { o.Async = AsyncOptions{MaxStaleness: 1} }},
		{"cap below 1", func(o *Options) { o.Async.ISCap = 0.5 }},
		{"joyagents", func(o *Options) { o.Algo = "joyagents" }},
	} {
		o := asyncOptions(2, 1)
		tc.edit(&o)
		if tr, err := New(ctx, rt, o); !errors.Is(err, ErrAlgorithm) {
			if tr != nil {
				tr.Close(ctx)
			}
			t.Errorf("%s: err %v, want ErrAlgorithm", tc.name, err)
		}
	}
	o := asyncOptions(2, 1)
	o.Algo = "joyagents"
	if _, err := New(ctx, rt, o); !errors.Is(err, ErrJoyAsync) {
		t.Errorf("joyagents with rollout workers: %v, want ErrJoyAsync (the reason)", err)
	}
}

// TestRenumber: a chunk's environments 0.. become lo.., with their groups
// and Dr. MAS uids, and its samples carry the version.
func TestRenumber(t *testing.T) {
	k := atgrpo.GroupKey{Env: 1, Role: "tool", Turn: 2}
	rolls := []atgrpo.Rollout{{Env: 0}, {Env: 1, Nodes: []atgrpo.Node{{Key: k}}}}
	buffers := map[string][]rl.Sample{"tool": {{Group: k.String(), UID: "env1"}}}
	renumber(rolls, buffers, 6, 3)
	s := buffers["tool"][0]
	if rolls[0].Env != 6 || rolls[1].Env != 7 || rolls[1].Nodes[0].Key.Env != 7 || s.Group != "env7/tool/t2" || s.UID != "env7" || s.Version != 3 {
		t.Fatalf("renumbered %+v, sample %+v", rolls, s)
	}
}

// TestSynchronousTimeline: a synchronous step records every policy actor's
// sampling and training, and no staleness or weight sync.
func TestSynchronousTimeline(t *testing.T) {
	ctx := context.Background()
	tr, err := New(ctx, embedded(t), asyncOptions(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(ctx)
	r, err := tr.Step(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"planner/policy", "tool/policy"} {
		p := r.Timeline[k]
		if p.Rollout <= 0 || p.Train <= 0 || p.Sync != 0 || p.Wall <= 0 || p.Busy() <= 0 || p.Busy() > 1 {
			t.Errorf("timeline %s = %+v", k, p)
		}
	}
	if len(r.Timeline) != 2 || r.Staleness != nil || r.WeightSync != nil {
		t.Fatalf("synchronous step %+v", r)
	}
}
