// Command planpath-atgrpo trains a tiny two-agent team (tool + planner) on
// Plan-Path 6×6 with AT-GRPO on the embedded cluster, the policies being
// actors of the Llama family (RMSNorm, RoPE, attention, SwiGLU: the code
// path a pretrained checkpoint takes, here from scratch with a character
// tokenizer; --model DIR for a downloaded checkpoint, --lora-rank R for
// adapters): a warm start on
// expert transcripts, RL with tree sampling and
// per-role policies updating in parallel (a compiled actor graph),
// evaluation on 100 fixed held-out grids before and after, JSONL metrics,
// a PNG plot of the learning curves and checkpoints (Hugging Face model
// directories).
//
//	go run ./examples/planpath-atgrpo          # no flags needed
//	go run ./examples/planpath-atgrpo --help
//
// The default warm start (800 expert episodes, 16 epochs: each policy gets
// as many SFT steps as the results table's shared policy) is the one of the
// table's atgrpo-perrole cell. RL is PPO as verl runs it for PettingLLMs
// (mini-batches of 16 samples, one optimiser step each; --minibatch -1 is
// the former one step per update). Progress and metrics.jsonl show each
// step's clip fraction, approximate KL, gradient norm and share of
// zero-advantage samples. The team is evaluated on 100 validation grids
// (seeds 1000000..: every default was tuned on them) before, during and
// after RL, and on 500 test grids (seeds 3000000..: no decision looked at
// them) before and after, greedy (as the paper decodes) and sampled, with
// standard errors. --size 10 trains on the paper's 10×10 grid instead (the
// context grows to 139 tokens; slower).
//
// Evaluate the result on other grids with
//
//	troupe eval --size 6 --role tool=runs/planpath-atgrpo/tool \
//	    --role planner=runs/planpath-atgrpo/planner
package main

import (
	"troupe/algorithms/envs"
	"troupe/algorithms/trainer"
)

func main() {
	trainer.Main("planpath-atgrpo", "Plan-Path AT-GRPO: a tool agent and a planner agent learn to navigate grids.", trainer.Options{
		Name: "planpath 6x6 AT-GRPO", Env: "planpath", Algo: "atgrpo", PerRole: true, Steps: 40,
		K: 4, Envs: 8, Seed: 1, CkptEvery: 20,
		EnvConfig: envs.Config{Width: 6, Height: 6},
		PPO:       trainer.PPOOptions{LR: 3e-4},
		Warm:      trainer.WarmOptions{Episodes: 800, Epochs: 16, Noise: 0.2},
		Eval:      trainer.EvalOptions{Every: 10, TestEpisodes: 500},
	})
}
