package atgrpo

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
	"troupe/algorithms/rl/toyenv"
)

// table rewards: a2 and a3 tie at α = 1 (team 1 vs ½+½).
var table = map[string]envs.Step{
	"a1": {}, "a2": {Team: 1}, "a3": {Team: 0.5, Local: 0.5},
	"b1": {Local: 1}, "b2": {Team: 2}, "b3": {},
}

func tableEnv(int, int64) (envs.Env, error) {
	return toyenv.NewTable([]string{"a", "b"}, 2, table, "b3"), nil
}

func script() *rl.Scripted {
	return &rl.Scripted{Script: func(p string) []string {
		if strings.HasPrefix(p, "a:") {
			return []string{"a1", "a2", "a3"}
		}
		return []string{"b1", "b2", "b3"}
	}}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestTreeRolloutsHandComputed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.K = 3
	pol := script()
	e, _ := tableEnv(0, 0)
	es := []envs.Env{e}
	rolls, bufs, err := TreeRollouts(context.Background(), cfg, Shared(pol), es, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := rolls[0]
	type want struct {
		key     GroupKey
		prompt  string
		rewards []float64
		chosen  int
	}
	wants := []want{
		{GroupKey{0, "a", 0}, "a:", []float64{0, 1, 1}, 1}, // tie a2/a3 → earlier
		{GroupKey{0, "b", 0}, "b:a2", []float64{1, 2, 0}, 1},
		{GroupKey{0, "a", 1}, "a:a2,b2", []float64{0, 1, 1}, 1},
		{GroupKey{0, "b", 1}, "b:a2,b2,a2", []float64{1, 2, 0}, 1},
	}
	if len(r.Nodes) != len(wants) {
		t.Fatalf("%d nodes, want %d", len(r.Nodes), len(wants))
	}
	s3 := math.Sqrt(1.0/3) + 1e-6
	advA := []float64{-2.0 / 3 / s3, 1.0 / 3 / s3, 1.0 / 3 / s3}
	advB := []float64{0, 1 / (1 + 1e-6), -1 / (1 + 1e-6)}
	for i, w := range wants {
		n := r.Nodes[i]
		if n.Key != w.key || n.Prompt != w.prompt || n.Chosen != w.chosen || n.Policy != SharedName {
			t.Errorf("node %d: key %v prompt %q chosen %d policy %s; want %v %q %d", i, n.Key, n.Prompt, n.Chosen, n.Policy, w.key, w.prompt, w.chosen)
		}
		adv := advA
		if w.key.Role == "b" {
			adv = advB
		}
		for c, cand := range n.Candidates {
			if !near(cand.Reward, w.rewards[c]) || !near(cand.Advantage, adv[c]) {
				t.Errorf("node %d cand %d: reward %v adv %v want %v %v", i, c, cand.Reward, cand.Advantage, w.rewards[c], adv[c])
			}
		}
	}
	if !near(r.TeamReturn, 6) || r.Success || r.Turns != 2 || !es[0].Done() {
		t.Errorf("rollout: return %v success %v turns %d", r.TeamReturn, r.Success, r.Turns)
	}
	buf := bufs[SharedName]
	if len(buf) != 12 || len(bufs) != 1 {
		t.Fatalf("buffer sizes %d (%d buffers)", len(buf), len(bufs))
	}
	// Samples are recorded group by group, candidates in order.
	if buf[3].Group != "env0/b/t0" || buf[3].Completion.Text != "b1" || buf[3].Role != "b" || !near(buf[3].Reward, 1) || buf[3].Prompt != "b:a2" {
		t.Errorf("buffer[3] = %+v", buf[3])
	}
	if buf[11].Group != "env0/b/t1" || buf[11].Completion.Text != "b3" || !near(buf[11].Advantage, advB[2]) {
		t.Errorf("buffer[11] = %+v", buf[11])
	}
	calls := pol.Calls()
	if len(calls) != 4 || calls[0].K != 3 || calls[0].Seed == calls[1].Seed {
		t.Errorf("sample calls %+v", calls)
	}
}

func TestTreeAlphaAndTies(t *testing.T) {
	cases := []struct {
		alpha      float64
		k          int
		chosenA    string
		chosenB    string
		teamReturn float64
	}{
		{0, 3, "a3", "b1", 1},  // local only: a3 (½) beats a2 (0); b1 (1) beats b2 (0)
		{2, 3, "a2", "b2", 6},  // team dominates
		{1, 1, "a1", "b1", 0},  // K = 1: the only candidate, advantage 0
		{-1, 3, "a1", "b1", 0}, // team penalised: a1 (0) > a3 (0) tie → a1 first; b1 (1)
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.K, cfg.Alpha = c.k, c.alpha
		e, _ := tableEnv(0, 0)
		rolls, bufs, err := TreeRollouts(context.Background(), cfg, Shared(script()), []envs.Env{e}, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := rolls[0].Nodes
		ga := n[0].Candidates[n[0].Chosen].Completion.Text
		gb := n[1].Candidates[n[1].Chosen].Completion.Text
		if ga != c.chosenA || gb != c.chosenB || !near(rolls[0].TeamReturn, c.teamReturn) {
			t.Errorf("α=%v K=%d: chose %s,%s return %v; want %s,%s %v", c.alpha, c.k, ga, gb, rolls[0].TeamReturn, c.chosenA, c.chosenB, c.teamReturn)
		}
		if len(bufs[SharedName]) != 4*c.k {
			t.Errorf("α=%v K=%d: %d samples want %d", c.alpha, c.k, len(bufs[SharedName]), 4*c.k)
		}
		if c.k == 1 && bufs[SharedName][0].Advantage != 0 {
			t.Errorf("group of one has advantage %v", bufs[SharedName][0].Advantage)
		}
	}
}

func TestTreeStopsOnWinAndBatchesEnvs(t *testing.T) {
	// b's script puts the winning action first with the highest reward.
	win := map[string]envs.Step{"a1": {}, "w": {Team: 5}, "b1": {}}
	pol := &rl.Scripted{Script: func(p string) []string {
		if strings.HasPrefix(p, "a:") {
			return []string{"a1"}
		}
		return []string{"b1", "w"}
	}}
	es := []envs.Env{toyenv.NewTable([]string{"a", "b"}, 3, win, "w"), toyenv.NewTable([]string{"a", "b"}, 3, win, "w")}
	cfg := DefaultConfig()
	cfg.K = 2
	rolls, _, err := TreeRollouts(context.Background(), cfg, Shared(pol), es, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rolls {
		if !r.Success || len(r.Nodes) != 2 || r.Turns != 1 {
			t.Errorf("env %d: success %v nodes %d turns %d", r.Env, r.Success, len(r.Nodes), r.Turns)
		}
	}
	// Two sampling calls (a, then b), each batching both instances.
	calls := pol.Calls()
	if len(calls) != 2 || len(calls[0].Prompts) != 2 {
		t.Errorf("calls %+v", calls)
	}
}

func TestPerRoleRouting(t *testing.T) {
	pa, pb := script(), script()
	cfg := DefaultConfig()
	cfg.K, cfg.Envs = 3, 2
	tr := &Trainer{Config: cfg, Policies: PerRole(map[string]rl.Policy{"a": pa, "b": pb}), NewEnv: tableEnv}
	st, err := tr.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*rl.Scripted{"a": pa, "b": pb} {
		ups := p.Updates()
		if len(ups) != 1 || len(ups[0]) != 2*2*3 {
			t.Fatalf("policy %s: updates %d", name, len(ups))
		}
		for _, s := range ups[0] {
			if s.Role != name || !strings.Contains(s.Group, "/"+name+"/") || !strings.HasPrefix(s.Prompt, name+":") {
				t.Errorf("policy %s got sample %+v", name, s)
			}
		}
		for _, c := range p.Calls() {
			for _, pr := range c.Prompts {
				if !strings.HasPrefix(pr, name+":") {
					t.Errorf("policy %s asked to act on %q", name, pr)
				}
			}
		}
		if st.Updates[name].Samples != 12 {
			t.Errorf("stats for %s: %+v", name, st.Updates[name])
		}
	}
	if st.Groups != 8 || st.Samples != 24 || !near(st.TeamReturn, 6) || !near(st.ChosenReward, 1.5) || !near(st.MeanReward, 5.0/6) {
		t.Errorf("step stats %+v", st)
	}
	// A role with no policy is an error naming the role.
	tr.Policies = PerRole(map[string]rl.Policy{"a": pa})
	if _, err := tr.Step(context.Background()); !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("missing role: %v", err)
	}
}

func TestSharedRouting(t *testing.T) {
	p := script()
	cfg := DefaultConfig()
	cfg.K, cfg.Envs = 3, 2
	tr := &Trainer{Config: cfg, Policies: Shared(p), NewEnv: tableEnv}
	if _, err := tr.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	ups := p.Updates()
	if len(ups) != 1 || len(ups[0]) != 24 {
		t.Fatalf("shared updates: %d", len(ups))
	}
	roles := map[string]int{}
	for _, s := range ups[0] {
		roles[s.Role]++
	}
	if roles["a"] != 12 || roles["b"] != 12 {
		t.Errorf("roles in shared buffer %v", roles)
	}
}

type failing struct{ *rl.Scripted }

func (failing) Update(context.Context, []rl.Sample) (rl.UpdateStats, error) {
	return rl.UpdateStats{}, errors.New("boom")
}

func TestUpdateErrorNamesPolicy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.K, cfg.Envs = 2, 1
	tr := &Trainer{Config: cfg, Policies: PerRole(map[string]rl.Policy{"a": script(), "b": failing{script()}}), NewEnv: tableEnv}
	st, err := tr.Step(context.Background())
	if err == nil || !strings.Contains(err.Error(), "update b: boom") {
		t.Fatalf("err %v", err)
	}
	if _, ok := st.Updates["a"]; !ok {
		t.Error("the healthy policy's update is lost")
	}
	bad := cfg
	bad.K = 0
	tr.Config = bad
	if _, err := tr.Step(context.Background()); !errors.Is(err, ErrConfig) {
		t.Errorf("K=0: %v", err)
	}
}

func TestEvaluate(t *testing.T) {
	st, err := Evaluate(context.Background(), Shared(script()), tableEnv, 3, 8, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	// k = 1 always takes the first candidate: a1 then b1, two rounds.
	if st.Episodes != 3 || st.SuccessRate != 0 || st.TeamReturn != 0 || st.RoleReward["b"] != 2 || st.RoleReward["a"] != 0 || st.Turns != 2 || st.Invalid != 0 {
		t.Errorf("eval %+v", st)
	}
	if _, err := Evaluate(context.Background(), Shared(script()), tableEnv, 0, 8, 1, 5); !errors.Is(err, ErrConfig) {
		t.Errorf("n=0: %v", err)
	}
}

func relayEnv(_ int, seed int64) (envs.Env, error) { return toyenv.NewRelay(seed), nil }

// TestRewardRisesOnRelay trains tabular softmax policies with AT-GRPO on
// the Relay coordination task, in both regimes, and checks that the
// evaluated success rate and the training reward go up.
func TestRewardRisesOnRelay(t *testing.T) {
	loss := grpo.DefaultConfig()
	mk := func(actions []string) *rl.Tabular {
		p, err := rl.NewTabular(actions, 2, 2, loss)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	regimes := map[string]*Policies{
		"per-role": PerRole(map[string]rl.Policy{"planner": mk(toyenv.PlannerActions), "executor": mk(toyenv.ExecutorActions)}),
		"shared":   Shared(mk(append(append([]string{}, toyenv.PlannerActions...), toyenv.ExecutorActions...))),
	}
	for name, pols := range regimes {
		ctx := context.Background()
		before, err := Evaluate(ctx, pols, relayEnv, 64, 4, 1, 99)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Seed = 1
		tr := &Trainer{Config: cfg, Policies: pols, NewEnv: relayEnv}
		var first, last float64
		const steps = 50
		for i := range steps {
			st, err := tr.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if i < 5 {
				first += st.MeanReward / 5
			}
			if i >= steps-5 {
				last += st.MeanReward / 5
			}
		}
		after, err := Evaluate(ctx, pols, relayEnv, 64, 4, 1, 99)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: success %.2f → %.2f, branch reward %.2f → %.2f, invalid %.2f → %.2f", name, before.SuccessRate, after.SuccessRate, first, last, before.Invalid, after.Invalid)
		if after.SuccessRate < 0.9 || after.SuccessRate < before.SuccessRate+0.3 || last < first+0.3 {
			t.Errorf("%s: did not learn: success %.2f → %.2f, reward %.2f → %.2f", name, before.SuccessRate, after.SuccessRate, first, last)
		}
	}
}
