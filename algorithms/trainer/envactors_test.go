package trainer

import (
	"context"
	"reflect"
	"testing"

	"troupe/algorithms/envs"
	"troupe/runtime"
)

// TestEnvActorsSameRun: --env-actors 2 gives the same held-out evaluations
// as stepping the environments in the driver, for both algorithms.
func TestEnvActorsSameRun(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	for _, algo := range []string{"atgrpo", "joyagents"} {
		o := Options{Env: "planpath", EnvConfig: envs.Config{Width: 5, Height: 5, TurnBudget: 3}, Algo: algo, PerRole: true, Steps: 2, K: 6, Envs: 2, Seed: 3, Model: ModelOptions{Layers: 1, Width: 16, Heads: 2}, Joy: JoyOptions{Memory: true}, Eval: EvalOptions{Episodes: 4, Every: 1}}
		want, err := Run(ctx, rt, o)
		if err != nil {
			t.Fatal(algo, err)
		}
		o.EnvActors = 2
		got, err := Run(ctx, rt, o)
		if err != nil {
			t.Fatal(algo, err)
		}
		if !reflect.DeepEqual(got.Evals, want.Evals) {
			t.Fatalf("%s: evaluations with environment actors %+v, in the driver %+v", algo, got.Evals, want.Evals)
		}
	}
}
