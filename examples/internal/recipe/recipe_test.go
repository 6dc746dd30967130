package recipe

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
		o := Options{Env: "planpath", EnvConfig: envs.Config{Width: 5, Height: 5, TurnBudget: 4}, Algo: algo, PerRole: true,
			Layers: 1, Width: 16, Heads: 2, Steps: 2, K: 2, Envs: 2, Seed: 1,
			WarmEpisodes: 4, WarmEpochs: 1, EvalEpisodes: 3, EvalEvery: 1, CkptEvery: 1, OutDir: out}
		res, err := Run(ctx, rt, o)
		if err != nil {
			t.Fatal(algo, err)
		}
		if res.Steps != 2 || len(res.Evals) != 3 || res.Policies != 2 || res.Params == 0 || res.TokensPerS <= 0 {
			t.Fatalf("%s: result %+v", algo, res)
		}
		for _, f := range []string{"metrics.jsonl", "curves.png", "curves.svg", "tool.safetensors", "planner.safetensors", "warm-tool.safetensors", "checkpoints/step0001-planner.safetensors"} {
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
		}
		f.Close()
		if kinds["step"] != 2 || kinds["eval"] != 3 {
			t.Fatalf("%s: metrics kinds %v", algo, kinds)
		}
		// Starting from the warm-start checkpoints skips the SFT.
		o.Init, o.OutDir, o.Steps = filepath.Join(out, "warm-"), "", 0
		res2, err := Run(ctx, rt, o)
		if err != nil {
			t.Fatal(err)
		}
		if res2.WarmSuccess != res.WarmSuccess || res2.WarmWall != 0 {
			t.Fatalf("%s: from warm checkpoints %v (wall %v), want %v", algo, res2.WarmSuccess, res2.WarmWall, res.WarmSuccess)
		}
	}
	if _, err := Run(ctx, rt, Options{Algo: "ppo", Steps: 1, Layers: 1, Width: 16, Heads: 2, EvalEpisodes: 1}); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
}
