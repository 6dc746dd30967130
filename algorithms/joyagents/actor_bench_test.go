package joyagents

import (
	"context"
	"fmt"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
	"troupe/runtime"
)

// BenchmarkStepEnvActors: one JoyAgents-R1 step on Plan-Path 6x6 (4
// backbones, G = 6, no memory, per-role tabular policies, so the
// environments are most of the work) with the environments stepped in the
// driver and hosted by 1 or 2 environment actors on the embedded cluster:
// the cost of the actor path where policies are nearly free.
func BenchmarkStepEnvActors(b *testing.B) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	ecfg := envs.Config{Width: 6, Height: 6}
	for _, hosts := range []int{0, 1, 2} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			m := map[string]rl.Policy{}
			for _, role := range []string{"planner", "tool"} {
				p, _ := rl.NewTabular([]string{"U", "D", "L", "R"}, 0.5, 1, grpo.DefaultConfig())
				m[role] = p
			}
			cfg := DefaultConfig()
			cfg.G, cfg.Envs, cfg.MaxTurns, cfg.UseMemory = 6, 4, 12, false
			tr := &Trainer{Config: cfg, Policies: rl.PerRole(m), NewEnv: func(_ int, seed int64) (envs.Env, error) { return envs.New("planpath", ecfg, seed) }}
			if hosts > 0 {
				pool, err := envs.SpawnPool(ctx, rt, hosts, envs.HostConfig{Env: "planpath", Config: ecfg})
				if err != nil {
					b.Fatal(err)
				}
				defer pool.Kill(context.Background())
				tr.Envs = pool
			}
			for b.Loop() {
				if _, err := tr.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
