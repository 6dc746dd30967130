// Command chaosjob is the training job the docker chaos tests run on the
// compose cluster while they stop servers, kill workers and cut workers
// off the network: a few policy actors (tiny models from algorithms/agent)
// each train on their own stream of supervised examples, step by step as
// the driver asks, and save a checkpoint every few steps to a directory
// all workers share. A restarted actor resumes from its last checkpoint
// and redoes the steps after it; the driver keeps the job going through
// restarts and reports each one as a JSON line, so a test can check that
// every resume started from the last checkpoint saved.
//
//	go build -tags netgo,osusergo -o /tmp/chaosjob ./deploy/chaosjob
//	troupe submit --address 127.0.0.1:7370 /tmp/chaosjob -- --dir /shared/run1
//
// (or run it anywhere with TROUPE_ADDRESS and TROUPE_TOKEN set).
// Without TROUPE_ADDRESS it runs on the embedded cluster (simulated GPUs:
// TROUPE_SIMULATE_GPUS=dgx-h100).
//
// Output, one JSON object per line on stdout: "start" (actors placed),
// "step" (every actor reached step N), "restart" (an actor came back: its
// incarnation, the step it resumed from and the last checkpoint the driver
// saw it save), "done" (wall time, restarts, steps redone). The exit code
// is 0 only if every actor reached the last step and every resume started
// from the last checkpoint. Its writes to the shared directory go through
// a fence keyed by the actor's epoch (life.go): the recipe for writes
// outside troupe. With --check-lives DIR it checks, instead of running,
// that no write of a replaced incarnation took effect after its successor
// started, and lists the incarnations that ran on fenced off (life.go),
// from a copy of the job's --dir.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"troupe/actors"
	"troupe/algorithms/agent"
	"troupe/algorithms/policy"
	"troupe/runtime"
)

// TrainerConfig configures one trainer actor.
type TrainerConfig struct {
	Name      string // actor name, also the checkpoint file prefix
	Dir       string // checkpoint directory (shared by all workers)
	Seed      uint64
	CkptEvery int // steps between checkpoints
	Batch     int // examples per step
	Width     int // the model's width (2 layers, 2 heads of width/2, an even size)
}

// Trainer is a policy actor trained by supervised steps that checkpoints
// itself and resumes from its last checkpoint when it is restarted.
type Trainer struct {
	cfg      TrainerConfig
	pol      *agent.Policy
	step     int // optimiser steps done
	resumed  int // the step this incarnation started from
	lastCkpt int // the step of the last checkpoint saved (or loaded)
	fence    *fence
}

// StepResult is what Step reports.
type StepResult struct {
	Step        int     `json:"step"`
	Loss        float64 `json:"loss"`
	Incarnation int     `json:"inc"`
	ResumedFrom int     `json:"resumed_from"`
	LastCkpt    int     `json:"last_ckpt"`
	Node        string  `json:"node"`
}

// latestFile names the file that records the last complete checkpoint
// ("<step> <file>"), written atomically after the checkpoint itself.
func latestFile(cfg TrainerConfig) string { return filepath.Join(cfg.Dir, cfg.Name+".latest") }

