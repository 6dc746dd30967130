package agent

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"troupe/actors"
	"troupe/algorithms/envs"
	"troupe/algorithms/joyagents"
	"troupe/algorithms/rl"
	"troupe/runtime"
)

func initRT(t *testing.T, opts ...runtime.Option) runtime.Runtime {
	t.Helper()
	rt, err := runtime.Init(context.Background(), append([]runtime.Option{runtime.Address("")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	return rt
}

func spawnTinyTeam(t *testing.T, rt actors.Runtime, roles []string) *Team {
	t.Helper()
	pc := tinyConfig()
	pc.MaxNewTokens = 2
	team, err := SpawnTeam(context.Background(), rt, TeamConfig{Roles: roles, PerRole: true, Policy: pc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { team.Kill(context.Background()) })
	return team
}

var joyEnv = envs.Config{Width: 5, Height: 5, TurnBudget: 2}

func joyConfig() joyagents.Config {
	c := joyagents.DefaultConfig()
	c.G, c.Envs, c.MaxTurns, c.TopK, c.Seed = 6, 3, 2, 3, 5
	return c
}

// TestJoyAgentsActorsMatchInProcess: two identically seeded teams, one
// trained by the in-process JoyAgents-R1 trainer (environments stepped in
// the driver, memories in the driver, rl.UpdateAll), the other by
// SpawnJoyAgents (two environment host actors, the memory actor, the
// compiled update graph), give the same step statistics and weights.
func TestJoyAgentsActorsMatchInProcess(t *testing.T) {
	ctx := context.Background()
	rt := initRT(t)
	roles := []string{"planner", "tool"}
	a, b := spawnTinyTeam(t, rt, roles), spawnTinyTeam(t, rt, roles)
	local := &joyagents.Trainer{Config: joyConfig(), Policies: a.Policies, NewEnv: func(_ int, seed int64) (envs.Env, error) {
		return envs.New("planpath", joyEnv, seed)
	}}
	ja, err := SpawnJoyAgents(ctx, rt, b, JoyConfig{Config: joyConfig(), Env: "planpath", EnvConfig: joyEnv, EnvActors: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ja.Kill(context.Background())
	if ja.Memory == nil || ja.Envs == nil || len(ja.Envs.Hosts) != 2 {
		t.Fatalf("actors %+v", ja)
	}
	for step := 0; step < 2; step++ {
		want, err := local.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ja.Trainer.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d differs:\n got %+v\nwant %+v", step, got, want)
		}
		t.Logf("step %d: %d groups, agents %v, memory %+v sizes %v, skipped %d", step, want.Groups, want.Agents, want.Memory, want.MemorySize, want.Counts.SkippedActions)
		if len(want.Updates) == 0 || want.Groups == 0 {
			t.Fatalf("step %d trained nothing: %+v", step, want)
		}
	}
	wa, _ := a.Weights(ctx)
	wb, _ := b.Weights(ctx)
	for _, n := range a.Names {
		if wa[n].Norm != wb[n].Norm || wa[n].Steps != wb[n].Steps {
			t.Fatalf("%s: weights differ: %+v vs %+v", n, wa[n], wb[n])
		}
	}
	for _, role := range roles {
		es, err := ja.Memory.Entries(ctx, role)
		if err != nil {
			t.Fatal(err)
		}
		if w := local.Memories[role].Entries(); !reflect.DeepEqual(es, w) {
			t.Fatalf("%s memory differs: %+v vs %+v", role, es, w)
		}
	}
}

// TestJoyGraphNodeErrors: a failing policy node or memory node fails the
// run with the node named, and the graph runs again afterwards; only the
// selected agent trains.
func TestJoyGraphNodeErrors(t *testing.T) {
	ctx := context.Background()
	rt := initRT(t)
	team := spawnTinyTeam(t, rt, []string{"planner", "tool"})
	mem, err := joyagents.SpawnMemory(ctx, rt, joyagents.DefaultMemoryConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Kill(context.Background())
	g, err := NewJoyGraph(team, mem)
	if err != nil {
		t.Fatal(err)
	}
	badTok := rl.Sample{Prompt: "x", Completion: rl.Completion{Tokens: []int{9999}, LogProbs: []float32{-1}}}
	_, err = g.Update(ctx, joyagents.UpdateRequest{Buffers: map[string][]rl.Sample{"tool": {badTok}}})
	var ge *actors.GraphError
	if !errors.As(err, &ge) || ge.Node != "update-tool" {
		t.Fatalf("bad token: %v", err)
	}
	bad := &joyagents.EvolveRequest{Groups: []joyagents.GroupRecord{{Role: "tool", Answers: []string{"U", "D"}, Rewards: []float64{1}}}}
	_, err = g.Update(ctx, joyagents.UpdateRequest{Memory: bad})
	if !errors.As(err, &ge) || ge.Node != "memory" || !strings.Contains(err.Error(), "2 answers but 1 rewards") {
		t.Fatalf("bad memory group: %v", err)
	}
	if _, err := g.Update(ctx, joyagents.UpdateRequest{Buffers: map[string][]rl.Sample{"nobody": {badTok}}}); !errors.Is(err, rl.ErrPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
	// Usable again: planner is the only selected agent.
	out, err := team.Clients["planner"].Sample(ctx, []string{"p a00 g11"}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	buf := []rl.Sample{{Prompt: "p a00 g11", Completion: out[0][0], Advantage: 1}, {Prompt: "p a00 g11", Completion: out[0][1], Advantage: -1}}
	ok := &joyagents.EvolveRequest{Now: 1, Roles: []string{"planner", "tool"}, Groups: []joyagents.GroupRecord{
		{Role: "planner", Situation: "s", Answers: []string{"a", "a", "a", "a", "a", "a", "a", "b"}, Rewards: []float64{0, 0, 0, 0, 0, 0, 0, 1}},
	}}
	w0, _ := team.Weights(ctx)
	res, err := g.Update(ctx, joyagents.UpdateRequest{Buffers: map[string][]rl.Sample{"planner": buf}, Memory: ok})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Updates) != 1 || res.Updates["planner"].Samples != 2 || res.Memory.Update.Inserted != 1 || res.Memory.Sizes["planner"] != 1 {
		t.Fatalf("result %+v", res)
	}
	w1, _ := team.Weights(ctx)
	if w1["planner"].Steps != w0["planner"].Steps+1 || w1["tool"].Steps != w0["tool"].Steps {
		t.Fatalf("steps %+v -> %+v", w0, w1)
	}
	noMem, err := NewJoyGraph(team, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noMem.Update(ctx, joyagents.UpdateRequest{Memory: ok}); !errors.Is(err, ErrConfig) {
		t.Fatalf("memory without a memory actor: %v", err)
	}
}

// TestATGRPOEnvActorsMatchInProcess: an AT-GRPO step over two environment
// host actors equals the step with the environments in the driver.
func TestATGRPOEnvActorsMatchInProcess(t *testing.T) {
	ctx := context.Background()
	rt := initRT(t)
	roles := []string{"planner", "tool"}
	a, b := spawnTinyTeam(t, rt, roles), spawnTinyTeam(t, rt, roles)
	ecfg := envs.Config{Width: 5, Height: 5, TurnBudget: 3}
	pool, err := envs.SpawnPool(ctx, rt, 2, envs.HostConfig{Env: "planpath", Config: ecfg})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Kill(context.Background())
	local := &ATGRPO{Config: atgrpoConfig(), Team: a, NewEnv: func(_ int, seed int64) (envs.Env, error) { return envs.New("planpath", ecfg, seed) }}
	remote := &ATGRPO{Config: atgrpoConfig(), Team: b, Envs: pool}
	for step := 0; step < 2; step++ {
		want, err := local.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || want.Samples == 0 {
			t.Fatalf("step %d differs:\n got %+v\nwant %+v", step, got, want)
		}
	}
}

// TestPoliciesOnDifferentGPUs: on an embedded cluster with four simulated
// GPUs, per-role policy actors asking for one GPU each land on different
// GPUs, and per-role spawn options pass through (the tool asks for two).
func TestPoliciesOnDifferentGPUs(t *testing.T) {
	ctx := context.Background()
	rt := initRT(t, runtime.SimulateGPUs("4"))
	pc := tinyConfig()
	team, err := SpawnTeam(ctx, rt, TeamConfig{
		Roles: []string{"planner", "tool"}, PerRole: true, Policy: pc,
		SpawnOptions: []actors.Option{actors.GPUs(1)},
		RoleOptions:  map[string][]actors.Option{"tool": {actors.GPUs(2)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer team.Kill(context.Background())
	pl, err := team.Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, tl := pl["planner"], pl["tool"]
	if len(p.GPUs) != 1 || len(tl.GPUs) != 2 || p.Node == "" {
		t.Fatalf("placements %+v", pl)
	}
	for _, g := range tl.GPUs {
		if g == p.GPUs[0] {
			t.Fatalf("planner and tool share GPU %d: %+v", g, pl)
		}
	}
	st, err := rt.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Nodes[0].Used.GPUs; used != 3 {
		t.Fatalf("cluster reports %g GPUs used, want 3", used)
	}
	if _, err := SpawnTeam(ctx, rt, TeamConfig{Roles: []string{"planner"}, PerRole: true, Policy: pc, RoleOptions: map[string][]actors.Option{"tool": nil}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("options for an unknown policy: %v", err)
	}
}
