package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/envs"
	"troupe/algorithms/trainer/checkpoint"
	"troupe/runtime"
	"troupe/runtime/worker"
)

// childEnv, when set, makes the test binary a training run: its value is
// the run's Options as JSON (resume tests start it and kill it).
const childEnv = "TROUPE_TRAINER_TEST_RUN"

// TestMain turns the test binary into a worker process when a cluster node
// starts it as one, or into a training run for the resume tests.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(worker.EnvVar); ok {
		if _, err := runtime.Init(context.Background()); !errors.Is(err, runtime.ErrWorkerDone) {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if js, ok := os.LookupEnv(childEnv); ok {
		os.Exit(childRun(js))
	}
	os.Exit(m.Run())
}

// childRun runs the training run o (JSON) on an embedded cluster, logging
// to stdout.
func childRun(js string) int {
	var o Options
	if err := json.Unmarshal([]byte(js), &o); err != nil {
		fmt.Fprintln(os.Stderr, "child options:", err)
		return 2
	}
	o.Log = os.Stdout
	ctx := context.Background()
	var opts []runtime.Option
	if os.Getenv("TROUPE_ADDRESS") == "" {
		opts = append(opts, runtime.Address("")) // embedded, whatever the environment
	}
	rt, err := runtime.Init(ctx, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer rt.Shutdown(context.Background())
	if _, err := Run(ctx, rt, o); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	fmt.Println("run done")
	return 0
}

// resumeOptions is a small run of algo: a few seconds on two cores.
func resumeOptions(algo string) Options {
	return Options{Env: "planpath", EnvConfig: envs.Config{Width: 5, Height: 5, TurnBudget: 4}, Algo: algo, PerRole: true,
		Steps: 8, K: 4, Envs: 3, Seed: 3, CkptEvery: 1, KeepCkpts: 3,
		Model: ModelOptions{Layers: 1, Width: 16, Heads: 2}, Warm: WarmOptions{Episodes: 4, Epochs: 1},
		Eval: EvalOptions{Episodes: 3, Every: 2}, PPO: PPOOptions{MiniBatch: 2}, Joy: JoyOptions{Memory: true}}
}

// child is a training run in a child process, its log lines on a channel.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	log   *bytes.Buffer // every line, for failure messages
	mu    sync.Mutex
	done  chan struct{}
	err   error // the process's end, after done
}

// startChild starts the test binary as the run o, with env added to its
// environment; the test's cleanup kills it if it is still running.
func startChild(t *testing.T, o Options, env ...string) *child {
	t.Helper()
	js, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+string(js)), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1024), log: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{c: c}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-c.done
	})
	go func() { // owned by the child: ends with its stdout, then waits for it
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.mu.Lock()
			c.log.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			select {
			case c.lines <- sc.Text():
			default:
			}
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c
}

type lockedWriter struct{ c *child }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.log.Write(b)
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// wait waits for the run to end and fails the test unless it succeeded.
func (c *child) wait(t *testing.T) {
	t.Helper()
	for range c.lines {
	}
	select {
	case <-c.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("run did not end:\n%s", c.output())
	}
	if c.err != nil {
		t.Fatalf("run: %v\n%s", c.err, c.output())
	}
}

// killAfter SIGKILLs the run as soon as it logs that it committed the
// checkpoint of step k, and waits for it to die. It fails the test if the
// run ended on its own first.
func (c *child) killAfter(t *testing.T, k int) {
	t.Helper()
	want := fmt.Sprintf("checkpoint step %d: ", k)
	for line := range c.lines {
		if strings.HasPrefix(line, want) {
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	for range c.lines {
	}
	<-c.done
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the run was not killed after step %d (%v):\n%s", k, c.err, c.output())
	}
}

// timingKey reports the metrics fields that measure time, which differ
// between any two runs.
func timingKey(k string) bool {
	return strings.HasSuffix(k, "_s") || strings.Contains(k, "per_s") || strings.HasPrefix(k, "timeline") || k == "weight_sync"
}

// readMetrics reads metrics.jsonl without its timing fields.
func readMetrics(t *testing.T, dir string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		for k := range m {
			if timingKey(k) {
				delete(m, k)
			}
		}
		out = append(out, m)
	}
	return out
}

// sameRun fails the test unless runs a and b wrote the same metrics (less
// timing) and the same final policies, byte for byte.
func sameRun(t *testing.T, a, b string, names []string) {
	t.Helper()
	ma, mb := readMetrics(t, a), readMetrics(t, b)
	if len(ma) != len(mb) {
		t.Fatalf("%d metrics lines after the resume, %d without a kill", len(mb), len(ma))
	}
	for i := range ma {
		if !reflect.DeepEqual(ma[i], mb[i]) {
			t.Fatalf("metrics line %d differs:\nuninterrupted %v\nresumed       %v", i, ma[i], mb[i])
		}
	}
	for _, n := range names {
		files, err := os.ReadDir(filepath.Join(a, n))
		if err != nil || len(files) == 0 {
			t.Fatalf("final policy %s: %v", n, err)
		}
		for _, f := range files {
			wa, _ := os.ReadFile(filepath.Join(a, n, f.Name()))
			wb, err := os.ReadFile(filepath.Join(b, n, f.Name()))
			if err != nil || !bytes.Equal(wa, wb) {
				t.Fatalf("final %s/%s differs (%v)", n, f.Name(), err)
			}
		}
	}
}