// NewTrainer builds a trainer, from its last checkpoint if there is one.
func NewTrainer(ctx context.Context, cfg TrainerConfig) (*Trainer, error) {
	if cfg.Name == "" || cfg.Dir == "" || cfg.CkptEvery < 1 || cfg.Batch < 1 || cfg.Width < 4 || cfg.Width%4 != 0 {
		return nil, fmt.Errorf("trainer config %+v: name, dir, ckpt-every ≥ 1, batch ≥ 1 and a width divisible by 4 are required", cfg)
	}
	if err := os.MkdirAll(cfg.Dir, 0o777); err != nil {
		return nil, fmt.Errorf("checkpoint dir: %w", err)
	}
	info, _ := actors.Self(ctx)
	// Claim the actor's fence before reading the last checkpoint: from now
	// on a replaced incarnation still running can publish none.
	t := &Trainer{cfg: cfg, fence: &fence{path: filepath.Join(cfg.Dir, cfg.Name+".fence"), epoch: info.Epoch()}}
	if err := keepLife(cfg, t.fence, info.Node); err != nil {
		return nil, err
	}
	pc := agent.Config{Name: cfg.Name, Seed: cfg.Seed, Model: policy.Config{Layers: 2, Heads: 2, Width: cfg.Width, Context: 16}}
	if b, err := os.ReadFile(latestFile(cfg)); err == nil {
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return nil, fmt.Errorf("%s: malformed %q", latestFile(cfg), b)
		}
		step, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("%s: step %q: %w", latestFile(cfg), f[0], err)
		}
		pc.Checkpoint = filepath.Join(cfg.Dir, f[1])
		t.step, t.resumed, t.lastCkpt = step, step, step
	}
	pol, err := agent.NewPolicy(ctx, pc)
	if err != nil {
		return nil, err
	}
	t.pol = pol
	return t, nil
}

// examples returns the supervised batch of one step: additions written
// out, from a stream that depends on the seed and the step only, so a
// step redone after a restart trains on the same examples.
func (t *Trainer) examples(step int) []agent.Example {
	r := rand.New(rand.NewPCG(t.cfg.Seed, uint64(step)))
	out := make([]agent.Example, t.cfg.Batch)
	for i := range out {
		a, b := r.IntN(50), r.IntN(50)
		out[i] = agent.Example{Prompt: fmt.Sprintf("%d+%d=", a, b), Answer: strconv.Itoa(a + b)}
	}
	return out
}

// Step trains until the actor has done `to` steps (redoing those after its
// last checkpoint if it was restarted), checkpointing every CkptEvery.
func (t *Trainer) Step(ctx context.Context, to int) (StepResult, error) {
	var loss float64
	for t.step < to {
		st, err := t.pol.SFT(ctx, agent.SFTRequest{Examples: t.examples(t.step + 1), Epochs: 1, BatchSize: t.cfg.Batch, LR: 1e-3, Seed: uint64(t.step)})
		if err != nil {
			return StepResult{}, err
		}
		loss = st.LastLoss
		t.step++
		if t.step%t.cfg.CkptEvery == 0 {
			if err := t.checkpoint(ctx); err != nil {
				return StepResult{}, err
			}
		}
	}
	info, _ := actors.Self(ctx)
	return StepResult{Step: t.step, Loss: loss, Incarnation: info.Restarts, ResumedFrom: t.resumed, LastCkpt: t.lastCkpt, Node: info.Node}, nil
}

// checkpoint saves the weights under a name of their own, then records
// them as the latest through the actor's fence: a replaced incarnation's
// record is refused (actors.ErrStaleIncarnation), so the new incarnation
// never resumes from a checkpoint the old one published after it started.
func (t *Trainer) checkpoint(ctx context.Context) error {
	name := fmt.Sprintf("%s-step%04d-e%d", t.cfg.Name, t.step, t.fence.epoch)
	if _, err := t.pol.Save(ctx, agent.SaveRequest{Path: filepath.Join(t.cfg.Dir, name)}); err != nil {
		return err
	}
	_, err := t.fence.do(func() error {
		tmp := latestFile(t.cfg) + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %s\n", t.step, name)), 0o666); err != nil {
			return err
		}
		return os.Rename(tmp, latestFile(t.cfg))
	})
	if err != nil {
		return fmt.Errorf("record checkpoint: %w", err)
	}
	t.lastCkpt = t.step
	return nil
}

