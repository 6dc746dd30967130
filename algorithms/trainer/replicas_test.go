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

// TestRunWithReplicas: a run with 2 data-parallel replicas per policy
// (AT-GRPO and JoyAgents-R1) records every step's collective share and
// every policy's weights hash, and checkpoints as a run of one actor per
// policy does.
func TestRunWithReplicas(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	for _, algo := range []string{"atgrpo", "joyagents"} {
		out := filepath.Join(t.TempDir(), algo)
		o := Options{Env: "planpath", EnvConfig: envs.Config{Width: 5, Height: 5, TurnBudget: 4}, Algo: algo, PerRole: true, Steps: 2, K: 2, Envs: 2, Seed: 1, CkptEvery: 1, OutDir: out,
			Model: ModelOptions{Layers: 1, Width: 16, Heads: 2, Replicas: 2}, Warm: WarmOptions{Episodes: 4, Epochs: 1}, Eval: EvalOptions{Episodes: 2, Every: 2, TestEpisodes: 2}, PPO: PPOOptions{MiniBatch: 2}}
		res, err := Run(ctx, rt, o)
		if err != nil {
			t.Fatal(algo, err)
		}
		if res.Steps != 2 || res.Policies != 2 {
			t.Fatalf("%s: result %+v", algo, res)
		}
		if _, err := os.Stat(filepath.Join(out, "checkpoints/step-00000002/policies/planner/optimizer.safetensors")); err != nil {
			t.Errorf("%s: %v", algo, err)
		}
		f, err := os.Open(filepath.Join(out, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		steps := 0
		for sc.Scan() {
			var r StepRecord
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if r.Kind != "step" {
				continue
			}
			steps++
			if len(r.ReplicaHash) != 2 || r.ReplicaHash["planner"] == "" || r.ReplicaHash["tool"] == "" {
				t.Errorf("%s step %d: replica hashes %v", algo, r.Step, r.ReplicaHash)
			}
			if r.CollectiveFrac <= 0 || r.CollectiveFrac >= 1 {
				t.Errorf("%s step %d: collective share %v", algo, r.Step, r.CollectiveFrac)
			}
			if _, ok := r.Timeline["planner-r1/policy"]; !ok {
				t.Errorf("%s step %d: timeline %v lacks the second replica", algo, r.Step, r.Timeline)
			}
		}
		f.Close()
		if steps != 2 {
			t.Fatalf("%s: %d step records", algo, steps)
		}
	}
}