var ckptMs = regexp.MustCompile(`^checkpoint step (\d+): .* \((\d+) ms\)$`)

// TestResumeAfterKill is the exact-resume test: a run killed with SIGKILL
// after a random (seeded) step and resumed writes the rest of its metrics
// and ends with the final weights of a run that was never interrupted, for
// AT-GRPO and JoyAgents-R1 (its memory bank included). In the JoyAgents-R1
// case the newest checkpoint is damaged after the kill, as a torn write
// would leave it: the resume names it, skips it and still ends the same.
func TestResumeAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs training in child processes")
	}
	r := rand.New(rand.NewPCG(34, 4))
	for _, algo := range []string{"atgrpo", "joyagents"} {
		t.Run(algo, func(t *testing.T) {
			dir := t.TempDir()
			o := resumeOptions(algo)
			ref := o
			ref.OutDir = filepath.Join(dir, "ref")
			c := startChild(t, ref)
			c.wait(t)
			var ms []string
			for _, line := range strings.Split(c.output(), "\n") {
				if m := ckptMs.FindStringSubmatch(line); m != nil {
					ms = append(ms, m[2])
				}
			}
			t.Logf("%s: uninterrupted run's checkpoint write times (ms, steps 0..%d): %s", algo, o.Steps, strings.Join(ms, " "))

			// after step 3, JoyAgents-R1's memory holds entries; two steps
			// and the final evaluations are left to kill
			k := 3 + r.IntN(o.Steps-5)
			run := o
			run.OutDir = filepath.Join(dir, "run")
			startChild(t, run).killAfter(t, k)
			store := &checkpoint.Store{Dir: filepath.Join(run.OutDir, "checkpoints")}
			steps, _ := store.List()
			if len(steps) == 0 || steps[len(steps)-1] < k || steps[len(steps)-1] >= o.Steps {
				t.Fatalf("checkpoints %v after a kill after step %d", steps, k)
			}
			resumeFrom := steps[len(steps)-1]
			var damaged string
			if algo == "joyagents" && len(steps) > 1 {
				damaged = filepath.Join(store.Dir, checkpoint.Name(resumeFrom))
				f := filepath.Join(damaged, policiesDir, "planner", agent.OptimizerFile)
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				b[len(b)-1] ^= 0x40
				os.WriteFile(f, b, 0o644)
				resumeFrom = steps[len(steps)-2]
			}

			res := o
			res.Resume, res.OutDir = run.OutDir, run.OutDir
			c = startChild(t, res)
			c.wait(t)
			log := c.output()
			if !strings.Contains(log, fmt.Sprintf("resume: from %s (step %d of %d)", filepath.Join(store.Dir, checkpoint.Name(resumeFrom)), resumeFrom, o.Steps)) {
				t.Fatalf("killed after step %d, checkpoints %v: resumed not from step %d:\n%s", k, steps, resumeFrom, log)
			}
			if damaged != "" && !strings.Contains(log, "resume: skipping damaged checkpoint "+damaged) {
				t.Fatalf("the damaged checkpoint %s is not named:\n%s", damaged, log)
			}
			sameRun(t, ref.OutDir, run.OutDir, []string{"planner", "tool"})
			for _, m := range readMetricsRaw(t, run.OutDir) {
				if v, ok := m["resume_s"]; ok {
					t.Logf("%s: killed after step %d, resumed from step %d; restart to the end of the first new step: %.2fs", algo, k, resumeFrom, v)
				}
			}
		})
	}
}

func readMetricsRaw(t *testing.T, dir string) []map[string]any {
	b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		out = append(out, m)
	}
	return out
}

// TestResumeRefusesChangedConfig: a resume with another learning rate is
// refused, naming the option, and leaves metrics.jsonl as it was; another
// step count is allowed.
func TestResumeRefusesChangedConfig(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	o := resumeOptions("atgrpo")
	o.Steps, o.OutDir = 2, t.TempDir()
	if _, err := Run(ctx, rt, o); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(o.OutDir, "metrics.jsonl"))
	bad := o
	bad.Resume, bad.PPO.LR = o.OutDir, 1e-2
	_, err = Run(ctx, rt, bad)
	if !errors.Is(err, ErrConfigChanged) || !errors.Is(err, ErrResume) || !strings.Contains(err.Error(), "option PPO.LR was 0.0003, now 0.01") {
		t.Fatalf("changed learning rate: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(o.OutDir, "metrics.jsonl"))
	if !bytes.Equal(before, after) {
		t.Fatal("a refused resume changed metrics.jsonl")
	}
	more := o
	more.Resume, more.Steps = o.OutDir, 3
	res, err := Run(ctx, rt, more)
	if err != nil || res.Steps != 3 {
		t.Fatalf("resume for one more step: %+v %v", res, err)
	}
	steps := 0
	for _, m := range readMetricsRaw(t, o.OutDir) {
		if m["kind"] == "step" {
			steps++
		}
	}
	if steps != 3 {
		t.Fatalf("%d step records after resuming a 2-step run for 3", steps)
	}
}

// crashWriter is a run's log that crashes a policy actor once, when the
// run logs the checkpoint of step at.
type crashWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	at    int
	crash func()
	done  bool
}

