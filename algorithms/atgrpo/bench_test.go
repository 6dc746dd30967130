package atgrpo

import (
	"context"
	"testing"

	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
	"troupe/algorithms/rl/toyenv"
)

// BenchmarkTrainerStepRelay: one AT-GRPO step (8 envs, K = 4, per-role
// tabular policies) on Relay: the algorithm's own overhead around trivial
// policies and environment.
func BenchmarkTrainerStepRelay(b *testing.B) {
	pa, _ := rl.NewTabular(toyenv.PlannerActions, 0.5, 1, grpo.DefaultConfig())
	pe, _ := rl.NewTabular(toyenv.ExecutorActions, 0.5, 1, grpo.DefaultConfig())
	tr := &Trainer{Config: DefaultConfig(), NewEnv: relayEnv, Policies: PerRole(map[string]rl.Policy{"planner": pa, "executor": pe})}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Step(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
