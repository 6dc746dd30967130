package agent

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
	"troupe/runtime"
)

func tinyConfig() Config {
	return Config{
		Name:         "shared",
		Model:        policy.Config{Layers: 1, Heads: 2, Width: 16, Context: 64},
		Seed:         3,
		MaxNewTokens: 3,
	}
}

func newTiny(t *testing.T, cfg Config) *Policy {
	t.Helper()
	p, err := NewPolicy(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSampleLogProbsAgree(t *testing.T) {
	ctx := context.Background()
	p := newTiny(t, tinyConfig())
	prompts := []string{"p a01 g22", "t a00 g11"}
	out, err := p.Sample(ctx, SampleRequest{Prompts: prompts, K: 3, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || len(out[0]) != 3 {
		t.Fatalf("shape %d x %d", len(out), len(out[0]))
	}
	again, _ := p.Sample(ctx, SampleRequest{Prompts: prompts, K: 3, Seed: 9})
	var ps []string
	var cs []rl.Completion
	for i := range out {
		for j, c := range out[i] {
			if c.Text != again[i][j].Text {
				t.Fatalf("same seed, different sample %q vs %q", c.Text, again[i][j].Text)
			}
			if len(c.Tokens) == 0 || len(c.Tokens) > 3 || len(c.LogProbs) != len(c.Tokens) {
				t.Fatalf("completion %+v", c)
			}
			ps = append(ps, prompts[i])
			cs = append(cs, c)
		}
	}
	lps, err := p.LogProbs(ctx, LogProbsRequest{Prompts: ps, Completions: cs})
	if err != nil {
		t.Fatal(err)
	}
	for i, lp := range lps {
		for tk := range lp {
			if d := math.Abs(float64(lp[tk] - cs[i].LogProbs[tk])); d > 1e-4 || lp[tk] > 0 {
				t.Fatalf("log-prob %d/%d: %v vs sampled %v", i, tk, lp[tk], cs[i].LogProbs[tk])
			}
		}
	}
	if _, err := p.LogProbs(ctx, LogProbsRequest{Prompts: ps[:1], Completions: cs}); !errors.Is(err, ErrInput) {
		t.Fatalf("mismatched lengths: %v", err)
	}
	bad := []rl.Completion{{Tokens: []int{9999}, LogProbs: []float32{-1}}}
	if _, err := p.LogProbs(ctx, LogProbsRequest{Prompts: ps[:1], Completions: bad}); !errors.Is(err, ErrInput) {
		t.Fatalf("out-of-vocab token: %v", err)
	}
}

// TestUpdateRaisesRewardedAnswer is GRPO on a one-prompt bandit: answer "R"
// earns 1, anything else 0. After a few updates the policy samples "R" more.
func TestUpdateRaisesRewardedAnswer(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig()
	cfg.Optim = policy.DefaultOptim()
	cfg.Optim.LR = 1e-2
	cfg.MaxNewTokens = 2
	p := newTiny(t, cfg)
	// Warm start so that "R" and "L" are plausible one-letter answers.
	if _, err := p.SFT(ctx, SFTRequest{Examples: []Example{{"q", "R"}, {"q", "L"}, {"q", "U"}, {"q", "D"}}, Epochs: 30, BatchSize: 4, LR: 1e-2}); err != nil {
		t.Fatal(err)
	}
	rate := func(seed int64) float64 {
		out, err := p.Sample(ctx, SampleRequest{Prompts: []string{"q"}, K: 64, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range out[0] {
			if c.Text == "R" {
				n++
			}
		}
		return float64(n) / 64
	}
	before := rate(100)
	for step := int64(0); step < 12; step++ {
		out, err := p.Sample(ctx, SampleRequest{Prompts: []string{"q"}, K: 16, Seed: step})
		if err != nil {
			t.Fatal(err)
		}
		var rewards []float64
		for _, c := range out[0] {
			r := 0.0
			if c.Text == "R" {
				r = 1
			}
			rewards = append(rewards, r)
		}
		var mean float64
		for _, r := range rewards {
			mean += r / float64(len(rewards))
		}
		var batch []rl.Sample
		for j, c := range out[0] {
			batch = append(batch, rl.Sample{Prompt: "q", Completion: c, Advantage: rewards[j] - mean, Reward: rewards[j]})
		}
		st, err := p.Update(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if st.Samples != 16 || st.Tokens == 0 {
			t.Fatalf("stats %+v", st)
		}
	}
	after := rate(100)
	if after < before+0.2 {
		t.Fatalf("P(R) %.2f -> %.2f: GRPO did not raise the rewarded answer", before, after)
	}
}

func TestSFTLearnsMapping(t *testing.T) {
	ctx := context.Background()
	p := newTiny(t, tinyConfig())
	ex := []Example{{"t a00 g01", "R"}, {"t a01 g00", "L"}, {"t a00 g10", "D"}, {"t a10 g00", "U"}}
	st, err := p.SFT(ctx, SFTRequest{Examples: ex, Epochs: 300, BatchSize: 4, LR: 1e-2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st.LastLoss > 0.2 || st.FirstLoss < 1 {
		t.Fatalf("sft loss %.3f -> %.3f", st.FirstLoss, st.LastLoss)
	}
	p.cfg.Temperature = 0 // greedy via override below
	out, err := p.Sample(ctx, SampleRequest{Prompts: []string{ex[0].Prompt, ex[3].Prompt}, K: 1, Seed: 1, Temperature: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if out[0][0].Text != "R" || out[1][0].Text != "U" {
		t.Fatalf("greedy answers %q %q", out[0][0].Text, out[1][0].Text)
	}
	if _, err := p.SFT(ctx, SFTRequest{Epochs: 1, BatchSize: 1}); !errors.Is(err, ErrInput) {
		t.Fatalf("empty sft: %v", err)
	}
}

func TestSaveLoad(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := newTiny(t, tinyConfig())
	path, err := a.Save(ctx, SaveRequest{Path: filepath.Join(dir, "a"), Meta: map[string]string{"env": "planpath"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := tinyConfig()
	cfg.Seed = 99
	b := newTiny(t, cfg)
	wa, _ := a.Weights(ctx, struct{}{})
	wb, _ := b.Weights(ctx, struct{}{})
	if wa.Norm == wb.Norm {
		t.Fatal("different seeds gave equal weights")
	}
	wl, err := b.Load(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if wl.Norm != wa.Norm {
		t.Fatalf("norm after load %v, want %v", wl.Norm, wa.Norm)
	}
	cfg.Checkpoint = path
	c := newTiny(t, cfg)
	if wc, _ := c.Weights(ctx, struct{}{}); wc.Norm != wa.Norm || wc.Params != wa.Params || wc.Family != wa.Family || wc.Context != wa.Context {
		t.Fatalf("constructed from checkpoint: %+v", wc)
	}
	other := tinyConfig()
	other.Model.Width = 32
	d := newTiny(t, other)
	if _, err := d.Load(ctx, path); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("shape mismatch: %v", err)
	}
	if _, err := d.Load(ctx, filepath.Join(dir, "missing")); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("missing file: %v", err)
	}
	bad := tinyConfig()
	bad.Checkpoint = filepath.Join(dir, "missing")
	if _, err := NewPolicy(ctx, bad); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("constructor with missing checkpoint: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for name, mut := range map[string]func(*Config){
		"negative epochs": func(c *Config) { c.Epochs = -1 },
		"bad model":       func(c *Config) { c.Model.Heads = 3 },
		"small vocab":     func(c *Config) { c.Model.Vocab = 10 },
		"temperature":     func(c *Config) { c.Temperature = -1 },
	} {
		c := tinyConfig()
		mut(&c)
		if _, err := NewPolicy(ctx, c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// TestTeamOnEmbeddedCluster drives per-role policy actors through the
// clients (rl.Policy), the compiled update graph and one AT-GRPO step.
func TestTeamOnEmbeddedCluster(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	env, _ := envs.New("planpath-5x5", envs.Config{}, 1)
	pc := tinyConfig()
	pc.MaxNewTokens = 2
	team, err := SpawnTeam(ctx, rt, TeamConfig{Roles: env.Roles(), PerRole: true, Policy: pc})
	if err != nil {
		t.Fatal(err)
	}
	defer team.Kill(context.Background())
	if len(team.Names) != 2 || team.Names[0] != "planner" || team.Names[1] != "tool" {
		t.Fatalf("names %v", team.Names)
	}
	ex, _, err := envs.Transcripts("planpath-5x5", envs.Config{}, []int64{1, 2, 3}, envs.TranscriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sft, err := team.SFT(ctx, ex, SFTRequest{Epochs: 1, BatchSize: 8, LR: 1e-3})
	if err != nil || len(sft) != 2 || sft["tool"].Steps == 0 {
		t.Fatalf("sft %+v, %v", sft, err)
	}
	tr := &ATGRPO{Config: atgrpoConfig(), Team: team, NewEnv: func(i int, seed int64) (envs.Env, error) {
		return envs.New("planpath-5x5", envs.Config{TurnBudget: 3}, seed)
	}}
	w0, _ := team.Weights(ctx)
	st, err := tr.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Groups == 0 || st.Samples != st.Groups*2 || len(st.Updates) != 2 {
		t.Fatalf("step stats %+v", st)
	}
	w1, _ := team.Weights(ctx)
	for _, n := range team.Names {
		if w1[n].Steps != w0[n].Steps+1 || w1[n].Norm == w0[n].Norm {
			t.Fatalf("%s: steps %d -> %d, norm %v -> %v", n, w0[n].Steps, w1[n].Steps, w0[n].Norm, w1[n].Norm)
		}
	}
	// A buffer for a policy that does not exist is refused.
	if _, err := team.Update(ctx, map[string][]rl.Sample{"nobody": {{Prompt: "x"}}}); !errors.Is(err, rl.ErrPolicy) {
		t.Fatalf("unknown buffer: %v", err)
	}
	// A failing node names itself and leaves the graph usable.
	badTok := rl.Sample{Prompt: "x", Completion: rl.Completion{Tokens: []int{9999}, LogProbs: []float32{-1}}}
	if _, err := team.Update(ctx, map[string][]rl.Sample{"tool": {badTok}}); err == nil {
		t.Fatal("bad token accepted")
	}
	if _, err := team.Update(ctx, map[string][]rl.Sample{}); err != nil {
		t.Fatalf("graph unusable after a failed run: %v", err)
	}
	paths, err := team.Save(ctx, t.TempDir(), "x-", nil)
	if err != nil || len(paths) != 2 {
		t.Fatalf("save %v %v", paths, err)
	}
	// Shared regime: one actor for both roles.
	shared, err := SpawnTeam(ctx, rt, TeamConfig{Roles: env.Roles(), Policy: pc, Checkpoints: map[string]string{"shared": paths["tool"]}})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Kill(context.Background())
	if name, _, err := shared.Policies.For("planner"); err != nil || name != rl.SharedName {
		t.Fatalf("shared routing %q %v", name, err)
	}
	if _, err := SpawnTeam(ctx, rt, TeamConfig{Roles: env.Roles(), Policy: pc, Checkpoints: map[string]string{"tool": paths["tool"]}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("checkpoint for unknown policy: %v", err)
	}
}

func atgrpoConfig() atgrpo.Config {
	c := atgrpo.DefaultConfig()
	c.K, c.Envs, c.MaxTurns = 2, 2, 3
	return c
}
