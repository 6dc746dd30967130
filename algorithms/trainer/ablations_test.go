package trainer

import (
	"errors"
	"testing"

	"troupe/algorithms/atgrpo"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
)

func TestATGRPOVariantOptions(t *testing.T) {
	a, err := newATGRPO(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g := a.(*ATGRPO); g.Grouping != atgrpo.AgentTurn || g.Sampler != atgrpo.Tree || g.Advantage != grpo.StdNormalized {
		t.Fatalf("defaults: %+v", g)
	}
	o := Options{Advantage: "mean", ATGRPO: ATGRPOOptions{Grouping: "trajectory", Sampler: "independent"}}
	a, err = newATGRPO(o)
	if err != nil {
		t.Fatal(err)
	}
	if g := a.(*ATGRPO); g.Grouping != atgrpo.Trajectory || g.Sampler != atgrpo.Independent || g.Advantage != grpo.MeanCentered {
		t.Fatalf("trajectory, independent, mean: %+v", g)
	}
	for name, o := range map[string]Options{
		"unknown key":           {ATGRPO: ATGRPOOptions{Grouping: "role"}},
		"unknown sampler":       {ATGRPO: ATGRPOOptions{Sampler: "beam"}},
		"trajectory tree":       {ATGRPO: ATGRPOOptions{Grouping: "trajectory"}},
		"independent env actor": {EnvActors: 2, ATGRPO: ATGRPOOptions{Sampler: "independent"}},
		"unknown advantage":     {Advantage: "rank"},
		"agent key, workers":    {Async: AsyncOptions{RolloutWorkers: 2}, ATGRPO: ATGRPOOptions{Grouping: "agent"}},
		"dr grpo, workers":      {Async: AsyncOptions{RolloutWorkers: 2}, Advantage: "mean"},
	} {
		if _, err := newATGRPO(o); !errors.Is(err, ErrAlgorithm) {
			t.Errorf("%s: %v, want ErrAlgorithm", name, err)
		}
	}
}

func TestJoyAgentsSelectionAndAdvantageOptions(t *testing.T) {
	a, err := newJoyAgents(Options{Advantage: "mean", Joy: JoyOptions{TopFrac: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if c := a.(*JoyAgents).Config; c.TopFrac != 0.5 || c.Advantage != grpo.MeanCentered {
		t.Fatalf("TopFrac %v, advantage %v", c.TopFrac, c.Advantage)
	}
	a, err = newJoyAgents(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := a.(*JoyAgents).Config; c.TopFrac != 0 || c.Advantage != grpo.StdNormalized {
		t.Fatalf("defaults: TopFrac %v, advantage %v", c.TopFrac, c.Advantage)
	}
	if _, err := newJoyAgents(Options{Advantage: "z"}); !errors.Is(err, ErrAlgorithm) {
		t.Fatalf("unknown advantage: %v", err)
	}
}

func TestJoyAgentsMemoryKeyOption(t *testing.T) {
	a, err := newJoyAgents(Options{Env: "planpath-10x10", Joy: JoyOptions{MemoryKey: "situation"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.(*JoyAgents).Config.Memory.Abstract; got != "planpath" {
		t.Fatalf("abstraction %q", got)
	}
	if a, _ := newJoyAgents(Options{Env: "planpath"}); a.(*JoyAgents).Config.Memory.Abstract != "" {
		t.Fatal("default memory key is not the raw observation")
	}
	for name, o := range map[string]Options{
		"no abstraction": {Env: "sokoban", Joy: JoyOptions{MemoryKey: "situation"}},
		"unknown key":    {Env: "planpath", Joy: JoyOptions{MemoryKey: "grid"}},
	} {
		if _, err := newJoyAgents(o); !errors.Is(err, ErrAlgorithm) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestResampleOption(t *testing.T) {
	a, err := newATGRPO(Options{ATGRPO: ATGRPOOptions{Resample: 16}})
	if err != nil {
		t.Fatal(err)
	}
	if g := a.(*ATGRPO); g.Resample != 16 || g.Filter.Method != rl.FilterDAPO {
		t.Fatalf("resample %d filter %q, want 16 dapo", g.Resample, g.Filter.Method)
	}
	if a, _ := newATGRPO(Options{}); a.(*ATGRPO).Resample != 0 || a.(*ATGRPO).Filter.Active() {
		t.Fatal("default resamples or filters")
	}
	for name, o := range map[string]Options{
		"negative":    {ATGRPO: ATGRPOOptions{Resample: -1}},
		"mean filter": {ATGRPO: ATGRPOOptions{Resample: 4, Filter: "mean", FilterRatio: 0.5}},
		"env actors":  {EnvActors: 2, ATGRPO: ATGRPOOptions{Resample: 4}},
		"workers":     {Async: AsyncOptions{RolloutWorkers: 2}, ATGRPO: ATGRPOOptions{Resample: 4}},
	} {
		if _, err := newATGRPO(o); !errors.Is(err, ErrAlgorithm) {
			t.Errorf("%s: %v, want ErrAlgorithm", name, err)
		}
	}
}
