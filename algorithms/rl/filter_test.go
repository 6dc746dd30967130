package rl

import (
	"errors"
	"math"
	"testing"

	"troupe/algorithms/grpo"
)

// filterBatch is four groups of four samples, in order g0..g3.
func filterBatch() []Sample {
	rewards := map[string][]float64{
		"g0": {1, 1, 1, 1},         // mean 1, all equal
		"g1": {0, 0, 0, 1},         // mean 0.25
		"g2": {-1, 0.5, 0.5, 2},    // mean 0.5, spread 3
		"g3": {0.2, 0.2, 0.2, 0.2}, // mean 0.2, all equal
	}
	var out []Sample
	for _, g := range []string{"g0", "g1", "g2", "g3"} {
		for _, r := range rewards[g] {
			out = append(out, Sample{Group: g, Reward: r})
		}
	}
	return out
}

func groupsOf(b []Sample) []string {
	var out []string
	for _, s := range b {
		if len(out) == 0 || out[len(out)-1] != s.Group {
			out = append(out, s.Group)
		}
	}
	return out
}

func TestGroupFilterMethods(t *testing.T) {
	cases := []struct {
		f      GroupFilter
		groups []string
		kept   int
	}{
		{GroupFilter{}, []string{"g0", "g1", "g2", "g3"}, 16},
		{GroupFilter{Method: FilterMean, Ratio: 0.5}, []string{"g0", "g2"}, 8},        // drops g3 (0.2), g1 (0.25)
		{GroupFilter{Method: FilterMean, Ratio: 0.3}, []string{"g0", "g1", "g2"}, 12}, // ⌊1.2⌋ = 1 group
		{GroupFilter{Method: FilterStd, Ratio: 0.5}, []string{"g1", "g2"}, 8},         // the two zero-variance groups
		{GroupFilter{Method: FilterDAPO}, []string{"g1", "g2"}, 8},
		{GroupFilter{Method: FilterUID, Ratio: 0.25}, []string{"g0", "g1", "g2", "g3"}, 12},
	}
	for _, c := range cases {
		out, st, err := c.f.Apply(filterBatch())
		if err != nil {
			t.Fatal(err)
		}
		got := groupsOf(out)
		if len(out) != c.kept || len(got) != len(c.groups) || st.SamplesKept != c.kept || st.Samples != 16 || st.Groups != 4 || st.GroupsKept != len(c.groups) {
			t.Errorf("%+v kept %d samples in %v (%+v), want %d in %v", c.f, len(out), got, st, c.kept, c.groups)
			continue
		}
		for i := range got {
			if got[i] != c.groups[i] {
				t.Errorf("%+v kept %v, want %v", c.f, got, c.groups)
			}
		}
	}
	// uid drops each group's farthest sample from its mean: g1's 1, g2's −1 (first of the two farthest by stable order).
	out, _, _ := GroupFilter{Method: FilterUID, Ratio: 0.25}.Apply(filterBatch())
	for _, s := range out {
		if (s.Group == "g1" && s.Reward == 1) || (s.Group == "g2" && s.Reward == -1) {
			t.Errorf("uid filter kept %+v", s)
		}
	}
	for _, bad := range []GroupFilter{{Method: "median", Ratio: 0.5}, {Method: FilterMean, Ratio: 1}, {Method: FilterMean, Ratio: math.NaN()}} {
		if _, _, err := bad.Apply(filterBatch()); !errors.Is(err, ErrBadSample) {
			t.Errorf("%+v accepted: %v", bad, err)
		}
	}
	if m, err := ParseFilterMethod("none"); err != nil || m != FilterNone {
		t.Errorf("none = %q, %v", m, err)
	}
}

func TestFilterBuffersAndZeroAdvantage(t *testing.T) {
	b := filterBatch()
	for i := range b {
		b[i].Advantage = b[i].Reward - 0.2
	}
	out, st, err := FilterBuffers(GroupFilter{Method: FilterDAPO}, map[string][]Sample{"x": b, "y": b[:4]})
	if err != nil {
		t.Fatal(err)
	}
	if len(out["x"]) != 8 || len(out["y"]) != 0 || st.Samples != 20 || st.SamplesKept != 8 {
		t.Fatalf("filtered %d/%d, stats %+v", len(out["x"]), len(out["y"]), st)
	}
	// Only g3's four samples (reward 0.2) have advantage 0.
	if z := ZeroAdvantage(map[string][]Sample{"x": b}); z != 4.0/16 {
		t.Errorf("zero advantage share %v", z)
	}
}

func TestAssignAdvantagesDrMAS(t *testing.T) {
	// Two tasks, two roles, two turns of one role: Dr. MAS pools the turns
	// of (env0, planner), groups do not.
	b := []Sample{
		{Group: "env0/planner/t0", UID: "env0", Role: "planner", Reward: 1},
		{Group: "env0/planner/t0", UID: "env0", Role: "planner", Reward: 0},
		{Group: "env0/planner/t1", UID: "env0", Role: "planner", Reward: 3},
		{Group: "env0/planner/t1", UID: "env0", Role: "planner", Reward: 2},
		{Group: "env0/tool/t0", UID: "env0", Role: "tool", Reward: 5},
		{Group: "env1/planner/t0", UID: "env1", Role: "planner", Reward: 5},
	}
	if err := AssignAdvantages(b, grpo.MeanCentered, false); err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{0.5, -0.5, 0.5, -0.5, 0, 0} {
		if b[i].Advantage != want {
			t.Errorf("group advantage %d = %v want %v", i, b[i].Advantage, want)
		}
	}
	if err := AssignAdvantages(b, grpo.MeanCentered, true); err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{-0.5, -1.5, 1.5, 0.5, 0, 0} {
		if b[i].Advantage != want {
			t.Errorf("Dr. MAS advantage %d = %v want %v", i, b[i].Advantage, want)
		}
	}
}
