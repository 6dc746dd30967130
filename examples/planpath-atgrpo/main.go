// Command planpath-atgrpo trains a tiny two-agent team (tool + planner) on
// Plan-Path with AT-GRPO, on the embedded cluster, with the policies as actors:
// warm start on expert transcripts, RL with tree sampling and per-role
// policies updating in parallel (a compiled actor graph), evaluation on 100
// fixed held-out grids before and after, metrics, a plot and checkpoints.
//
//	go run ./examples/planpath-atgrpo            # defaults: 6x6, per-role policies
//	go run ./examples/planpath-atgrpo --help
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"troupe/algorithms/envs"
	"troupe/examples/internal/recipe"
	"troupe/runtime"
)

func main() {
	o := recipe.Options{Env: "planpath", Algo: "atgrpo"}
	flag.IntVar(&o.Steps, "steps", 40, "AT-GRPO training steps")
	flag.Int64Var(&o.Seed, "seed", 1, "seed for weights, sampling and training environments")
	flag.StringVar(&o.OutDir, "out", "runs/planpath-atgrpo", "output directory (metrics.jsonl, curves.png, checkpoints)")
	size := flag.Int("size", 6, "grid width and height (5..10)")
	rate := flag.Float64("obstacles", 0.22, "obstacle rate")
	shared := flag.Bool("shared", false, "one shared policy for both roles instead of one per role")
	flag.IntVar(&o.K, "k", 4, "branches per (env, role, turn) group")
	flag.IntVar(&o.Envs, "envs", 8, "environments per step")
	flag.IntVar(&o.Layers, "layers", 2, "transformer layers")
	flag.IntVar(&o.Width, "width", 64, "model width")
	lr := flag.Float64("lr", 3e-4, "RL learning rate")
	flag.IntVar(&o.WarmEpisodes, "warm-episodes", 400, "expert episodes for the warm start (0: none)")
	flag.IntVar(&o.WarmEpochs, "warm-epochs", 3, "warm-start passes")
	flag.Float64Var(&o.WarmNoise, "warm-noise", 0.2, "share of transcript actions replaced by random ones (executed, not learned)")
	evalTemp := flag.Float64("eval-temp", 0, "evaluation sampling temperature (0: 1, on-policy)")
	warmLR := flag.Float64("warm-lr", 2e-3, "warm-start learning rate")
	flag.IntVar(&o.EvalEvery, "eval-every", 10, "steps between held-out evaluations")
	flag.IntVar(&o.CkptEvery, "ckpt-every", 20, "steps between checkpoints")
	flag.IntVar(&o.EvalEpisodes, "eval-episodes", 100, "held-out evaluation episodes")
	flag.Parse()
	o.LR = float32(*lr)
	o.EvalTemp = float32(*evalTemp)
	o.WarmLR = float32(*warmLR)
	o.PerRole = !*shared
	o.EnvConfig = envs.Config{Width: *size, Height: *size, ObstacleRate: *rate}
	o.Name = fmt.Sprintf("planpath %dx%d AT-GRPO", *size, *size)
	if o.PerRole {
		o.Name += " per-role"
	} else {
		o.Name += " shared"
	}
	o.Progress, o.Log = os.Stderr, os.Stdout
	ctx := context.Background()
	rt, err := runtime.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "planpath-atgrpo:", err)
		os.Exit(1)
	}
	defer rt.Shutdown(context.Background())
	res, err := recipe.Run(ctx, rt, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "planpath-atgrpo:", err)
		os.Exit(1)
	}
	fmt.Printf("done in %s: held-out success %.0f%% after warm start -> %.0f%% after %d AT-GRPO steps\n",
		res.Wall.Round(1e9), 100*res.WarmSuccess, 100*res.Final.Success, res.Steps)
}