func (w *crashWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if !w.done && bytes.HasPrefix(b, []byte("checkpoint step "+strconv.Itoa(w.at)+":")) {
		w.done = true
		w.crash()
	}
	return len(b), nil
}

// TestRecoverLostLearner: a policy actor that crashes mid-run (and is
// restarted by the runtime from its constructor, without what it learnt)
// is detected; the run restores its last checkpoint, replays the steps
// since and ends as a run without the crash did.
func TestRecoverLostLearner(t *testing.T) {
	for _, algo := range []string{"atgrpo", "joyagents"} {
		t.Run(algo, func(t *testing.T) { testRecoverLostLearner(t, algo) })
	}
}

func testRecoverLostLearner(t *testing.T, algo string) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	o := resumeOptions(algo)
	o.CkptEvery, o.Recover = 2, true
	ref := o
	ref.OutDir = filepath.Join(t.TempDir(), "ref")
	if _, err := Run(ctx, rt, ref); err != nil {
		t.Fatal(err)
	}
	tr, err := New(ctx, rt, func() Options { o.OutDir = filepath.Join(t.TempDir(), "crash"); return o }())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close(context.Background())
	h := tr.Team().Handles["tool"]
	var crashed sync.WaitGroup
	w := &crashWriter{at: 2, crash: func() {
		// the crash queues behind the actor's calls in flight and lands
		// in step 3; a caller of the new incarnation sees no error
		crashed.Go(func() { actors.Call(ctx, h, (*agent.Policy).Crash, "test: lost learner").Get(ctx) })
	}}
	tr.o.Log = w
	if _, err := tr.Run(ctx); err != nil {
		t.Fatalf("%v\n%s", err, w.buf.String())
	}
	crashed.Wait()
	log := w.buf.String()
	if !strings.Contains(log, "recover: step ") || !strings.Contains(log, "restored step 2 from") {
		t.Fatalf("no recovery from step 2 logged:\n%s", log)
	}
	if pl, err := tr.Team().Placements(ctx); err != nil || pl["tool"].Restarts != 1 {
		t.Fatalf("the tool policy's restarts: %+v %v", pl["tool"], err)
	}
	sameRun(t, ref.OutDir, tr.o.OutDir, []string{"planner", "tool"})
}

// FuzzDecodeRunState: any bytes decode to a valid state or ErrState, never
// a panic; a decoded state re-encodes to one that decodes the same.
func FuzzDecodeRunState(f *testing.F) {
	f.Add([]byte(`{"format":1,"step":3,"algo":"atgrpo","resumable":true,"options":{"Steps":8,"PPO":{"LR":0.0003}},"result":{"Params":10,"Evals":[{"step":0,"success":0.5,"stderr":0.1,"n":3,"reward":0,"invalid":0}]}}`))
	f.Add([]byte(`{"format":1,"step":0,"algo":"joyagents","options":{}}`))
	f.Add([]byte(`{"format":2,"step":1,"algo":"x","options":[]}`))
	f.Add([]byte(`{"format":1,"step":-1,"algo":"x","options":{}} x`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeRunState(b)
		if err != nil {
			if !errors.Is(err, ErrState) {
				t.Fatalf("error %v is not ErrState", err)
			}
			return
		}
		again, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		st2, err := decodeRunState(again)
		if err != nil || st2.Step != st.Step || st2.Algo != st.Algo {
			t.Fatalf("round trip %+v -> %+v %v", st, st2, err)
		}
	})
}

// TestResumeLoRA: LoRA adapters (one actor per role, and every role's
// adapter on one shared base) resume exactly too: a run stopped after 2
// steps and resumed for 4 ends as a 4-step run.
func TestResumeLoRA(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.Init(ctx, runtime.Address(""))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	for _, shared := range []bool{false, true} {
		o := resumeOptions("atgrpo")
		o.Steps, o.Eval.Every, o.Model.LoRARank, o.Model.SharedBase = 4, 0, 2, shared
		ref := o
		ref.OutDir = filepath.Join(t.TempDir(), "ref")
		if _, err := Run(ctx, rt, ref); err != nil {
			t.Fatal(err)
		}
		part := o
		part.OutDir, part.Steps = filepath.Join(t.TempDir(), "run"), 2
		if _, err := Run(ctx, rt, part); err != nil {
			t.Fatal(err)
		}
		res := o
		res.OutDir, res.Resume = part.OutDir, part.OutDir
		if _, err := Run(ctx, rt, res); err != nil {
			t.Fatalf("shared base %v: %v", shared, err)
		}
		sameRun(t, ref.OutDir, part.OutDir, []string{"planner", "tool"})
	}
}
