package joyagents

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
	"troupe/algorithms/rl/toyenv"
)

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

func noMemory() Config {
	c := DefaultConfig()
	c.G, c.Envs, c.UseMemory = 3, 1, false
	return c
}

// Hand-computed: R = Σteam + 0.5·valid/actions − 0.05·actions; completions
// take the first scripted candidate (a1 / b1); b3 wins and ends the episode.
var wantTotals = [][]float64{
	{0.3, 1.3, 0.8}, // node 0 (a, round 0): a1|a2|a3 then b1,a1,b1
	{0.3, 2.3, 0.4}, // node 1 (b, round 0) after a1: b1,a1,b1 | b2,a1,b1 | b3 (win after 2 actions)
	{0.3, 1.3, 0.8}, // node 2 (a, round 1)
	{0.3, 2.3, 0.3}, // node 3 (b, round 1): b3 wins after 4 actions
}

func TestNodeWiseSamplingHandComputed(t *testing.T) {
	pol := script()
	s := &NodeSampler{Config: noMemory(), Policies: rl.Shared(pol)}
	env, _ := tableEnv(0, 0)
	trs, err := s.Rollouts(context.Background(), []envs.Env{env}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr := trs[0]
	if tr.Nodes != 4 || len(tr.Groups) != 4 || tr.Skipped != 0 {
		t.Fatalf("L = %d, groups %d", tr.Nodes, len(tr.Groups))
	}
	// Cost: L·G node samples. Completions: node 0 has 3 later nodes × 3
	// branches; node 1 has 2 × 2 (its b3 branch won and ended); node 2 has
	// 1 × 3; node 3 none.
	if s.Counts.NodeSamples != 4*3 || s.Counts.CompletionSamples != 9+4+3 {
		t.Errorf("counts %+v", s.Counts)
	}
	if pol.Sampled() != 12+16 {
		t.Errorf("policy sampled %d", pol.Sampled())
	}
	roles := []string{"a", "b", "a", "b"}
	prompts := []string{"a:", "b:a1", "a:a1,b1", "b:a1,b1,a1"}
	for l, g := range tr.Groups {
		if g.Node != l || g.Role != roles[l] || g.Prompt != prompts[l] || g.Situation != prompts[l] || g.Turn != l/2 || g.Key() != "env0/n"+string(rune('0'+l))+"/"+roles[l] {
			t.Errorf("group %d: %+v", l, g)
		}
		for j, a := range g.Alts {
			if !near(a.Reward.Total(), wantTotals[l][j]) {
				t.Errorf("node %d alt %d: R = %v want %v (%+v)", l, j, a.Reward.Total(), wantTotals[l][j], a.Outcome)
			}
		}
	}
	if !near(tr.Groups[1].Variance, 1.27) || !near(tr.Groups[3].Variance, 4.0/3) || !near(tr.Groups[0].Variance, 0.25) {
		t.Errorf("variances %v %v %v", tr.Groups[0].Variance, tr.Groups[1].Variance, tr.Groups[3].Variance)
	}
	if !near(tr.Reward.Total(), 0.3) || tr.Outcome.Actions != 4 || tr.Outcome.Success {
		t.Errorf("backbone %+v %+v", tr.Outcome, tr.Reward)
	}
	// b3 wins: its branch reports success.
	if !tr.Groups[1].Alts[2].Outcome.Success || tr.Groups[1].Alts[2].Outcome.Actions != 2 {
		t.Errorf("winning branch %+v", tr.Groups[1].Alts[2].Outcome)
	}
}

func TestNodeWiseBatchesBackbones(t *testing.T) {
	pol := script()
	s := &NodeSampler{Config: noMemory(), Policies: rl.Shared(pol)}
	e0, _ := tableEnv(0, 0)
	e1, _ := tableEnv(1, 0)
	trs, err := s.Rollouts(context.Background(), []envs.Env{e0, e1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) != 2 || trs[1].Groups[2].Key() != "env1/n2/a" || s.Counts.NodeSamples != 2*12 || s.Counts.CompletionSamples != 2*16 {
		t.Fatalf("counts %+v", s.Counts)
	}
	// One node call per backbone position (4) with both prompts, k = G;
	// completions: node 0 needs 3 later calls, node 1 two, node 2 one.
	calls := pol.Calls()
	if len(calls) != 4+3+2+1 || len(calls[0].Prompts) != 2 || calls[0].K != 3 || len(calls[1].Prompts) != 6 || calls[1].K != 1 {
		t.Errorf("%d calls; first %+v second %+v", len(calls), calls[0], calls[1])
	}
	for l, g := range trs[1].Groups {
		for j, a := range g.Alts {
			if !near(a.Reward.Total(), wantTotals[l][j]) {
				t.Errorf("env1 node %d alt %d: R = %v want %v", l, j, a.Reward.Total(), wantTotals[l][j])
			}
		}
	}
	if _, err := s.Rollouts(context.Background(), []envs.Env{e0, toyenv.NewRelay(1)}, 0); !errors.Is(err, ErrEnv) {
		t.Errorf("mixed casts: %v", err)
	}
}

func TestRewardDecomposition(t *testing.T) {
	c := RewardConfig{FormatWeight: 0.5, EfficiencyWeight: 0.05}
	r := c.Of(Outcome{Team: 2, Actions: 4, Valid: 3})
	if r.Accuracy != 2 || r.Format != 0.375 || r.Efficiency != 0.2 || !near(r.Total(), 2.175) || r.Memory() != 2.375 {
		t.Errorf("reward %+v", r)
	}
	if r := c.Of(Outcome{}); r.Total() != 0 {
		t.Errorf("empty outcome %+v", r)
	}
}

func groupsOf(totals ...[]float64) []*Group {
	var gs []*Group
	for i, ts := range totals {
		role := []string{"a", "b"}[i%2]
		g := &Group{Env: 0, Node: i, Role: role, Policy: role}
		for _, r := range ts {
			g.Alts = append(g.Alts, Alternative{Reward: Reward{Accuracy: r}})
		}
		_, std := grpo.MeanStd(ts)
		g.Variance = std * std
		gs = append(gs, g)
	}
	return gs
}

func TestSelectTopKTable(t *testing.T) {
	// variances: n0 0.25, n1 1.27, n2 0.25, n3 4/3
	gs := groupsOf(wantTotals...)
	cases := []struct {
		k      int
		nodes  []int
		agents []string
	}{
		{1, []int{3}, []string{"b"}},
		{2, []int{3, 1}, []string{"b"}},
		{3, []int{3, 1, 0}, []string{"a", "b"}}, // n0 and n2 tie: input order
		{0, []int{3, 1, 0, 2}, []string{"a", "b"}},
		{9, []int{3, 1, 0, 2}, []string{"a", "b"}},
	}
	for _, c := range cases {
		sel, agents := SelectTopK(gs, c.k)
		var nodes []int
		for _, g := range sel {
			nodes = append(nodes, g.Node)
		}
		if !equalInts(nodes, c.nodes) || strings.Join(agents, ",") != strings.Join(c.agents, ",") {
			t.Errorf("K=%d: nodes %v agents %v want %v %v", c.k, nodes, agents, c.nodes, c.agents)
		}
	}
	if gs[0].Node != 0 {
		t.Error("SelectTopK reordered its input")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAssignGroupAndDrMAS(t *testing.T) {
	gs := groupsOf([]float64{1, 2, 3}, []float64{10, 10, 40}, []float64{5, 6, 7})
	Assign(gs, grpo.StdNormalized, false)
	if !near(gs[0].Alts[0].Advantage, -1/(1+1e-6)) || !near(gs[2].Alts[2].Advantage, 1/(1+1e-6)) || !near(gs[1].Alts[0].Advantage, -10/(math.Sqrt(300)+1e-6)) {
		t.Errorf("group advantages %v %v %v", gs[0].Alts[0].Advantage, gs[2].Alts[2].Advantage, gs[1].Alts[0].Advantage)
	}
	// Dr. MAS: agent a owns groups 0 and 2: rewards {1,2,3,5,6,7}, μ = 4,
	// σ = √(32/5·... ) computed below; agent b owns group 1 alone.
	Assign(gs, grpo.StdNormalized, true)
	mean, std := grpo.MeanStd([]float64{1, 2, 3, 5, 6, 7})
	if mean != 4 || !near(std, math.Sqrt(28.0/5)) {
		t.Fatalf("hand stats %v %v", mean, std)
	}
	if !near(gs[0].Alts[0].Advantage, (1-4)/(std+1e-6)) || !near(gs[2].Alts[2].Advantage, (7-4)/(std+1e-6)) {
		t.Errorf("Dr. MAS a: %v %v", gs[0].Alts[0].Advantage, gs[2].Alts[2].Advantage)
	}
	if !near(gs[1].Alts[2].Advantage, 20/(math.Sqrt(300)+1e-6)) {
		t.Errorf("Dr. MAS b: %v", gs[1].Alts[2].Advantage)
	}
	Assign(gs, grpo.MeanCentered, true)
	if gs[0].Alts[0].Advantage != -3 || gs[1].Alts[2].Advantage != 20 {
		t.Errorf("Dr. MAS mean-centred %v %v", gs[0].Alts[0].Advantage, gs[1].Alts[2].Advantage)
	}
}

func TestTrainerTopKUpdatesOnlyOwners(t *testing.T) {
	pa, pb := script(), script()
	cfg := noMemory()
	cfg.TopK = 1
	tr := &Trainer{Config: cfg, Policies: rl.PerRole(map[string]rl.Policy{"a": pa, "b": pb}), NewEnv: tableEnv}
	st, err := tr.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pa.Updates()) != 0 || len(pb.Updates()) != 1 {
		t.Fatalf("updates a %d b %d; top-1 group is b's node 3", len(pa.Updates()), len(pb.Updates()))
	}
	batch := pb.Updates()[0]
	if len(batch) != 3 || batch[0].Group != "env0/n3/b" || batch[0].Prompt != "b:a1,b1,a1" {
		t.Errorf("b's batch %+v", batch)
	}
	if st.Groups != 4 || st.Selected != 1 || strings.Join(st.Agents, ",") != "b" || st.Counts.NodeSamples != 12 {
		t.Errorf("stats %+v", st)
	}
	// "all": both agents, each only with its own groups.
	tr.Config.TopK = 0
	if _, err := tr.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(pa.Updates()) != 1 || len(pa.Updates()[0]) != 6 || len(pb.Updates()) != 2 || len(pb.Updates()[1]) != 6 {
		t.Errorf("all: a %d b %d", len(pa.Updates()), len(pb.Updates()))
	}
	for _, s := range pa.Updates()[0] {
		if s.Role != "a" {
			t.Errorf("a got %+v", s)
		}
	}
	bad := noMemory()
	bad.G = 0
	tr.Config = bad
	if _, err := tr.Step(context.Background()); !errors.Is(err, ErrConfig) {
		t.Errorf("G=0: %v", err)
	}
}

func TestMemorySkipsSampling(t *testing.T) {
	pol := script()
	cfg := noMemory()
	cfg.UseMemory = true
	mem := NewMemory(cfg.Memory)
	mem.Put(Entry{Situation: "a:", Answer: "a2", Diff: 1, Time: 0}, 0) // exact, score 2 ≥ 1
	s := &NodeSampler{Config: cfg, Policies: rl.Shared(pol), Memories: map[string]*Memory{"a": mem}}
	env, _ := tableEnv(0, 0)
	trs, err := s.Rollouts(context.Background(), []envs.Env{env}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tr := trs[0]
	// Node 0 is answered from memory (a2): no group, and the later a node
	// ("a:a2,b1") gets a hint but is not exact, so it is sampled.
	if tr.Nodes != 4 || tr.Skipped != 1 || len(tr.Groups) != 3 || s.Counts.NodeSamples != 9 {
		t.Fatalf("nodes %d skipped %d groups %d counts %+v", tr.Nodes, tr.Skipped, len(tr.Groups), s.Counts)
	}
	if tr.Groups[0].Prompt != "b:a2" || tr.Groups[1].Situation != "a:a2,b1" {
		t.Errorf("groups %q %q", tr.Groups[0].Prompt, tr.Groups[1].Situation)
	}
	// The hint is appended only when similar enough: "a:a2,b1" vs "a:" is not.
	if strings.Contains(tr.Groups[1].Prompt, "hint") {
		t.Errorf("unexpected hint in %q", tr.Groups[1].Prompt)
	}
	if tr.Outcome.Team < 1 {
		t.Errorf("backbone did not take the remembered a2: %+v", tr.Outcome)
	}
}

func TestTrainerMemoryEvolves(t *testing.T) {
	// G = 8 so that a single standout reaches μ + 1.96σ.
	pol := &rl.Scripted{Script: func(p string) []string {
		if strings.HasPrefix(p, "a:") {
			return []string{"a1", "a1", "a1", "a1", "a1", "a1", "a1", "a2"}
		}
		return []string{"b1"}
	}}
	cfg := noMemory()
	cfg.G, cfg.UseMemory = 8, true
	tr := &Trainer{Config: cfg, Policies: rl.Shared(pol), NewEnv: tableEnv}
	st, err := tr.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	es := tr.Memories["a"].Entries()
	if st.Memory.Inserted == 0 || len(es) == 0 || es[0].Answer != "a2" || es[0].Situation != "a:" {
		t.Fatalf("memory %+v entries %+v", st.Memory, es)
	}
	// Next step, "a:" is answered from memory: fewer node samples.
	st2, err := tr.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st2.Counts.SkippedActions == 0 || st2.Counts.NodeSamples >= st.Counts.NodeSamples {
		t.Errorf("memory did not skip sampling: %+v then %+v", st.Counts, st2.Counts)
	}
}

func relayEnv(_ int, seed int64) (envs.Env, error) { return toyenv.NewRelay(seed), nil }

// TestRewardRisesOnRelay trains per-role tabular policies with JoyAgents-R1
// (node-wise sampling; all groups, top-8, memory, Dr. MAS) on Relay and
// checks that the backbone reward (mean over the first and last 10 of 60
// steps) and the success rate of 128 independent evaluation episodes
// (atgrpo.Evaluate, memory not consulted) go up. The reward is the team
// outcome (LocalWeight 0, as in the paper), so the pair must invent a
// private code (goal → plan → move); some seeds end in a coordination trap
// where two goals share one plan and only 3 of 4 goals are solved (success
// ≈ 0.8), hence the 0.75 bar (random play: 0.33). Counting the agents'
// local rewards (LocalWeight 1) does not help on Relay: the planner's
// per-round bonus then pays for prolonging episodes. Memory hints alone (no skipping) slow a tabular policy down, since
// every hinted prompt is a fresh table row; a GPT generalises across them.
// Memory evolved during sampling (the default) answers the step's later
// nodes from what its earlier groups found, which on Relay (one tiny task
// over and over) locks answers in early: over seeds 1..8 it ends in the
// trap twice (success 0.75 and 0.82, reward +0.22 and +0.33), evolved once
// per step never; its bar is therefore the trap's (+0.2).
func TestRewardRisesOnRelay(t *testing.T) {
	for _, variant := range []struct {
		name    string
		topK    int
		memory  bool
		perStep bool
		drMAS   bool
	}{{"all", 0, false, false, false}, {"top-8", 8, false, false, false}, {"memory", 0, true, false, false},
		{"memory-per-step", 0, true, true, false}, {"dr-mas", 0, false, false, true}} {
		mk := func(actions []string) *rl.Tabular {
			p, err := rl.NewTabular(actions, 2, 2, grpo.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		ctx := context.Background()
		pols := rl.PerRole(map[string]rl.Policy{"planner": mk(toyenv.PlannerActions), "executor": mk(toyenv.ExecutorActions)})
		before, err := atgrpo.Evaluate(ctx, pols, relayEnv, 128, 4, 1, 77)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.G, cfg.Envs, cfg.TopK, cfg.UseMemory, cfg.DrMAS, cfg.Seed = 8, 8, variant.topK, variant.memory, variant.drMAS, 3
		cfg.Memory.PerStep = variant.perStep
		tr := &Trainer{Config: cfg, NewEnv: relayEnv, Policies: pols}
		var first, last float64
		const steps = 60
		for i := range steps {
			st, err := tr.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if i < 10 {
				first += st.Reward / 10
			}
			if i >= steps-10 {
				last += st.Reward / 10
			}
		}
		after, err := atgrpo.Evaluate(ctx, pols, relayEnv, 128, 4, 1, 77)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: backbone reward %.2f → %.2f, evaluated success %.2f → %.2f", variant.name, first, last, before.SuccessRate, after.SuccessRate)
		rise := 0.3
		if variant.memory && !variant.perStep {
			rise = 0.2
		}
		if last < first+rise || after.SuccessRate < 0.75 || after.SuccessRate < before.SuccessRate+0.3 {
			t.Errorf("%s: did not learn: reward %.2f → %.2f, success %.2f → %.2f", variant.name, first, last, before.SuccessRate, after.SuccessRate)
		}
	}
}

// SelectTopFrac keeps each agent's ceil(frac × n) groups of largest
// variance, so an agent with few high-variance groups still trains.
func TestSelectTopFracPerAgent(t *testing.T) {
	// a: n0 0.25, n2 0.25, n4 0; b: n1 1.27, n3 4/3, n5 0.
	gs := groupsOf(append(slices.Clone(wantTotals), []float64{1, 1, 1}, []float64{2, 2, 2})...)
	for _, c := range []struct {
		frac   float64
		nodes  []int
		agents string
	}{
		{0.1, []int{0, 3}, "a,b"},              // one each: top-K = 1 would keep n3 alone
		{0.5, []int{0, 2, 3, 1}, "a,b"},        // two each (ceil 1.5)
		{0.67, []int{0, 2, 4, 3, 1, 5}, "a,b"}, // ceil(2.01) = 3 each
		{1, []int{0, 2, 4, 3, 1, 5}, "a,b"},    // all, by variance within each agent
	} {
		sel, agents := SelectTopFrac(gs, c.frac)
		var nodes []int
		for _, g := range sel {
			nodes = append(nodes, g.Node)
		}
		want := c.nodes
		if !equalInts(nodes, want) || strings.Join(agents, ",") != c.agents {
			t.Errorf("frac %v: nodes %v agents %v, want %v %s", c.frac, nodes, agents, want, c.agents)
		}
	}
	cfg := DefaultConfig()
	cfg.TopFrac = 0.25
	if err := cfg.Validate(); err != nil {
		t.Errorf("TopFrac 0.25: %v", err)
	}
	cfg.TopFrac = 1.5
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("TopFrac 1.5: %v", err)
	}
}
