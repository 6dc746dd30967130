package trainer

import (
	"errors"
	"testing"

	"troupe/algorithms/atgrpo"
	"troupe/algorithms/grpo"
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
	} {
		if _, err := newATGRPO(o); !errors.Is(err, ErrAlgorithm) {
			t.Errorf("%s: %v, want ErrAlgorithm", name, err)
		}
	}
}
