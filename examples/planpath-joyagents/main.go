// Command planpath-joyagents trains the Plan-Path team with JoyAgents-R1
// (node-wise Monte Carlo sampling, marginal-benefit top-K selection, memory
// evolution) on the embedded cluster: the per-role policies and the memory
// are actors, and each update step is one run of a compiled actor graph
// (the selected agents' policy actors train in parallel while the memory
// actor evolves); --env-actors N also hosts the environments in N
// environment actors (the same run, at the same CPU cost). The
// same warm start, held-out evaluation, metrics, plot and checkpoints as
// planpath-atgrpo.
//
//	go run ./examples/planpath-joyagents
//	go run ./examples/planpath-joyagents --topk 4 --memory=false
//	go run ./examples/planpath-joyagents --env-actors 2
package main

import (
	"troupe/algorithms/envs"
	"troupe/examples/internal/recipe"
)

func main() {
	recipe.Main("planpath-joyagents", "Plan-Path JoyAgents-R1: node-wise sampling, top-K agent selection and memory.", recipe.Options{
		Name: "planpath 6x6 JoyAgents-R1", Env: "planpath", Algo: "joyagents", PerRole: true,
		EnvConfig: envs.Config{Width: 6, Height: 6},
		Steps:     30, K: 6, Envs: 4, LR: 3e-4, Seed: 1,
		JoyMemory:    true,
		WarmEpisodes: 800, WarmEpochs: 8, WarmNoise: 0.2,
		EvalEvery: 10, CkptEvery: 20,
	})
}
