package agent

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"troupe/actors"
	"troupe/algorithms/atgrpo"
	"troupe/algorithms/envs"
	"troupe/algorithms/joyagents"
	"troupe/algorithms/rl"
	"troupe/runtime"
)

// teamRun is what a team run reports for comparison.
type teamRun struct {
	steps []atgrpo.StepStats
	w     map[string]WeightStats
	pids  map[string]int              // every actor's process, by replica key
	where map[string]actors.ActorInfo // by replica key
}

// runReplicatedTeam trains a team of n replicas per policy for two
// AT-GRPO steps on rt (after a warm start) and checks, every step, that
// the replicas of each policy hold the same weights.
func runReplicatedTeam(t *testing.T, rt runtime.Runtime, tc TeamConfig, n int) teamRun {
	t.Helper()
	ctx := context.Background()
	tc.Replicas = n
	team, err := SpawnTeam(ctx, rt, tc)
	if err != nil {
		t.Fatal(err)
	}
	defer team.Kill(context.Background())
	if got := team.Replicas(); got != max(n, 1) {
		t.Fatalf("team has %d replicas per policy, want %d", got, n)
	}
	ex, _, err := envs.Transcripts("planpath-5x5", envs.Config{}, []int64{1, 2}, envs.TranscriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := team.SFT(ctx, ex, SFTRequest{Epochs: 1, BatchSize: 8, LR: 1e-3}); err != nil {
		t.Fatal(err)
	}
	tr := &ATGRPO{Config: atgrpoConfig(), Team: team, NewEnv: func(i int, seed int64) (envs.Env, error) {
		return envs.New("planpath-5x5", envs.Config{TurnBudget: 3}, seed)
	}}
	var r teamRun
	for range 2 {
		st, err := tr.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Updates) == 0 {
			t.Fatalf("step %d trained no policy: %+v", len(r.steps), st)
		}
		for name, u := range st.Updates {
			if u.OptSteps == 0 || u.Tokens == 0 {
				t.Fatalf("step %d: policy %s took no step: %+v", len(r.steps), name, u)
			}
		}
		r.steps = append(r.steps, st)
		hs, err := team.ReplicaHashes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n > 1 && len(hs) != len(team.Actors()) {
			t.Fatalf("replica hashes %v for actors %v", hs, team.Actors())
		}
		for key, h := range hs {
			for i := range h {
				if h[i] != h[0] || h[0] == 0 {
					t.Fatalf("policy %s: replica hashes %x", key, h)
				}
			}
		}
	}
	if r.w, err = team.Weights(ctx); err != nil {
		t.Fatal(err)
	}
	r.pids = map[string]int{}
	for key, h := range team.allActors() {
		if r.pids[key], err = actors.Call(ctx, h, (*Policy).Pid, struct{}{}).Get(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r.where, err = team.Placements(ctx); err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		tl, err := team.Timelines(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for key := range team.Actors() {
			if tl[replicaName(key, 1)].Collective <= 0 || tl[key].Collective <= 0 {
				t.Fatalf("timelines %+v: replicas of %s spent no time in collectives", tl, key)
			}
		}
	}
	return r
}

// closeStats reports whether two steps' statistics agree to float
// tolerance (the replicas sum their gradients in another order).
func closeStats(a, b atgrpo.StepStats) bool {
	return a.Groups == b.Groups && a.Samples == b.Samples && closeUpdates(a.Updates, b.Updates)
}

func closeUpdates(a, b map[string]rl.UpdateStats) bool {
	if len(a) != len(b) {
		return false
	}
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-4*(1+math.Abs(y)) }
	for name, u := range a {
		v, ok := b[name]
		if !ok || u.OptSteps != v.OptSteps || u.Samples != v.Samples || u.Tokens != v.Tokens ||
			!near(u.Loss, v.Loss) || !near(u.GradNorm, v.GradNorm) || !near(u.Entropy, v.Entropy) || !near(u.ApproxKL, v.ApproxKL) {
			return false
		}
	}
	return true
}

// TestTeamReplicasMatchOneActor: on the embedded cluster, a team whose
// policies are 2 data-parallel replicas each (actors in a collective
// group, formed by SpawnTeam) trains as the team of one actor per policy
// does, to float tolerance: per-role policies, LoRA adapters, and LoRA
// adapters on a shared base.
func TestTeamReplicasMatchOneActor(t *testing.T) {
	rt := initRT(t)
	env, _ := envs.New("planpath-5x5", envs.Config{}, 1)
	for _, c := range []struct {
		name string
		tc   TeamConfig
	}{
		{"per-role", TeamConfig{Roles: env.Roles(), PerRole: true, Policy: tinyConfig()}},
		{"shared", TeamConfig{Roles: env.Roles(), Policy: tinyConfig()}},
		{"lora", TeamConfig{Roles: env.Roles(), PerRole: true, Policy: loraConfig()}},
		{"shared-base", TeamConfig{Roles: env.Roles(), PerRole: true, SharedBase: true, Policy: loraConfig()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.tc.Policy.MaxNewTokens = 2
			c.tc.Policy.MiniBatch = 4
			one, two := runReplicatedTeam(t, rt, c.tc, 1), runReplicatedTeam(t, rt, c.tc, 2)
			for i := range one.steps {
				if !closeStats(one.steps[i], two.steps[i]) {
					t.Fatalf("step %d: one actor %+v\n2 replicas %+v", i, one.steps[i], two.steps[i])
				}
			}
			for name, w := range one.w {
				v := two.w[name]
				if w.Steps != v.Steps || math.Abs(w.Norm-v.Norm) > 1e-4*w.Norm || w.Steps < 2 {
					t.Fatalf("%s: one actor %+v, 2 replicas %+v", name, w, v)
				}
			}
		})
	}
}

// TestTeamReplicasPlacedTogether: on a simulated machine of two NVLink
// islands of four GPUs, with three GPUs of the first island taken, two
// one-GPU replicas are placed through one packed placement group (a bundle
// each) on the other island (the best-connected pair), not on the free GPU
// left in the first island and one in the second.
func TestTeamReplicasPlacedTogether(t *testing.T) {
	ctx := context.Background()
	rt := initRT(t, runtime.SimulateGPUs("2x4-nvlink"))
	hog, err := actors.Spawn[Policy](ctx, rt, TypeName, tinyConfig(), actors.GPUs(3))
	if err != nil {
		t.Fatal(err)
	}
	defer actors.Kill(context.Background(), hog)
	info, err := actors.Call(ctx, hog, (*Policy).Placement, struct{}{}).Get(ctx)
	if err != nil || len(info.GPUs) != 3 {
		t.Fatalf("3-GPU actor placed on %v (%v)", info.GPUs, err)
	}
	island := func(g int) int { return g / 4 }
	taken := island(info.GPUs[0])
	pc := tinyConfig()
	team, err := SpawnTeam(ctx, rt, TeamConfig{Roles: []string{"planner"}, PerRole: true, Policy: pc, Replicas: 2, SpawnOptions: []actors.Option{actors.GPUs(1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer team.Kill(context.Background())
	pl, err := team.Placements(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := pl["planner"], pl["planner-r1"]
	if a.PlacementGroup == "" || a.PlacementGroup != b.PlacementGroup || a.Bundle != 0 || b.Bundle != 1 {
		t.Fatalf("replicas in placement groups %q bundle %d and %q bundle %d, want one group's bundles 0 and 1", a.PlacementGroup, a.Bundle, b.PlacementGroup, b.Bundle)
	}
	if len(a.GPUs) != 1 || len(b.GPUs) != 1 || a.GPUs[0] == b.GPUs[0] || island(a.GPUs[0]) != island(b.GPUs[0]) || island(a.GPUs[0]) == taken {
		t.Fatalf("replicas on GPUs %v and %v; the first island (%d) holds %v", a.GPUs, b.GPUs, taken, info.GPUs)
	}
}

// TestJoyAgentsReplicasMatchOneActor: JoyAgents-R1 (its update graph with a
// node per replica, the memory actor beside them) over 2 replicas per
// agent trains as over one actor per agent, to float tolerance, with full
// weights and with LoRA adapters on a shared base.
func TestJoyAgentsReplicasMatchOneActor(t *testing.T) {
	ctx := context.Background()
	rt := initRT(t)
	roles := []string{"planner", "tool"}
	for _, c := range []struct {
		name   string
		pc     Config
		shared bool
	}{{"per-agent", tinyConfig(), false}, {"shared-base", loraConfig(), true}} {
		t.Run(c.name, func(t *testing.T) {
			c.pc.MaxNewTokens, c.pc.MiniBatch = 2, 4
			do := func(n int) ([]joyagents.StepStats, map[string]WeightStats) {
				team, err := SpawnTeam(ctx, rt, TeamConfig{Roles: roles, PerRole: true, SharedBase: c.shared, Policy: c.pc, Replicas: n})
				if err != nil {
					t.Fatal(err)
				}
				defer team.Kill(context.Background())
				ja, err := SpawnJoyAgents(ctx, rt, team, JoyConfig{Config: joyConfig(), Env: "planpath", EnvConfig: joyEnv})
				if err != nil {
					t.Fatal(err)
				}
				defer ja.Kill(context.Background())
				var steps []joyagents.StepStats
				trained := false
				for range 2 {
					st, err := ja.Trainer.Step(ctx)
					if err != nil {
						t.Fatal(err)
					}
					trained = trained || len(st.Updates) > 0
					steps = append(steps, st)
				}
				if !trained {
					t.Fatalf("%d replicas: no step trained an agent", n)
				}
				w, err := team.Weights(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return steps, w
			}
			s1, w1 := do(1)
			s2, w2 := do(2)
			for i := range s1 {
				if s1[i].Groups != s2[i].Groups || !slices.Equal(s1[i].Agents, s2[i].Agents) || !closeUpdates(s1[i].Updates, s2[i].Updates) {
					t.Fatalf("step %d: one actor %+v\n2 replicas %+v", i, s1[i], s2[i])
				}
			}
			for name, w := range w1 {
				if v := w2[name]; w.Steps != v.Steps || math.Abs(w.Norm-v.Norm) > 1e-4*w.Norm {
					t.Fatalf("%s: one actor %+v, 2 replicas %+v", name, w, v)
				}
			}
		})
	}
}

// TestTeamReplicaRestartRecovers: a replica that crashes comes back from
// its constructor, with other weights (in a worker process that died, also
// outside its group); restoring the team's saved state forms the groups
// again and loads every replica, and the team trains on, its replicas
// identical.
func TestTeamReplicaRestartRecovers(t *testing.T) {
	ctx := context.Background()
	rt := initRT(t)
	pc := tinyConfig()
	pc.MaxNewTokens, pc.MiniBatch = 2, 4
	team, err := SpawnTeam(ctx, rt, TeamConfig{Roles: []string{"planner", "tool"}, PerRole: true, Policy: pc, Replicas: 2,
		SpawnOptions: []actors.Option{actors.MaxRestarts(1)}})
	if err != nil {
		t.Fatal(err)
	}
	defer team.Kill(context.Background())
	tr := &ATGRPO{Config: atgrpoConfig(), Team: team, NewEnv: func(i int, seed int64) (envs.Env, error) {
		return envs.New("planpath-5x5", envs.Config{TurnBudget: 3}, seed)
	}}
	if _, err := tr.Step(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := team.SaveState(ctx, dir, nil); err != nil {
		t.Fatal(err)
	}
	h := team.allActors()["planner-r1"]
	if _, err := actors.Call(ctx, h, (*Policy).Crash, "test").Get(ctx); err == nil {
		t.Fatal("crash returned no error")
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pl, err := team.Placements(ctx)
		if err == nil && pl["planner-r1"].Restarts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("planner-r1 never restarted: %+v %v", pl["planner-r1"], err)
		}
	}
	if err := team.LoadState(ctx, dir); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := tr.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	hs, err := team.ReplicaHashes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for key, h := range hs {
		if h[0] != h[1] || h[0] == 0 {
			t.Fatalf("%s: replica hashes %x", key, h)
		}
	}
}