// event is one line of the driver's output.
type event struct {
	Event    string         `json:"event"`
	Step     int            `json:"step,omitempty"`
	Actor    string         `json:"actor,omitempty"`
	Result   *StepResult    `json:"result,omitempty"`
	Expected int            `json:"expected_resume,omitempty"`
	Nodes    map[string]int `json:"nodes,omitempty"` // actors per node
	WallMS   int64          `json:"wall_ms,omitempty"`
	Restarts int            `json:"restarts,omitempty"`
	Redone   int            `json:"redone,omitempty"`
	Error    string         `json:"error,omitempty"`
	Dir      string         `json:"dir,omitempty"`  // the driver's working directory
	Job      string         `json:"job,omitempty"`  // TROUPE_JOB_ID under troupe submit
	T        int64          `json:"t_ms,omitempty"` // ms since the job started
}

var outMu sync.Mutex

func emit(e event) {
	b, _ := json.Marshal(e)
	outMu.Lock()
	os.Stdout.Write(append(b, '\n'))
	outMu.Unlock()
}

// member is the driver's view of one trainer.
type member struct {
	name     string
	h        actors.Handle[Trainer]
	inc      int // incarnation of the last answer
	step     int
	lastCkpt int
}

type driver struct {
	rt       runtime.Runtime
	restarts int
	redone   int
	bad      []string // resumes that did not start from the last checkpoint
	mu       sync.Mutex
}

// incarnation returns the committed incarnation of the named actor and
// whether it is dead for good (ok false when the cluster did not answer).
func (d *driver) incarnation(ctx context.Context, name string) (inc int, dead, ok bool) {
	st, err := d.rt.Status(ctx)
	if err != nil {
		return 0, false, false
	}
	found := false
	for _, a := range st.Actors {
		if a.Name != name {
			continue
		}
		if a.State != "DEAD" {
			return a.Restarts, false, true
		}
		inc, dead, found = a.Restarts, true, true
	}
	return inc, dead, found
}

// step brings one trainer to step `to`. A call in flight to an incarnation
// the cluster has replaced (its node was killed or cut off: the connection
// may hang rather than fail) is abandoned as soon as the committed state
// shows a newer incarnation, and the trainer is looked up again by name.
func (d *driver) step(ctx context.Context, m *member, to int) error {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithCancel(ctx)
		fut := actors.Call(cctx, m.h, (*Trainer).Step, to)
		done := make(chan struct{})
		go func() {
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				if inc, _, ok := d.incarnation(cctx, m.name); ok && inc > m.inc {
					cancel() // replaced while we waited
					return
				}
			}
		}()
		res, err := fut.Get(cctx)
		close(done)
		cancel()
		if err == nil {
			if res.Incarnation != m.inc {
				d.mu.Lock()
				d.restarts++
				d.redone += m.step - res.ResumedFrom
				// It resumes from the last checkpoint on disk: the one the
				// driver saw saved, or a later one saved by a call whose
				// answer was lost with the node; never an older one.
				if res.ResumedFrom < m.lastCkpt {
					d.bad = append(d.bad, fmt.Sprintf("%s incarnation %d resumed from step %d, before its checkpoint of step %d", m.name, res.Incarnation, res.ResumedFrom, m.lastCkpt))
				}
				d.mu.Unlock()
				emit(event{Event: "restart", Actor: m.name, Result: &res, Expected: m.lastCkpt})
			}
			m.inc, m.step, m.lastCkpt = res.Incarnation, res.Step, res.LastCkpt
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("trainer %s step %d: %w", m.name, to, ctx.Err())
		}
		// Restarted, replaced or unreachable: look it up again (this waits
		// until the cluster has it alive somewhere).
		emit(event{Event: "retry", Actor: m.name, Step: to, Error: err.Error()})
		lctx, lcancel := context.WithTimeout(ctx, 2*time.Minute)
		h, gerr := actors.GetActor[Trainer](lctx, d.rt, m.name)
		lcancel()
		if gerr != nil {
			if _, dead, ok := d.incarnation(ctx, m.name); ctx.Err() != nil || (ok && dead) {
				return fmt.Errorf("trainer %s is gone: %w (last call: %v)", m.name, gerr, err)
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		m.h = h
	}
}

