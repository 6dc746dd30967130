package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/atgrpo"
	"troupe/algorithms/policy/hf"
	"troupe/algorithms/rl"
	"troupe/algorithms/trainer/checkpoint"
	"troupe/runtime"
)

// asyncResumeOptions is resumeOptions with two rollout workers per policy
// and staleness bound k; every checkpoint is kept.
func asyncResumeOptions(k int) Options {
	o := resumeOptions("atgrpo")
	o.Envs, o.KeepCkpts = 4, 0
	o.Async = AsyncOptions{RolloutWorkers: 2, MaxStaleness: k}
	return o
}

// stepRecords returns the steps of dir's metrics.jsonl's step records, in
// file order.
func stepRecords(t *testing.T, dir string) []int {
	t.Helper()
	var steps []int
	for _, m := range readMetricsRaw(t, dir) {
		if m["kind"] == "step" {
			steps = append(steps, int(m["step"].(float64)))
		}
	}
	return steps
}

// optSteps sums the optimiser step counts of a checkpoint's policies.
func optSteps(t *testing.T, ckpt string, names []string) int {
	t.Helper()
	n := 0
	for _, name := range names {
		f, err := hf.Open(filepath.Join(ckpt, policiesDir, name, agent.OptimizerFile))
		if err != nil {
			t.Fatal(err)
		}
		s, err := strconv.Atoi(f.Metadata()["step"])
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		n += s
	}
	return n
}

// checkAsyncResumed checks a resumed asynchronous run in dir whose
// checkpoint of step from held metrics: every step recorded once and in
// order, the metrics up to the checkpoint kept byte for byte, every
// checkpoint verifying, and the optimisers' step counts grown by exactly
// the optimiser steps the step records report (none lost, none twice).
func checkAsyncResumed(t *testing.T, dir string, steps int, kept []byte) {
	t.Helper()
	got := stepRecords(t, dir)
	if len(got) != steps {
		t.Fatalf("step records %v, want 1..%d once each", got, steps)
	}
	for i, s := range got {
		if s != i+1 {
			t.Fatalf("step records %v, want 1..%d once each", got, steps)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil || !bytes.HasPrefix(b, kept) {
		t.Fatalf("metrics.jsonl does not begin with the checkpoint's metrics (%v)", err)
	}
	store := &checkpoint.Store{Dir: filepath.Join(dir, "checkpoints")}
	list, err := store.List()
	if err != nil || len(list) == 0 || list[len(list)-1] != steps {
		t.Fatalf("checkpoints %v (%v), want the last after step %d", list, err, steps)
	}
	for _, s := range list {
		if _, err := checkpoint.Verify(filepath.Join(store.Dir, checkpoint.Name(s))); err != nil {
			t.Fatalf("checkpoint of step %d: %v", s, err)
		}
	}
	names := []string{"planner", "tool"}
	first := filepath.Join(store.Dir, checkpoint.Name(list[0]))
	last := filepath.Join(store.Dir, checkpoint.Name(steps))
	want := 0
	for _, m := range readMetricsRaw(t, dir) {
		if m["kind"] == "step" && int(m["step"].(float64)) > list[0] {
			if v, ok := m["opt_steps"].(float64); ok {
				want += int(v)
			}
		}
	}
	if d := optSteps(t, last, names) - optSteps(t, first, names); d != want || want == 0 {
		t.Fatalf("the optimisers took %d steps from step %d to %d, the step records say %d", d, list[0], steps, want)
	}
}

// TestAsyncResumeAfterKill: a run with rollout workers is SIGKILLed after
// a random (seeded) checkpoint and resumed. With K = 1 it cannot be the
// uninterrupted run (no two asynchronous runs are), but it ends, every
// step is recorded once, the metrics before the checkpoint are kept, every
// checkpoint verifies and no optimiser step is lost or repeated. With
// K = 0 every chunk is sampled by its step's version, so the resumed run
// is the uninterrupted one: same metrics (less timing), same final
// weights.
func TestAsyncResumeAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs training in child processes")
	}
	r := rand.New(rand.NewPCG(34, 5))
	for _, k := range []int{0, 1} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			dir := t.TempDir()
			o := asyncResumeOptions(k)
			var ref Options
			if k == 0 {
				ref = o
				ref.OutDir = filepath.Join(dir, "ref")
				startChild(t, ref).wait(t)
			}
			kill := 2 + r.IntN(o.Steps-3)
			run := o
			run.OutDir = filepath.Join(dir, "run")
			startChild(t, run).killAfter(t, kill)
			store := &checkpoint.Store{Dir: filepath.Join(run.OutDir, "checkpoints")}
			from, _, _, err := store.Latest()
			if err != nil {
				t.Fatal(err)
			}
			kept, err := os.ReadFile(filepath.Join(from, metricsFile))
			if err != nil {
				t.Fatal(err)
			}
			chunks, _ := os.ReadDir(filepath.Join(from, algoDir, asyncChunkDir))

			res := o
			res.Resume, res.OutDir = run.OutDir, run.OutDir
			c := startChild(t, res)
			c.wait(t)
			log := c.output()
			if !strings.Contains(log, "resume: from "+from) || !strings.Contains(log, fmt.Sprintf("restored with %d chunk(s)", len(chunks))) {
				t.Fatalf("killed after step %d: no resume from %s with %d chunks:\n%s", kill, from, len(chunks), log)
			}
			checkAsyncResumed(t, run.OutDir, o.Steps, kept)
			for _, m := range readMetricsRaw(t, run.OutDir) {
				if v, ok := m["resume_s"]; ok {
					t.Logf("K=%d: killed after step %d, resumed from %s with %d queued chunk(s); restart to the end of the first new step: %.2fs", k, kill, filepath.Base(from), len(chunks), v)
				}
			}
			if k == 0 {
				sameRun(t, ref.OutDir, run.OutDir, []string{"planner", "tool"})
			}
		})
	}
}

