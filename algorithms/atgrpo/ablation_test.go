package atgrpo

import (
	"context"
	"errors"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
	"troupe/algorithms/rl/toyenv"
)

// byIndex is a policy whose i-th prompt of a call gets action i of its
// script (mod its length): the k-th independent copy of an environment
// plays the k-th action every turn.
type byIndex struct{ *rl.Scripted }

func (p byIndex) Sample(_ context.Context, prompts []string, k int, _ int64) ([][]rl.Completion, error) {
	out := make([][]rl.Completion, len(prompts))
	for i, pr := range prompts {
		texts := p.Script(pr)
		for j := range k {
			out[i] = append(out[i], rl.Completion{Text: texts[(i+j)%len(texts)], LogProbs: []float32{-1}})
		}
	}
	return out, nil
}

func advOf(t *testing.T, rewards ...float64) []float64 {
	t.Helper()
	return grpo.Advantages(rewards, grpo.StdNormalized)
}

// Under the agent-only and turn-only keys the tree's samples are grouped
// across its nodes: (env, role) pools an agent's turns, (env, turn) pools a
// turn's agents.
func TestTreeAblationKeys(t *testing.T) {
	for _, c := range []struct {
		g      Grouping
		groups map[string][]float64 // group → rewards, candidate order over the tree
	}{
		{AgentOnly, map[string][]float64{"env0/a": {0, 1, 1, 0, 1, 1}, "env0/b": {1, 2, 0, 1, 2, 0}}},
		{TurnOnly, map[string][]float64{"env0/t0": {0, 1, 1, 1, 2, 0}, "env0/t1": {0, 1, 1, 1, 2, 0}}},
	} {
		cfg := DefaultConfig()
		cfg.K, cfg.Grouping = 3, c.g
		e, _ := tableEnv(0, 0)
		rolls, bufs, err := TreeRollouts(context.Background(), cfg, Shared(script()), []envs.Env{e}, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf := bufs[SharedName]
		if len(buf) != 12 {
			t.Fatalf("%s: %d samples, want 12", c.g, len(buf))
		}
		seen := map[string]int{}
		for i, s := range buf {
			want, ok := c.groups[s.Group]
			if !ok {
				t.Fatalf("%s: sample %d in group %q", c.g, i, s.Group)
			}
			j := seen[s.Group]
			seen[s.Group]++
			if adv := advOf(t, want...); !near(s.Reward, want[j]) || !near(s.Advantage, adv[j]) {
				t.Errorf("%s: sample %d (%s #%d): reward %v adv %v, want %v %v", c.g, i, s.Group, j, s.Reward, s.Advantage, want[j], adv[j])
			}
		}
		// The rollouts carry the same advantages as the buffer.
		i := 0
		for _, n := range rolls[0].Nodes {
			for _, cand := range n.Candidates {
				if !near(cand.Advantage, buf[i].Advantage) {
					t.Errorf("%s: rollout candidate %d advantage %v, buffer %v", c.g, i, cand.Advantage, buf[i].Advantage)
				}
				i++
			}
		}
	}
}

// Independent sampling plays K copies of each instance, one action per
// turn; the (env, role, turn) key groups the copies' actions of one turn
// even though their observations differ after the first, and the
// trajectory key gives every action its episode's advantage.
func TestIndependentSampling(t *testing.T) {
	// Copy k plays a(k+1), b(k+1): copy 2's b3 wins in the first round.
	for _, g := range []Grouping{AgentTurn, Trajectory} {
		cfg := DefaultConfig()
		cfg.K, cfg.Sampler, cfg.Grouping = 3, Independent, g
		e, _ := tableEnv(0, 0)
		pol := byIndex{script()}
		rolls, bufs, err := TreeRollouts(context.Background(), cfg, Shared(pol), []envs.Env{e}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if e.Done() || e.Turn() != 0 {
			t.Errorf("%s: the instance itself was stepped (turn %d)", g, e.Turn())
		}
		if len(rolls) != 3 || len(rolls[0].Nodes) != 4 || len(rolls[1].Nodes) != 4 || len(rolls[2].Nodes) != 2 ||
			!rolls[2].Success || rolls[0].Success || rolls[1].Env != 0 || rolls[2].Env != 0 {
			t.Fatalf("%s: rollouts %+v", g, rolls)
		}
		if rolls[1].Nodes[2].Prompt != "a:a2,b2" || !near(rolls[1].TeamReturn, 6) {
			t.Errorf("%s: copy 1 turn 1 prompt %q, return %v", g, rolls[1].Nodes[2].Prompt, rolls[1].TeamReturn)
		}
		buf := bufs[SharedName]
		if len(buf) != 10 {
			t.Fatalf("%s: %d samples, want 10 (4 + 4 + 2)", g, len(buf))
		}
		switch g {
		case AgentTurn:
			// Samples in copy, node order: copy 0 a,b,a,b; copy 1 a,b,a,b; copy 2 a,b.
			want := map[string][]float64{"env0/a/t0": {0, 1, 1}, "env0/b/t0": {1, 2, 0}, "env0/a/t1": {0, 1}, "env0/b/t1": {1, 2}}
			seen := map[string]int{}
			for i, s := range buf {
				w := want[s.Group]
				j := seen[s.Group]
				seen[s.Group]++
				if j >= len(w) || !near(s.Advantage, advOf(t, w...)[j]) || !near(s.Reward, w[j]) {
					t.Errorf("sample %d (%s #%d): reward %v adv %v", i, s.Group, j, s.Reward, s.Advantage)
				}
			}
		case Trajectory:
			// Returns 0+1+0+1, 1+2+1+2, 1+0.
			adv := advOf(t, 2, 6, 1)
			copyOf := []int{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}
			for i, s := range buf {
				k := copyOf[i]
				if s.Group != "env0" || !near(s.Reward, []float64{2, 6, 1}[k]) || !near(s.Advantage, adv[k]) {
					t.Errorf("sample %d: group %q reward %v adv %v, want copy %d's %v", i, s.Group, s.Reward, s.Advantage, k, adv[k])
				}
			}
		}
	}
	// Trajectory-level groups need independent episodes.
	cfg := DefaultConfig()
	cfg.Grouping = Trajectory
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("trajectory key with the tree sampler: %v", err)
	}
	if _, err := ParseGrouping("agents"); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown grouping: %v", err)
	}
	for _, s := range []string{"agent-turn", "agent", "turn", "trajectory"} {
		if g, err := ParseGrouping(s); err != nil || g.String() != s {
			t.Errorf("ParseGrouping(%q) = %v, %v", s, g, err)
		}
	}
}

// Evaluate reports which episode of the range succeeded, so two
// evaluations on the same grids can be paired.
func TestEvaluateSolvedPerEpisode(t *testing.T) {
	evenWins := func(i int, _ int64) (envs.Env, error) {
		win := "b3"
		if i%2 == 0 {
			win = "b1" // the script's first b action
		}
		return toyenv.NewTable([]string{"a", "b"}, 2, table, win), nil
	}
	st, err := Evaluate(context.Background(), Shared(script()), evenWins, 5, 8, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, true, false, true}
	if len(st.Solved) != len(want) || !near(st.SuccessRate, 0.6) {
		t.Fatalf("solved %v, success %v", st.Solved, st.SuccessRate)
	}
	for i := range want {
		if st.Solved[i] != want[i] {
			t.Fatalf("solved %v, want %v", st.Solved, want)
		}
	}
}
