// Command sudoku-atgrpo trains a reasoner and a verifier on 4×4 Sudoku with
// AT-GRPO on the embedded cluster (per-role policy actors): warm start on
// expert transcripts, RL, held-out evaluation, metrics, plot, checkpoints.
//
//	go run ./examples/sudoku-atgrpo
package main

import (
	"troupe/algorithms/envs"
	"troupe/algorithms/trainer"
)

func main() {
	trainer.Main("sudoku-atgrpo", "Sudoku 4x4 AT-GRPO: a reasoner proposes fills, a verifier checks them.", trainer.Options{
		Name: "sudoku4 AT-GRPO", Env: "sudoku4", Algo: "atgrpo", PerRole: true, Steps: 30, K: 4,
		Envs: 8, Seed: 1, CkptEvery: 20,
		EnvConfig: envs.Config{Holes: 6},
		PPO:       trainer.PPOOptions{LR: 3e-4},
		Warm:      trainer.WarmOptions{Episodes: 600, Epochs: 6, Noise: 0.2},
		Eval:      trainer.EvalOptions{Every: 10},
	})
}
