package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"troupe/actors"
	"troupe/algorithms/envs"
	"troupe/algorithms/joyagents"
	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
	"troupe/algorithms/policy/hftest"
	"troupe/algorithms/rl"
	"troupe/runtime"
)

func loraConfig() Config {
	cfg := tinyConfig()
	cfg.KVHeads = 1
	cfg.LoRA = policy.LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}
	return cfg
}

// A LoRA policy learns through its adapter alone, saves the adapter in
// PEFT's layout, and a policy built with that adapter as its checkpoint
// answers the same.
func TestLoRAPolicy(t *testing.T) {
	ctx := context.Background()
	cfg := loraConfig()
	cfg.Adapters = []string{"planner", "tool"}
	p := newTiny(t, cfg)
	m := p.Model().(*policy.Llama)
	// A from-scratch base (weights of std 0.02, tied embeddings) has logits
	// too flat for a frozen head to express any answer; scale it up, as a
	// trained base would be.
	base0, _ := m.Weights()
	for i := range base0 {
		base0[i] *= 50
	}
	if err := m.SetWeights(base0); err != nil {
		t.Fatal(err)
	}
	tool0, _ := m.Adapter("tool").Weights()
	learnsAnswer(t, p, "p a01 g22", "R") // the first adapter, planner
	if base1, _ := m.Weights(); !slices.Equal(base0, base1) {
		t.Fatal("SFT through the adapter changed the base")
	}
	if tool1, _ := m.Adapter("tool").Weights(); !slices.Equal(tool0, tool1) {
		t.Fatal("SFT of planner changed tool's adapter")
	}
	// the tool adapter does not know the answer the planner learned
	out, err := p.Sample(ctx, SampleRequest{Prompts: []string{"p a01 g22"}, K: 1, Seed: 1, Temperature: 1e-6, Adapter: "tool"})
	if err != nil {
		t.Fatal(err)
	}
	if out[0][0].Text == "R" {
		t.Log("the untrained adapter happens to answer R as well")
	}
	if _, err := p.Sample(ctx, SampleRequest{Prompts: []string{"x"}, K: 1, Adapter: "nobody"}); !errors.Is(err, ErrInput) {
		t.Fatalf("unknown adapter: %v", err)
	}
	ws, err := p.AdapterWeights(ctx, "planner")
	if err != nil || ws.Steps == 0 || ws.Params != m.Adapter("planner").NumParams() {
		t.Fatalf("planner weights %+v, %v", ws, err)
	}
	dir := filepath.Join(t.TempDir(), "planner")
	if _, err := p.Save(ctx, SaveRequest{Path: dir, Adapter: "planner"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{policy.AdapterConfigFile, policy.AdapterWeightsFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("saved adapter lacks %s: %v", f, err)
		}
	}
	want, _ := m.Adapter("planner").Weights()
	q := loraConfig()
	q.Name, q.Checkpoint = "planner", dir
	r := newTiny(t, q)
	if got, _ := r.Model().(*policy.Llama).Adapter("planner").Weights(); !slices.Equal(got, want) {
		t.Fatal("a policy built on the saved adapter has other adapter weights")
	}
	// Load replaces the adapter's weights in place
	q.Checkpoint = ""
	s := newTiny(t, q)
	if _, err := s.Load(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Model().(*policy.Llama).Adapter("planner").Weights(); !slices.Equal(got, want) {
		t.Fatal("Load gave other adapter weights")
	}
	q.LoRA.Rank = 2
	if _, err := newTiny(t, q).Load(ctx, dir); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("loading a rank-4 adapter into a rank-2 one: %v", err)
	}
	// configuration errors
	bad := tinyConfig()
	bad.BaseBF16 = true
	if _, err := NewPolicy(ctx, bad); !errors.Is(err, ErrConfig) {
		t.Fatalf("BaseBF16 without LoRA: %v", err)
	}
}

// TestLoRATeamSharedBaseMatchesActorPerRole: AT-GRPO with one actor
// holding one adapter per role gives exactly what one actor per role gives
// (SFT, rollouts, updates, adapter weights), on a BF16 base.
func TestLoRATeamSharedBaseMatchesActorPerRole(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	env, _ := envs.New("planpath-5x5", envs.Config{}, 1)
	pc := loraConfig()
	pc.MaxNewTokens, pc.BaseBF16 = 2, true
	ex, _, err := envs.Transcripts("planpath-5x5", envs.Config{}, []int64{1, 2}, envs.TranscriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		sft   map[string]SFTStats
		steps []any
		w     map[string]WeightStats
	}
	do := func(shared bool) run {
		team, err := SpawnTeam(ctx, rt, TeamConfig{Roles: env.Roles(), PerRole: true, SharedBase: shared, Policy: pc})
		if err != nil {
			t.Fatal(err)
		}
		defer team.Kill(context.Background())
		var r run
		if r.sft, err = team.SFT(ctx, ex, SFTRequest{Epochs: 1, BatchSize: 8, LR: 1e-3}); err != nil {
			t.Fatal(err)
		}
		tr := &ATGRPO{Config: atgrpoConfig(), Team: team, NewEnv: func(i int, seed int64) (envs.Env, error) {
			return envs.New("planpath-5x5", envs.Config{TurnBudget: 3}, seed)
		}}
		for range 2 {
			st, err := tr.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Updates) != 2 {
				t.Fatalf("shared=%v: updates %+v", shared, st.Updates)
			}
			r.steps = append(r.steps, st)
		}
		if r.w, err = team.Weights(ctx); err != nil {
			t.Fatal(err)
		}
		for n, w := range r.w {
			w.Backend, w.GenTokens, w.TrainTok = "", 0, 0 // per actor, not per role
			r.w[n] = w
		}
		return r
	}
	perRole, shared := do(false), do(true)
	if !reflect.DeepEqual(perRole.sft, shared.sft) {
		t.Fatalf("SFT: actor per role %+v, shared base %+v", perRole.sft, shared.sft)
	}
	for i := range perRole.steps {
		if !reflect.DeepEqual(perRole.steps[i], shared.steps[i]) {
			t.Fatalf("step %d: actor per role %+v\nshared base %+v", i, perRole.steps[i], shared.steps[i])
		}
	}
	if !reflect.DeepEqual(perRole.w, shared.w) || perRole.w["tool"].Steps != 3 {
		t.Fatalf("adapters: actor per role %+v, shared base %+v", perRole.w, shared.w)
	}
	if _, err := SpawnTeam(ctx, rt, TeamConfig{Roles: env.Roles(), SharedBase: true, Policy: pc}); !errors.Is(err, ErrConfig) {
		t.Fatalf("SharedBase without PerRole: %v", err)
	}
}

