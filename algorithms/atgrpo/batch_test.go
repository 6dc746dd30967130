package atgrpo

import (
	"context"
	"reflect"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
	"troupe/runtime"
)

// TestBatchMatches: tree sampling over environment host actors (an
// envs.Pool of three on the embedded cluster) and over a LocalBatch gives
// exactly TreeRollouts' rollouts and buffers, for seeded tabular policies
// on Plan-Path.
func TestBatchMatches(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	ecfg := envs.Config{Width: 5, Height: 5, TurnBudget: 5}
	seeds := []int64{21, 22, 23, 24, 25}
	cfg := DefaultConfig()
	cfg.K, cfg.Envs, cfg.MaxTurns, cfg.Seed = 3, len(seeds), 5, 4
	pols := func() *Policies {
		m := map[string]rl.Policy{}
		for _, role := range []string{"planner", "tool"} {
			p, err := rl.NewTabular([]string{"U", "D", "L", "R", "?"}, 1, 1, grpo.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			m[role] = p
		}
		return PerRole(m)
	}
	newEnv := func(_ int, seed int64) (envs.Env, error) { return envs.New("planpath", ecfg, seed) }
	es := make([]envs.Env, len(seeds))
	for i, s := range seeds {
		es[i], _ = newEnv(i, s)
	}
	wantR, wantB, err := TreeRollouts(ctx, cfg, pols(), es, 2)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := envs.SpawnPool(ctx, rt, 3, envs.HostConfig{Env: "planpath", Config: ecfg})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Kill(context.Background())
	for name, b := range map[string]envs.Batch{"local": envs.NewLocalBatch(newEnv), "pool": pool} {
		ep, err := b.Reset(ctx, seeds)
		if err != nil {
			t.Fatal(err)
		}
		gotR, gotB, err := TreeRolloutsBatch(ctx, cfg, pols(), b, ep, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotR, wantR) || !reflect.DeepEqual(gotB, wantB) {
			t.Fatalf("%s: rollouts differ from TreeRollouts:\n got %+v\nwant %+v", name, gotR, wantR)
		}
	}
	nodes := 0
	for _, r := range wantR {
		nodes += len(r.Nodes)
	}
	if nodes < 2*len(seeds) {
		t.Fatalf("only %d nodes", nodes)
	}
	if _, _, err := TreeRolloutsBatch(ctx, cfg, pols(), pool, envs.Episodes{}, 0); err == nil {
		t.Fatal("no episodes accepted")
	}
}
