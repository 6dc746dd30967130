package envs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"troupe/actors"
	"troupe/algorithms/envs"
	"troupe/runtime"
)

// drive plays a seeded random mix of observations, steps, branches and
// drops on b and returns a transcript of everything it saw, so two Batch
// implementations can be compared call for call.
func drive(t *testing.T, b envs.Batch, seeds []int64) []string {
	t.Helper()
	ctx := context.Background()
	ep, err := b.Reset(ctx, seeds)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	moves := []string{"U", "D", "L", "R", "RR", "x", "UL"}
	var log []string
	refs, states := ep.Refs, ep.States
	log = append(log, fmt.Sprint(ep.Roles, states))
	for round := 0; round < 6; round++ {
		for _, role := range ep.Roles {
			obs, err := b.Observe(ctx, refs, role)
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprint(obs))
			acts := make([][]string, len(refs))
			for i := range acts {
				for j := 0; j < 3; j++ {
					acts[i] = append(acts[i], moves[r.IntN(len(moves))])
				}
			}
			kids, res, err := b.Branch(ctx, refs, role, acts)
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprint(res))
			// Continue from a random branch, drop the rest and the parent.
			var drop []envs.Ref
			for i := range refs {
				c := r.IntN(len(kids[i]))
				drop = append(drop, refs[i])
				for j, k := range kids[i] {
					if j != c {
						drop = append(drop, k)
					}
				}
				refs[i], states[i] = kids[i][c], res[i][c].State
			}
			if err := b.Drop(ctx, drop); err != nil {
				t.Fatal(err)
			}
			one := make([]string, len(refs))
			for i := range one {
				one[i] = moves[r.IntN(len(moves))]
			}
			st, err := b.Step(ctx, refs, role, one)
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, fmt.Sprint(st))
		}
	}
	return log
}

// TestPoolMatchesLocalBatch: three environment host actors on the embedded
// cluster give exactly the transcript of the in-process batch, and hold
// only the live instances (branches dropped).
func TestPoolMatchesLocalBatch(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	seeds := []int64{11, 12, 13, 14, 15, 16, 17}
	local := envs.NewLocalBatch(func(_ int, seed int64) (envs.Env, error) { return envs.New("planpath-5x5", envs.Config{}, seed) })
	want := drive(t, local, seeds)
	pool, err := envs.SpawnPool(ctx, rt, 3, envs.HostConfig{Env: "planpath-5x5"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Kill(context.Background())
	got := drive(t, pool, seeds)
	if !reflect.DeepEqual(got, want) {
		for i := range want {
			if i >= len(got) || got[i] != want[i] {
				t.Fatalf("transcripts differ at %d:\n got %v\nwant %v", i, got[min(i, len(got)-1)], want[i])
			}
		}
		t.Fatalf("transcript lengths %d, %d", len(got), len(want))
	}
	total := 0
	for _, h := range pool.Hosts {
		n, err := actors.Call(ctx, h, (*envs.Host).Len, struct{}{}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != len(seeds) || local.Len() != len(seeds) {
		t.Fatalf("live instances: pool %d, local %d; want %d", total, local.Len(), len(seeds))
	}
}

func TestBatchErrors(t *testing.T) {
	ctx := context.Background()
	b := envs.NewLocalBatch(func(_ int, seed int64) (envs.Env, error) { return envs.New("planpath", envs.Config{}, seed) })
	ep, err := b.Reset(ctx, []int64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Observe(ctx, []envs.Ref{{ID: 7}}, "planner"); !errors.Is(err, envs.ErrInstance) {
		t.Errorf("unknown instance: %v", err)
	}
	if _, err := b.Step(ctx, ep.Refs, "planner", []string{"U"}); !errors.Is(err, envs.ErrInstance) {
		t.Errorf("mismatched actions: %v", err)
	}
	if _, _, err := b.Branch(ctx, ep.Refs[:1], "planner", nil); !errors.Is(err, envs.ErrInstance) {
		t.Errorf("mismatched branches: %v", err)
	}
	if _, err := b.Reset(ctx, nil); !errors.Is(err, envs.ErrInstance) {
		t.Errorf("reset without seeds: %v", err)
	}
	// A reset sweeps the old instances away.
	if _, err := b.Reset(ctx, []int64{3}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Observe(ctx, ep.Refs[1:], "planner"); !errors.Is(err, envs.ErrInstance) {
		t.Errorf("instance after reset: %v", err)
	}
	fixed, _, err := envs.LocalOf([]envs.Env{b.Env(envs.Ref{ID: 0})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fixed.Reset(ctx, []int64{1}); !errors.Is(err, envs.ErrInstance) {
		t.Errorf("reset of a wrapped batch: %v", err)
	}
	if _, err := envs.NewHost(ctx, envs.HostConfig{Env: "nope"}); !errors.Is(err, envs.ErrUnknownEnv) {
		t.Errorf("unknown env: %v", err)
	}
	if _, err := (&envs.Pool{Hosts: make([]actors.Handle[envs.Host], 1)}).Observe(ctx, []envs.Ref{{Host: 3}}, "planner"); !errors.Is(err, envs.ErrInstance) {
		t.Errorf("ref to a host outside the pool: %v", err)
	}
}