// TestAsyncRecoverLostLearner: with rollout workers and Recover, a learner
// (policy actor) that crashes mid-run is detected; the run restores its
// last checkpoint (the learner's version and queued chunks with it), the
// workers drop what they sampled for the lost learner, and the run
// replays the steps since. With K = 0 it ends as the run without the
// crash; with K = 1 every step is recorded once and no optimiser step is
// lost or repeated.
func TestAsyncRecoverLostLearner(t *testing.T) {
	for _, k := range []int{0, 1} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			ctx := context.Background()
			rt, err := runtime.Init(ctx, runtime.Address(""))
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Shutdown(context.Background())
			o := asyncResumeOptions(k)
			o.CkptEvery, o.Recover, o.Steps = 2, true, 6
			var ref Options
			if k == 0 {
				ref = o
				ref.OutDir = filepath.Join(t.TempDir(), "ref")
				if _, err := Run(ctx, rt, ref); err != nil {
					t.Fatal(err)
				}
			}
			run := o
			run.OutDir = filepath.Join(t.TempDir(), "crash")
			tr, err := New(ctx, rt, run)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close(context.Background())
			h := tr.Team().Handles["tool"]
			var crashed sync.WaitGroup
			w := &crashWriter{at: 2, crash: func() {
				crashed.Go(func() { actors.Call(ctx, h, (*agent.Policy).Crash, "test: lost learner").Get(ctx) })
			}}
			tr.o.Log = w
			if _, err := tr.Run(ctx); err != nil {
				t.Fatalf("%v\n%s", err, w.buf.String())
			}
			crashed.Wait()
			log := w.buf.String()
			if !strings.Contains(log, "restored step 2 from") || !strings.Contains(log, "rollout workers: learner version 2 restored") {
				t.Fatalf("no recovery from step 2 logged:\n%s", log)
			}
			kept, err := os.ReadFile(filepath.Join(run.OutDir, "checkpoints", checkpoint.Name(2), metricsFile))
			if err != nil {
				t.Fatal(err)
			}
			checkAsyncResumed(t, run.OutDir, o.Steps, kept)
			if k == 0 {
				sameRun(t, ref.OutDir, run.OutDir, []string{"planner", "tool"})
			}
		})
	}
}

// TestAsyncResumeRefusesSyncCheckpoint: a synchronous run's checkpoint is
// not resumed with rollout workers (nor the other way), the option named.
func TestAsyncResumeRefusesSyncCheckpoint(t *testing.T) {
	ctx := context.Background()
	rt := embedded(t)
	o := resumeOptions("atgrpo")
	o.Steps, o.OutDir = 1, t.TempDir()
	if _, err := Run(ctx, rt, o); err != nil {
		t.Fatal(err)
	}
	a := o
	a.Resume, a.Async = o.OutDir, AsyncOptions{RolloutWorkers: 2}
	if _, err := Run(ctx, rt, a); !errors.Is(err, ErrConfigChanged) || !strings.Contains(err.Error(), "option Async.RolloutWorkers was 0, now 2") {
		t.Fatalf("a synchronous checkpoint resumed with rollout workers: %v", err)
	}
}

// TestRolloutWorkersEnvActors: with --env-actors every rollout worker
// steps its chunks in environment hosts of its own; with K = 0 the run is
// the one that steps them in the driver.
func TestRolloutWorkersEnvActors(t *testing.T) {
	ctx := context.Background()
	rt := embedded(t)
	o := asyncOptions(2, 0)
	o.Steps = 2
	local := o
	local.OutDir = filepath.Join(t.TempDir(), "local")
	if _, err := Run(ctx, rt, local); err != nil {
		t.Fatal(err)
	}
	hosted := o
	hosted.OutDir, hosted.EnvActors = filepath.Join(t.TempDir(), "hosted"), 1
	if _, err := Run(ctx, rt, hosted); err != nil {
		t.Fatal(err)
	}
	sameRun(t, local.OutDir, hosted.OutDir, []string{"planner", "tool"})
}

