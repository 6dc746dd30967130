// Command planpath-joyagents trains the Plan-Path team with JoyAgents-R1
// (node-wise Monte Carlo sampling, marginal-benefit selection of the top-5
// groups by reward variance, memory evolved from the groups and read when an
// agent acts: the retrieved answer as a hint in the prompt, a near-duplicate
// situation answered from memory without sampling, in training and in
// evaluation) on the embedded cluster: the per-role policies and the memory
// are actors, and each update step is one run of a compiled actor graph
// (the selected agents' policy actors train in parallel while the memory
// actor evolves); --env-actors N also hosts the environments in N
// environment actors (the same run, at the same CPU cost). The warm start
// is planpath-atgrpo's with 30% of the examples shown with a memory hint
// (the context is longer by a hint's length), and the evaluations (memory
// read), metrics, plot and checkpoints are as in planpath-atgrpo. The
// policies are the results table's (two Llama-family layers of width 64,
// from scratch with a character tokenizer); the table's joyagents cells run
// 20 steps (half of AT-GRPO's 40), this script 30.
//
//	go run ./examples/planpath-joyagents
//	go run ./examples/planpath-joyagents --topk -1 --memory=false   # all groups, no memory
//	go run ./examples/planpath-joyagents --env-actors 2
//	go run ./examples/planpath-joyagents --env routepath --memory=false --top-frac 0.5   # a master routes each round to sub-agent h or v
package main

import (
	"troupe/algorithms/envs"
	"troupe/algorithms/trainer"
)

func main() {
	trainer.Main("planpath-joyagents", "Plan-Path JoyAgents-R1: node-wise sampling, top-K agent selection and memory.", trainer.Options{
		Name: "planpath 6x6 JoyAgents-R1", Env: "planpath", Algo: "joyagents", PerRole: true,
		Steps: 30, K: 6, Envs: 4, Seed: 1, CkptEvery: 20,
		EnvConfig: envs.Config{Width: 6, Height: 6},
		// The results table's model (its joyagents cells), spelled out: two
		// layers of width 64 and 4 heads of the Llama family, from scratch.
		Model: trainer.ModelOptions{Layers: 2, Width: 64, Heads: 4},
		PPO:   trainer.PPOOptions{LR: 3e-4},
		Joy:   trainer.JoyOptions{Memory: true},
		Warm:  trainer.WarmOptions{Episodes: 800, Epochs: 16, Noise: 0.2, Hints: 0.3},
		Eval:  trainer.EvalOptions{Every: 10, TestEpisodes: 500},
	})
}