func main() {
	actors.MustRegister("ChaosTrainer", NewTrainer)
	n := flag.Int("actors", 2, "trainer actors")
	steps := flag.Int("steps", 40, "steps per trainer")
	every := flag.Int("ckpt-every", 5, "steps between checkpoints")
	batch := flag.Int("batch", 16, "examples per step")
	width := flag.Int("width", 32, "model width")
	dir := flag.String("dir", "/shared/chaosjob", "checkpoint directory every worker can reach")
	name := flag.String("name", "trainer", "actor name prefix (names are unique among live actors)")
	hold := flag.String("hold", "", "after the last step, wait until this file (relative: in the working directory) exists before ending the job")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	checkLives := flag.String("check-lives", "", "do not run: check the incarnation lifetimes a job with --name and --actors left in this directory (a copy of its --dir), and exit 1 if a replaced incarnation's write took effect after its successor started")
	flag.Parse()
	if *checkLives != "" {
		fencedOff, err := checkNoOverlap(*checkLives, *name, *n)
		for _, f := range fencedOff {
			fmt.Println(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaosjob:", err)
			os.Exit(1)
		}
		fmt.Println("no actor ran twice: no write of a replaced incarnation took effect after its successor claimed the fence")
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	// Types are registered before Init: in a worker process Init serves
	// them and returns ErrWorkerDone when the node ends the worker.
	rt, err := runtime.Init(ctx)
	if errors.Is(err, runtime.ErrWorkerDone) {
		return
	}
	if err != nil {
		emit(event{Event: "error", Error: "init: " + err.Error()})
		os.Exit(1)
	}
	err = run(ctx, rt, *name, *n, *steps, TrainerConfig{Dir: *dir, CkptEvery: *every, Batch: *batch, Width: *width}, *hold)
	rt.Shutdown(context.Background()) // the job's actors end with it
	if err != nil {
		emit(event{Event: "error", Error: err.Error()})
		os.Exit(1)
	}
}

func run(ctx context.Context, rt runtime.Runtime, prefix string, n, steps int, base TrainerConfig, hold string) error {
	start := time.Now()
	d := &driver{rt: rt}
	ms := make([]*member, n)
	for i := range ms {
		cfg := base
		cfg.Name, cfg.Seed = fmt.Sprintf("%s-%d", prefix, i), uint64(i+1)
		h, err := actors.Spawn[Trainer](ctx, rt, "ChaosTrainer", cfg, actors.Name(cfg.Name), actors.GPUs(1), actors.MaxRestarts(10))
		if err != nil {
			return fmt.Errorf("spawn %s: %w", cfg.Name, err)
		}
		ms[i] = &member{name: cfg.Name, h: h}
	}
	nodes := map[string]int{}
	if st, err := rt.Status(ctx); err == nil {
		for _, a := range st.Actors {
			if a.State != "DEAD" && strings.HasPrefix(a.Name, prefix+"-") {
				nodes[a.Node]++
			}
		}
	}
	wd, _ := os.Getwd()
	emit(event{Event: "start", Nodes: nodes, Dir: wd, Job: os.Getenv("TROUPE_JOB_ID")})
	for s := 1; s <= steps; s++ {
		var wg sync.WaitGroup
		errs := make([]error, len(ms))
		for i, m := range ms {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = d.step(ctx, m, s) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		emit(event{Event: "step", Step: s, T: time.Since(start).Milliseconds()})
	}
	wall := time.Since(start)
	if hold != "" {
		emit(event{Event: "holding"})
		for {
			if _, err := os.Stat(hold); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("holding for %s: %w", hold, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if len(d.bad) > 0 {
		return fmt.Errorf("resumes from before the last checkpoint: %s", strings.Join(d.bad, "; "))
	}
	emit(event{Event: "done", Step: steps, WallMS: wall.Milliseconds(), Restarts: d.restarts, Redone: d.redone})
	return nil
}