// TestChunkFileRoundTrip: a chunk written by SaveState decodes to itself,
// and chunks that do not belong to the run are refused with ErrChunk.
func TestChunkFileRoundTrip(t *testing.T) {
	c := chunkResult{Step: 5, Chunk: 1, Version: 4, Lane: 0,
		Rolls:   []atgrpo.Rollout{{Env: 2, Turns: 1, Success: true, Nodes: []atgrpo.Node{{Policy: "tool", Prompt: "p"}}}},
		Buffers: map[string][]rl.Sample{"tool": {{Prompt: "p", Group: "env2/tool/t0", UID: "env2", Role: "tool", Reward: 1, Version: 4}}}}
	b, err := encodeChunk(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeChunk(b, 4, 2, 1)
	if err != nil || got.Step != 5 || got.Version != 4 || got.Buffers["tool"][0].Reward != 1 || got.Rolls[0].Nodes[0].Prompt != "p" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name            string
		from            int64
		chunks, maxStal int
	}{
		{"trained already", 6, 2, 1},
		{"chunk out of range", 4, 1, 1},
		{"too stale", 4, 2, 0},
		{"sampled after the checkpoint", 3, 2, 2},
	} {
		if _, err := decodeChunk(b, tc.from, tc.chunks, tc.maxStal); !errors.Is(err, ErrChunk) {
			t.Errorf("%s: %v, want ErrChunk", tc.name, err)
		}
	}
	c.Buffers["tool"][0].Version = 3
	b, _ = encodeChunk(c)
	if _, err := decodeChunk(b, 4, 2, 1); !errors.Is(err, ErrChunk) {
		t.Errorf("a sample of another version: %v, want ErrChunk", err)
	}
}

// FuzzDecodeChunk: any bytes decode to a chunk that belongs to the run or
// fail with ErrChunk, never a panic.
func FuzzDecodeChunk(f *testing.F) {
	b, _ := encodeChunk(chunkResult{Step: 3, Chunk: 1, Version: 2, Buffers: map[string][]rl.Sample{"a": {{Version: 2}}}})
	f.Add(b)
	f.Add([]byte{})
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeChunk(b, 2, 4, 2)
		if err != nil {
			if !errors.Is(err, ErrChunk) {
				t.Fatalf("error %v is not ErrChunk", err)
			}
			return
		}
		if c.Step < 2 || c.Chunk < 0 || c.Chunk >= 4 || c.Version > 2 || c.Step-c.Version > 2 {
			t.Fatalf("accepted %+v", c)
		}
	})
}

// TestAsyncRolloutWorkerRestarted: with Recover, a rollout worker's actor
// that crashes (as when the process hosting it is lost) is restarted by
// the runtime; the worker takes it back, pulls the learner's version again
// and goes on, the learner trains through, and with K = 0 the run is the
// one without the crash.
func TestAsyncRolloutWorkerRestarted(t *testing.T) {
	ctx := context.Background()
	rt := embedded(t)
	o := asyncResumeOptions(0)
	o.Recover, o.Steps = true, 5
	ref := o
	ref.OutDir = filepath.Join(t.TempDir(), "ref")
	if _, err := Run(ctx, rt, ref); err != nil {
		t.Fatal(err)
	}
	run := o
	run.OutDir = filepath.Join(t.TempDir(), "crash")
	tr, err := New(ctx, rt, run)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	var crashed sync.WaitGroup
	w := &crashWriter{at: 2, crash: func() {
		a := tr.algo.(*asyncATGRPO)
		h := a.lanes[0].team.Handles["tool"]
		crashed.Go(func() { actors.Call(ctx, h, (*agent.Policy).Crash, "test: lost rollout worker").Get(ctx) })
	}}
	tr.o.Log = w
	if _, err := tr.Run(ctx); err != nil {
		t.Fatalf("%v\n%s", err, w.buf.String())
	}
	crashed.Wait()
	a := tr.algo.(*asyncATGRPO)
	a.mu.Lock()
	alive, restarts := a.alive, a.lanes[0].restarts
	a.mu.Unlock()
	log := w.buf.String()
	if alive != 2 || restarts != 1 || !strings.Contains(log, "rollout worker 0 restarted") || strings.Contains(log, "recover:") {
		t.Fatalf("%d workers alive, worker 0 taken back %d times (want 2, 1; no learner recovery):\n%s", alive, restarts, log)
	}
	sameRun(t, ref.OutDir, run.OutDir, []string{"planner", "tool"})
}
