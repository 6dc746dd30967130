package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"troupe/actors"
	"troupe/algorithms/policy"
	"troupe/runtime"
	"troupe/runtime/cluster"
)

// qwen05BAdapterConfig is a policy of the Qwen2.5-0.5B shape (hidden 896,
// 24 layers, 14 heads, 2 key/value heads, MLP 4864) made from scratch with
// the character vocabulary (the embedding holds no adapter) and rank-16
// LoRA adapters on every projection, its base in BF16.
func qwen05BAdapterConfig() Config {
	lora := policy.DefaultLoRA()
	lora.Rank, lora.Alpha = 16, 32
	return Config{Name: "planner", Model: policy.Config{Layers: 24, Heads: 14, Width: 896, Context: 64}, KVHeads: 2, Intermediate: 4864,
		LoRA: lora, BaseBF16: true, Backend: "cpu", Seed: 1}
}

// syncTeams spawns a learner team and n rollout worker teams of cfg's
// policy on rt.
func syncTeams(tb testing.TB, rt actors.Runtime, cfg Config, n int) (*Team, []*Team) {
	tb.Helper()
	ctx := context.Background()
	tc := TeamConfig{Roles: []string{cfg.Name}, PerRole: true, Policy: cfg}
	learner, err := SpawnTeam(ctx, rt, tc)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { learner.Kill(context.Background()) })
	var workers []*Team
	for i := 0; i < n; i++ {
		tc.Named, tc.NamePrefix = true, fmt.Sprintf("rollout%d-", i)
		w, err := SpawnTeam(ctx, rt, tc)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { w.Kill(context.Background()) })
		workers = append(workers, w)
	}
	return learner, workers
}

// syncOnce publishes version v from learner and has every worker pull it,
// all at once.
func syncOnce(ctx context.Context, learner *Team, workers []*Team, v int64) (*Published, error) {
	pub, err := learner.Publish(ctx, v)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() { _, errs[i] = w.Pull(ctx, pub) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return pub, nil
}

// BenchmarkWeightSyncQwen05B is one weight sync of rank-16 adapters of the
// Qwen2.5-0.5B shape (8.8M parameters, 35 MB as float32) from a learner
// actor to 4 rollout worker actors on the embedded runtime: the learner's
// export, put once, and the 4 imports that read it at the same time. The
// target is under 50 ms an op. It holds 5 BF16 bases (about 3.6 GB).
// cpu-ms/op is the process's CPU time (every core) an op, which a loaded
// machine inflates less than the wall time.
//
//	go test ./algorithms/agent -run '^$' -bench 'WeightSyncQwen05B$' -benchtime 20x
func BenchmarkWeightSyncQwen05B(b *testing.B) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	learner, workers := syncTeams(b, rt, qwen05BAdapterConfig(), 4)
	pub, err := syncOnce(ctx, learner, workers, 0) // warm: buffers allocated
	if err != nil {
		b.Fatal(err)
	}
	ws, err := pub.Sets["planner"].Get(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(ws.Bytes()))
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		if _, err := syncOnce(ctx, learner, workers, int64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(ws.Bytes())/1e6, "MB/version")
}

// TestWeightSyncTeams: a learner's published version reaches every worker
// team (versions and weights), small enough for every run of the tests.
func TestWeightSyncTeams(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	cfg := loraConfig()
	cfg.Name = "planner"
	cfg.Intermediate = 40
	learner, workers := syncTeams(t, rt, cfg, 3)
	if _, err := actors.Call(ctx, learner.Handles["planner"], (*Policy).SFT, SFTRequest{Examples: []Example{{"p a01 g22", "R"}}, Epochs: 2, BatchSize: 1, LR: 1e-2}).Get(ctx); err != nil {
		t.Fatal(err)
	}
	want, _ := learner.Weights(ctx)
	if before, _ := workers[0].Weights(ctx); before["planner"].Norm == want["planner"].Norm {
		t.Fatal("the SFT did not move the learner's adapter")
	}
	if _, err := syncOnce(ctx, learner, workers, 5); err != nil {
		t.Fatal(err)
	}
	for i, w := range workers {
		got, _ := w.Weights(ctx)
		if got["planner"].Norm != want["planner"].Norm {
			t.Fatalf("worker %d: adapter norm %v, learner's %v", i, got["planner"].Norm, want["planner"].Norm)
		}
		tl, err := w.Timelines(ctx)
		if err != nil || tl["planner"].Version != 5 || tl["planner"].Sync <= 0 {
			t.Fatalf("worker %d: timeline %+v, %v", i, tl, err)
		}
	}
}

// BenchmarkWeightSyncQwen05BProcesses is BenchmarkWeightSyncQwen05B across
// processes of one host: a two-node loopback cluster, the learner in node
// a's worker process and the 4 rollout workers in node b's, so each pull
// fetches the published set from the learner's process in 1 MiB chunks,
// the 4 at the same time. It holds 5 BF16 bases (about 3.6 GB).
//
//	go test ./algorithms/agent -run '^$' -bench WeightSyncQwen05BProcesses -benchtime 20x
func BenchmarkWeightSyncQwen05BProcesses(b *testing.B) {
	const tok = "weight-sync-bench"
	head := startNode(b, "head", cluster.RoleHead, tok, "node-a", nil)
	startNode(b, "w1", cluster.RoleWorker, tok, "node-b", []string{head.Addr()})
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(head.Addr()))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	waitNodes(b, rt, 2)
	cfg := qwen05BAdapterConfig()
	tc := TeamConfig{Roles: []string{cfg.Name}, PerRole: true, Policy: cfg,
		SpawnOptions: []actors.Option{actors.Resources(map[string]float64{"node-a": 0.1})}}
	learner, err := SpawnTeam(ctx, rt, tc)
	if err != nil {
		b.Fatal(err)
	}
	defer learner.Kill(context.Background())
	var workers []*Team
	for i := 0; i < 4; i++ {
		tc.SpawnOptions = []actors.Option{actors.Resources(map[string]float64{"node-b": 0.1})}
		tc.Named, tc.NamePrefix = true, fmt.Sprintf("rollout%d-", i)
		w, err := SpawnTeam(ctx, rt, tc)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Kill(context.Background())
		workers = append(workers, w)
	}
	if _, err := syncOnce(ctx, learner, workers, 0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := syncOnce(ctx, learner, workers, int64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
}

// waitNodes waits until the cluster has n live nodes.
func waitNodes(tb testing.TB, rt interface {
	Status(context.Context) (runtime.Status, error)
}, n int) {
	tb.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := rt.Status(context.Background())
		alive := 0
		for _, nd := range st.Nodes {
			if nd.State == "alive" {
				alive++
			}
		}
		if err == nil && alive == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("cluster never had %d live nodes: %+v %v", n, st.Nodes, err)
		}
	}
}
