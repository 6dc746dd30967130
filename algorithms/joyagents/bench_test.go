package joyagents

import (
	"context"
	"testing"

	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
	"troupe/algorithms/rl/toyenv"
)

// BenchmarkTrainerStepRelay: one JoyAgents-R1 step (4 backbones, G = 8,
// memory on) on Relay with per-role tabular policies.
func BenchmarkTrainerStepRelay(b *testing.B) {
	pa, _ := rl.NewTabular(toyenv.PlannerActions, 0.5, 1, grpo.DefaultConfig())
	pe, _ := rl.NewTabular(toyenv.ExecutorActions, 0.5, 1, grpo.DefaultConfig())
	tr := &Trainer{Config: DefaultConfig(), NewEnv: relayEnv, Policies: rl.PerRole(map[string]rl.Policy{"planner": pa, "executor": pe})}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tr.Step(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSimilarity: trigram Jaccard of two 64-byte observations.
func BenchmarkSimilarity(b *testing.B) {
	x := "planner: grid 5x5 start (0,0) goal (4,3) walls (1,1) (2,3) turn 2"
	y := "planner: grid 5x5 start (0,1) goal (4,3) walls (1,1) (2,2) turn 3"
	for b.Loop() {
		Similarity(x, y)
	}
}
