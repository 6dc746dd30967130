package trainer

import (
	"context"
	"errors"
	"slices"
	"testing"

	"troupe/algorithms/envs"
	"troupe/runtime"
)

// tracing wraps a built-in algorithm and records the order of the calls
// the Trainer makes: what a user's own Algorithm sees.
type tracing struct {
	Algorithm
	calls []string
}

func (a *tracing) Name() string { return "tracing" }
func (a *tracing) Start(ctx context.Context, t *Trainer) error {
	a.calls = append(a.calls, "start")
	return a.Algorithm.Start(ctx, t)
}
func (a *tracing) Rollout(ctx context.Context) (Rollouts, error) {
	a.calls = append(a.calls, "rollout")
	return a.Algorithm.Rollout(ctx)
}
func (a *tracing) Update(ctx context.Context, r Rollouts) (StepRecord, error) {
	a.calls = append(a.calls, "update")
	return a.Algorithm.Update(ctx, r)
}
func (a *tracing) Stop(ctx context.Context) {
	a.calls = append(a.calls, "stop")
	a.Algorithm.Stop(ctx)
}

func TestOwnAlgorithm(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	o := Options{Env: "planpath", EnvConfig: envs.Config{Width: 5, Height: 5, TurnBudget: 3}, PerRole: true, Steps: 2, K: 2, Envs: 2, Seed: 5, Model: ModelOptions{Layers: 1, Width: 16, Heads: 2}, Eval: EvalOptions{Episodes: 2}}
	inner, err := NewAlgorithm(Options{Algo: "atgrpo"})
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracing{Algorithm: inner}
	o.Algorithm = tr
	res, err := Run(ctx, rt, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"start", "rollout", "update", "rollout", "update", "stop"}
	if !slices.Equal(tr.calls, want) || res.Steps != 2 {
		t.Fatalf("calls %v (steps %d), want %v", tr.calls, res.Steps, want)
	}
	// The same run through the built-in name gives the same evaluations.
	o.Algorithm, o.Algo = nil, "atgrpo"
	again, err := Run(ctx, rt, o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Evals, res.Evals) {
		t.Fatalf("built-in %+v, wrapped %+v", again.Evals, res.Evals)
	}
}

func TestAlgorithmOptionsRefused(t *testing.T) {
	for name, o := range map[string]Options{
		"unknown":          {Algo: "ppo"},
		"joy with filter":  {Algo: "joyagents", ATGRPO: ATGRPOOptions{Filter: "mean", FilterRatio: 0.5}},
		"memory threshold": {Algo: "joyagents", Joy: JoyOptions{Threshold: "median"}},
	} {
		if _, err := NewAlgorithm(o); !errors.Is(err, ErrAlgorithm) {
			t.Errorf("%s: %v, want ErrAlgorithm", name, err)
		}
	}
	if _, err := NewAlgorithm(Options{Algo: "atgrpo", ATGRPO: ATGRPOOptions{Filter: "loudest"}}); err == nil {
		t.Error("an unknown group filter was accepted")
	}
	for _, name := range Algorithms() {
		a, err := NewAlgorithm(Options{Algo: name})
		if err != nil || a.Name() != name {
			t.Errorf("%s: %v, %v", name, a, err)
		}
	}
}