// TestLoRAJoyAgentsSharedBaseMatchesActorPerAgent: JoyAgents-R1 (node-wise
// sampling, top-K selection, the memory actor, the update graph) over one
// actor holding one adapter per agent gives exactly what one actor per agent
// gives: step statistics, adapter weights and memories. Sampling every
// agent through one adapter does not, so the routing is what is checked.
func TestLoRAJoyAgentsSharedBaseMatchesActorPerAgent(t *testing.T) {
	ctx := context.Background()
	rt := initRT(t)
	roles := []string{"planner", "tool"}
	pc := loraConfig()
	pc.MaxNewTokens = 2
	type run struct {
		steps []joyagents.StepStats
		w     map[string]WeightStats
		mem   map[string][]joyagents.Entry
	}
	do := func(shared, oneAdapter bool) run {
		team, err := SpawnTeam(ctx, rt, TeamConfig{Roles: roles, PerRole: true, SharedBase: shared, Policy: pc})
		if err != nil {
			t.Fatal(err)
		}
		defer team.Kill(context.Background())
		if oneAdapter { // every agent samples and scores with planner's adapter
			for _, c := range team.Clients {
				c.Adapter = roles[0]
			}
		}
		ja, err := SpawnJoyAgents(ctx, rt, team, JoyConfig{Config: joyConfig(), Env: "planpath", EnvConfig: joyEnv})
		if err != nil {
			t.Fatal(err)
		}
		defer ja.Kill(context.Background())
		var r run
		both := false
		for range 2 {
			st, err := ja.Trainer.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			both = both || len(st.Updates) == len(roles)
			r.steps = append(r.steps, st)
		}
		if !both {
			t.Fatalf("shared=%v: no step trained both agents: %+v", shared, r.steps)
		}
		if r.w, err = team.Weights(ctx); err != nil {
			t.Fatal(err)
		}
		for n, w := range r.w {
			w.Backend, w.GenTokens, w.TrainTok = "", 0, 0 // per actor, not per agent
			r.w[n] = w
		}
		r.mem = map[string][]joyagents.Entry{}
		for _, role := range roles {
			if r.mem[role], err = ja.Memory.Entries(ctx, role); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	perAgent, shared := do(false, false), do(true, false)
	for i := range perAgent.steps {
		if !reflect.DeepEqual(perAgent.steps[i], shared.steps[i]) {
			t.Fatalf("step %d: actor per agent %+v\nshared base %+v", i, perAgent.steps[i], shared.steps[i])
		}
		t.Logf("step %d: agents %v, %d groups", i, shared.steps[i].Agents, shared.steps[i].Groups)
	}
	if !reflect.DeepEqual(perAgent.w, shared.w) {
		t.Fatalf("adapters: actor per agent %+v, shared base %+v", perAgent.w, shared.w)
	}
	if !reflect.DeepEqual(perAgent.mem, shared.mem) {
		t.Fatalf("memories: actor per agent %+v, shared base %+v", perAgent.mem, shared.mem)
	}
	if wrong := do(true, true); reflect.DeepEqual(wrong.steps, shared.steps) || reflect.DeepEqual(wrong.w, shared.w) {
		t.Fatal("sampling every agent through one adapter gave the same run: the routing is not tested")
	}
	// A bad buffer fails the shared actor's node, naming the adapter.
	team, err := SpawnTeam(ctx, rt, TeamConfig{Roles: roles, PerRole: true, SharedBase: true, Policy: pc})
	if err != nil {
		t.Fatal(err)
	}
	defer team.Kill(context.Background())
	g, err := NewJoyGraph(team, nil)
	if err != nil {
		t.Fatal(err)
	}
	badTok := rl.Sample{Prompt: "x", Completion: rl.Completion{Tokens: []int{9999}, LogProbs: []float32{-1}}}
	_, err = g.Update(ctx, joyagents.UpdateRequest{Buffers: map[string][]rl.Sample{"tool": {badTok}}})
	var ge *actors.GraphError
	if !errors.As(err, &ge) || ge.Node != "update-shared" || !strings.Contains(err.Error(), "adapter tool") {
		t.Fatalf("bad token: %v", err)
	}
}

// A pretrained model directory as a BF16 base with a LoRA adapter: loaded
// straight into BF16, trained through the adapter alone.
func TestLoRAPretrainedBF16Base(t *testing.T) {
	dir, err := hftest.Write(filepath.Join(t.TempDir(), "base"), hftest.Options{ModelType: "qwen2"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "tool", ModelDir: dir, MaxNewTokens: 12, Seed: 1, BaseBF16: true, LoRA: loraConfig().LoRA}
	p, err := NewPolicy(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := p.Model().(*policy.Llama)
	if m.BaseDType() != hf.BF16 || !slices.Equal(m.Adapters(), []string{"tool"}) {
		t.Fatalf("base %s, adapters %v", m.BaseDType(), m.Adapters())
	}
	base0, _ := m.Weights()
	st, err := p.SFT(context.Background(), SFTRequest{Examples: []Example{{"go north", "the north"}}, Epochs: 10, BatchSize: 1, LR: 1e-2})
	if err != nil {
		t.Fatal(err)
	}
	// a random base's frozen head limits how far the adapter can go; the
	// loss must still fall, and the base stay as it was
	if !(st.LastLoss < st.FirstLoss*0.95) {
		t.Fatalf("SFT loss %v -> %v", st.FirstLoss, st.LastLoss)
	}
	if base1, _ := m.Weights(); !slices.Equal(base0, base1) {
		t.Fatal("SFT changed the BF16 base")
	}
}

// A full fine-tune in mixed precision (ComputeBF16) learns as the float32
// one does and its model computes in BF16.
func TestComputeBF16Policy(t *testing.T) {
	cfg := tinyConfig()
	cfg.KVHeads, cfg.ComputeBF16 = 1, true
	p := newTiny(t, cfg)
	if dt := p.Model().(*policy.Llama).ComputeDType(); dt != hf.BF16 {
		t.Fatalf("ComputeDType %s, want BF16", dt)
	}
	learnsAnswer(t, p, "p a01 g22", "R")
}
