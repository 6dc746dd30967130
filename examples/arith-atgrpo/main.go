// Command arith-atgrpo trains a reasoner and a tool agent on multi-step
// arithmetic word problems with AT-GRPO on the embedded cluster (per-role
// policy actors): warm start, RL, held-out evaluation, metrics, plot,
// checkpoints.
//
//	go run ./examples/arith-atgrpo
package main

import (
	"troupe/algorithms/envs"
	"troupe/algorithms/trainer"
)

func main() {
	trainer.Main("arith-atgrpo", "Arithmetic AT-GRPO: multi-step word problems solved by a reasoner and a tool agent.", trainer.Options{
		Name: "arith AT-GRPO", Env: "arith", Algo: "atgrpo", PerRole: true, Steps: 30, K: 4,
		Envs: 8, Seed: 1, CkptEvery: 20,
		EnvConfig: envs.Config{Steps: 2},
		PPO:       trainer.PPOOptions{LR: 3e-4},
		Warm:      trainer.WarmOptions{Episodes: 600, Epochs: 6, Noise: 0.2},
		Eval:      trainer.EvalOptions{Every: 10},
	})
}
