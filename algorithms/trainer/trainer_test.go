package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"troupe/algorithms/envs"
	"troupe/runtime"
)

func TestRunWritesEverything(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	dir := t.TempDir()
	for _, algo := range []string{"atgrpo", "joyagents"} {
		out := filepath.Join(dir, algo)
		o := Options{Env: "planpath", EnvConfig: envs.Config{Width: 5, Height: 5, TurnBudget: 4}, Algo: algo, PerRole: true, Steps: 2, K: 2, Envs: 2, Seed: 1, CkptEvery: 1, OutDir: out, Model: ModelOptions{Layers: 1, Width: 16, Heads: 2}, Warm: WarmOptions{Episodes: 4, Epochs: 1, Hints: 0.5}, Eval: EvalOptions{Episodes: 3, Every: 1, TestEpisodes: 3}, PPO: PPOOptions{MiniBatch: 2}, Joy: JoyOptions{Memory: true}}
		res, err := Run(ctx, rt, o)
		if err != nil {
			t.Fatal(algo, err)
		}
		if res.Steps != 2 || len(res.Evals) != 3 || res.Policies != 2 || res.Params == 0 || res.TokensPerS <= 0 || res.StepWall <= 0 {
			t.Fatalf("%s: result %+v", algo, res)
		}
		if res.WarmTest == nil || res.FinalTest == nil || res.FinalTest.Greedy.Episodes != 3 || res.FinalTest.Sampled.Episodes != 3 {
			t.Fatalf("%s: test evaluations %+v %+v", algo, res.WarmTest, res.FinalTest)
		}
		if f := res.FinalTest; len(f.GreedySolved) != 3 || len(f.SampledSolved) != 3 || len(res.WarmTest.GreedySolved) != 3 {
			t.Fatalf("%s: per-grid test outcomes %v %v", algo, f.GreedySolved, f.SampledSolved)
		}
		for _, f := range []string{"metrics.jsonl", "curves.png", "curves.svg", "tool/config.json", "planner/config.json", "warm-tool/config.json", "checkpoints/step-00000001/policies/planner/config.json", "checkpoints/step-00000001/policies/planner/optimizer.safetensors", "checkpoints/step-00000002/manifest.json"} {
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Errorf("%s: %v", algo, err)
			}
		}
		f, _ := os.Open(filepath.Join(out, "metrics.jsonl"))
		sc := bufio.NewScanner(f)
		kinds := map[string]int{}
		for sc.Scan() {
			var r StepRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			kinds[r.Kind]++
			if r.Kind == "step" {
				var fields map[string]any
				_ = json.Unmarshal(sc.Bytes(), &fields)
				for _, k := range []string{"clip_frac", "approx_kl", "entropy", "grad_norm", "zero_adv_frac", "tokens_per_s", "step_s"} {
					if _, ok := fields[k]; !ok {
						t.Errorf("%s: step record lacks %s: %s", algo, k, sc.Bytes())
					}
				}
				if r.Trained > 2 && r.OptSteps < 2 {
					t.Errorf("%s: %d samples trained in %d optimiser steps with mini-batches of 2", algo, r.Trained, r.OptSteps)
				}
			}
			if r.Kind == "test" && (r.Split != "test" || r.Episodes != 3 || (r.Decode != "greedy" && r.Decode != "sampled")) {
				t.Errorf("%s: test record %+v", algo, r)
			}
		}
		f.Close()
		if kinds["step"] != 2 || kinds["eval"] != 3 || kinds["eval-greedy"] != 2 || kinds["test"] != 4 {
			t.Fatalf("%s: metrics kinds %v", algo, kinds)
		}
		// Starting from the warm-start checkpoints skips the SFT.
		o.Model.Init, o.OutDir, o.Steps = filepath.Join(out, "warm-"), "", 0
		res2, err := Run(ctx, rt, o)
		if err != nil {
			t.Fatal(err)
		}
		if res2.WarmSuccess != res.WarmSuccess || res2.WarmWall != 0 {
			t.Fatalf("%s: from warm checkpoints %v (wall %v), want %v", algo, res2.WarmSuccess, res2.WarmWall, res.WarmSuccess)
		}
	}
	if _, err := Run(ctx, rt, Options{Algo: "ppo", Steps: 1, Model: ModelOptions{Layers: 1, Width: 16, Heads: 2}, Eval: EvalOptions{Episodes: 1}}); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
}
