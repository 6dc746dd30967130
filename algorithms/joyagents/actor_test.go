package joyagents

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
	"troupe/algorithms/rl/toyenv"
	"troupe/runtime"
)

func embedded(t *testing.T) runtime.Runtime {
	t.Helper()
	rt, err := runtime.Init(context.Background(), runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	return rt
}

func tabularTeam(t *testing.T, actions map[string][]string) *rl.Policies {
	t.Helper()
	m := map[string]rl.Policy{}
	for role, acts := range actions {
		p, err := rl.NewTabular(acts, 2, 2, grpo.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		m[role] = p
	}
	return rl.PerRole(m)
}

func relayPolicies(t *testing.T) *rl.Policies {
	return tabularTeam(t, map[string][]string{"planner": toyenv.PlannerActions, "executor": toyenv.ExecutorActions})
}

// runSteps runs n steps and returns their stats.
func runSteps(t *testing.T, tr *Trainer, n int) []StepStats {
	t.Helper()
	var out []StepStats
	for i := 0; i < n; i++ {
		st, err := tr.Step(context.Background())
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		out = append(out, st)
	}
	return out
}

func memoryConfig() Config {
	cfg := DefaultConfig()
	cfg.G, cfg.Envs, cfg.UseMemory, cfg.Seed = 8, 6, true, 3
	return cfg
}

// TestMemoryActorMatchesInProcess: a seeded JoyAgents-R1 run on Relay with
// its memory in a memory actor on the embedded cluster gives exactly the
// run with the memories in the trainer's process (stats of every step,
// memory contents), and the memory did evolve and skip sampling.
func TestMemoryActorMatchesInProcess(t *testing.T) {
	ctx := context.Background()
	rt := embedded(t)
	const steps = 12
	local := &Trainer{Config: memoryConfig(), Policies: relayPolicies(t), NewEnv: relayEnv}
	want := runSteps(t, local, steps)

	mem, err := SpawnMemory(ctx, rt, memoryConfig().Memory)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Kill(context.Background())
	remote := &Trainer{Config: memoryConfig(), Policies: relayPolicies(t), NewEnv: relayEnv, Memory: mem}
	got := runSteps(t, remote, steps)
	if !reflect.DeepEqual(got, want) {
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("step %d differs:\n got %+v\nwant %+v", i, got[i], want[i])
			}
		}
	}
	inserted, skipped := 0, 0
	for _, st := range want {
		inserted += st.Memory.Inserted + st.Memory.Replaced
		skipped += st.Counts.SkippedActions
	}
	if inserted == 0 || skipped == 0 {
		t.Fatalf("memory idle: %d insertions, %d skipped actions", inserted, skipped)
	}
	for _, role := range []string{"planner", "executor"} {
		es, err := mem.Entries(ctx, role)
		if err != nil {
			t.Fatal(err)
		}
		if w := local.Memories[role].Entries(); !reflect.DeepEqual(es, w) {
			t.Fatalf("%s entries differ:\n got %+v\nwant %+v", role, es, w)
		}
	}
	if remote.Memories != nil {
		t.Fatal("trainer kept local memories beside the memory actor")
	}
	// Bad input names the problem and changes nothing.
	_, err = mem.Evolve(ctx, EvolveRequest{Groups: []GroupRecord{{Role: "planner", Answers: []string{"p1"}}}})
	if err == nil || !strings.Contains(err.Error(), "1 answers but 0 rewards") {
		t.Fatalf("malformed group: %v", err)
	}
	if _, err := SpawnMemory(ctx, rt, MemoryConfig{}); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("zero capacity: %v", err)
	}
}

// TestEnvActorsMatchInProcess: the same seeded run on Plan-Path with the
// environments hosted by two environment actors (an envs.Pool) and with
// them stepped in the driver.
func TestEnvActorsMatchInProcess(t *testing.T) {
	ctx := context.Background()
	rt := embedded(t)
	ecfg := envs.Config{Width: 5, Height: 5, TurnBudget: 4}
	acts := map[string][]string{"planner": {"U", "D", "L", "R"}, "tool": {"U", "D", "L", "R", "x"}}
	cfg := DefaultConfig()
	cfg.G, cfg.Envs, cfg.MaxTurns, cfg.TopK, cfg.Seed = 6, 5, 4, 6, 9
	const steps = 3
	local := &Trainer{Config: cfg, Policies: tabularTeam(t, acts), NewEnv: func(_ int, seed int64) (envs.Env, error) {
		return envs.New("planpath", ecfg, seed)
	}}
	want := runSteps(t, local, steps)
	pool, err := envs.SpawnPool(ctx, rt, 2, envs.HostConfig{Env: "planpath", Config: ecfg})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Kill(context.Background())
	remote := &Trainer{Config: cfg, Policies: tabularTeam(t, acts), Envs: pool}
	got := runSteps(t, remote, steps)
	if !reflect.DeepEqual(got, want) {
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("step %d differs:\n got %+v\nwant %+v", i, got[i], want[i])
			}
		}
	}
	if want[0].Groups == 0 || want[0].Counts.CompletionSamples == 0 {
		t.Fatalf("nothing sampled: %+v", want[0])
	}
}

type nopUpdater struct{}

func (nopUpdater) Update(context.Context, UpdateRequest) (UpdateResult, error) {
	return UpdateResult{}, nil
}

// TestUpdaterNeedsItsMemory: a custom Updater with memory on but no
// Trainer.Memory would sample with one memory and evolve another.
func TestUpdaterNeedsItsMemory(t *testing.T) {
	cfg := memoryConfig()
	tr := &Trainer{Config: cfg, Policies: relayPolicies(t), NewEnv: relayEnv, Update: nopUpdater{}}
	if _, err := tr.Step(context.Background()); !errors.Is(err, ErrConfig) {
		t.Fatalf("updater without memory: %v", err)
	}
	tr.Memory = NewLocalBank(cfg.Memory)
	if _, err := tr.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	tr.Envs, tr.NewEnv = nil, nil
	if _, err := tr.Step(context.Background()); !errors.Is(err, ErrConfig) {
		t.Fatalf("no environments: %v", err)
	}
}
