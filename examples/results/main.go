// Command results regenerates docs/results.md: the miniature version of the
// AT-GRPO paper's Plan-Path table, and the JoyAgents-R1 ablations. It
// trains every cell from scratch on the embedded cluster with the recipe of
// examples/planpath-atgrpo (the main job's tiny character-level models of the Llama family, warm start on
// expert transcripts, RL), on Plan-Path 6×6 and 10×10 (the paper's size),
// and reports each on the test range of grids (trainer.TestSeed.., never used
// for a decision), greedy (as the paper decodes) and sampled, with n and the
// standard error, next to the validation range the defaults were tuned on
// and the cell's wall time.
//
//	go run ./examples/results                       # every cell of both sizes (hours on 2 cores)
//	go run ./examples/results --sizes 6 --cells atgrpo-perrole,single
//	go run ./examples/results --tiny                # a few steps of everything: checks the program end to end
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"troupe/algorithms/envs"
	"troupe/algorithms/trainer"
	"troupe/runtime"
)

// cell is one trained configuration.
type cell struct {
	ID   string // "<size>-<name>", e.g. "6x6-atgrpo-perrole"
	Name string // the size-independent part, e.g. "atgrpo-perrole"
	Size int
	Desc string
	Opt  trainer.Options
	// InitFrom names an earlier cell (same size) whose warm-start
	// checkpoints this cell starts from (same regime and settings, so the
	// same warm start).
	InitFrom string
	// Versus names the cell an ablation is compared with ("" for none).
	Versus string
}

// outcome is what a cell produced.
type outcome struct {
	ID     string
	Name   string
	Size   int
	Desc   string
	Versus string
	Result trainer.Result
	Opt    trainer.Options
}

// settings are the knobs every cell shares.
type settings struct {
	Steps                    int
	Seed                     int64
	Layers, Width            int
	LR                       float32
	WarmEpisodes, WarmEpochs int // per-role epochs; a shared policy gets half (the same SFT steps)
	EvalEpisodes             int
	TestEpisodes             int
	EvalEvery                int
}

func defaultSettings() settings {
	return settings{Steps: 40, Seed: 1, Layers: 2, Width: 64, LR: 3e-4, WarmEpisodes: 800, WarmEpochs: 16,
		EvalEpisodes: 100, TestEpisodes: 1000, EvalEvery: 10}
}

// tinySettings run every cell in seconds to check the program end to end
// (the numbers mean nothing).
func tinySettings() settings {
	return settings{Steps: 2, Seed: 1, Layers: 1, Width: 16, LR: 3e-4, WarmEpisodes: 12, WarmEpochs: 2,
		EvalEpisodes: 8, TestEpisodes: 16, EvalEvery: 1}
}

func main() {
	s := defaultSettings()
	tiny := flag.Bool("tiny", false, "a few steps of every cell on a tiny model (checks the program end to end; the numbers mean nothing)")
	steps := flag.Int("steps", 0, "RL steps of every AT-GRPO cell (JoyAgents cells run half: each of their steps samples more; 0: 40, or 2 with --tiny)")
	sizesFlag := flag.String("sizes", "6,10", "Plan-Path grid sizes (W = H), comma-separated")
	cellsFlag := flag.String("cells", "", "comma-separated cells to run, by name (all sizes) or id (<size>x<size>-<name>) (default all): "+strings.Join(cellNames(cells(s, 6)), ", "))
	out := flag.String("out", "runs/results", "directory for every cell's metrics, plots and checkpoints")
	doc := flag.String("doc", "docs/results.md", "markdown file to write")
	seed := flag.Int64("seed", 0, "seed of every cell (0: 1)")
	layers := flag.Int("layers", 0, "transformer layers of every policy (0: 2, the main job's)")
	width := flag.Int("width", 0, "model width of every policy (0: 64, the main job's)")
	lr := flag.Float64("lr", 0, "RL learning rate (0: 3e-4)")
	testN := flag.Int("test-episodes", 0, "test-range episodes per cell and decoding (0: 1000, or 16 with --tiny)")
	flag.StringVar(&plotsDir, "plots", plotsDir, "directory that receives a copy of every cell's plot (linked from the markdown)")
	notes := flag.String("notes", "examples/results/notes.md", "markdown appended to the table (observations written by hand; skipped if missing)")
	jobs := flag.Int("jobs", 1, "cells trained at the same time (a cell starting from another's warm start waits for it); wall times then overlap")
	from := flag.String("from", "", "only rewrite the markdown from a results.json of an earlier run (no training)")
	gpusPer := flag.Float64("gpus-per-policy", -1, "GPUs each policy actor asks for (fractions share a GPU; -1: 1 when the cluster has GPUs, else 0)")
	backend := flag.String("backend", envOr("TROUPE_BACKEND", "auto"), "policies' compute backend: auto (the GPU each was placed on, else the CPU), cpu or cuda (default $TROUPE_BACKEND)")
	flag.Parse()
	if *tiny {
		s = tinySettings()
	}
	if *steps > 0 {
		s.Steps = *steps
	}
	if *seed != 0 {
		s.Seed = *seed
	}
	if *testN > 0 {
		s.TestEpisodes = *testN
	}
	if *layers > 0 {
		s.Layers = *layers
	}
	if *width > 0 {
		s.Width = *width
	}
	if *lr > 0 {
		s.LR = float32(*lr)
	}
	notesFile = *notes
	if *from != "" {
		if err := rewrite(*from, *doc, *out); err != nil {
			fatal(err)
		}
		return
	}
	sizes, err := parseSizes(*sizesFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(2)
	}
	var all []cell
	for _, size := range sizes {
		all = append(all, cells(s, size)...)
	}
	for i := range all {
		all[i].Opt.Model.GPUsPerPolicy, all[i].Opt.Model.Backend = *gpusPer, *backend
	}
	want := map[string]bool{}
	for _, c := range strings.Split(*cellsFlag, ",") {
		if c = strings.TrimSpace(c); c != "" {
			want[c] = true
		}
	}
	for id := range want {
		found := false
		for _, c := range all {
			found = found || c.ID == id || c.Name == id
		}
		if !found {
			fmt.Fprintf(os.Stderr, "results: unknown cell %q (cells: %s; ids: %s)\n", id, strings.Join(cellNames(cells(s, 6)), ", "), strings.Join(cellIDs(all), ", "))
			os.Exit(2)
		}
	}
	ctx := context.Background()
	rt, err := runtime.Init(ctx)
	if errors.Is(err, runtime.ErrWorkerDone) {
		return // this process was a worker
	}
	if err != nil {
		fatal(err)
	}
	defer rt.Shutdown(context.Background())
	start := time.Now()
	var outs []outcome
	done := map[string]bool{}
	// Running a subset of cells keeps the other cells of an earlier run in
	// the same output directory, so cells can be (re)run one at a time.
	var kept []outcome
	if len(want) > 0 {
		if data, err := os.ReadFile(filepath.Join(*out, "results.json")); err == nil {
			var sv saved
			if json.Unmarshal(data, &sv) == nil {
				for _, o := range sv.Outcomes {
					if !want[o.ID] && !want[o.Name] {
						kept = append(kept, o)
					}
				}
			}
		}
	}
	var selected []cell
	for _, c := range all {
		if len(want) == 0 || want[c.ID] || want[c.Name] {
			selected = append(selected, c)
		}
	}
	// finished[id] is closed when cell id of this run has written its
	// checkpoints; a cell starting from another's warm start waits for it.
	finished := map[string]chan struct{}{}
	for _, c := range selected {
		finished[c.ID] = make(chan struct{})
	}
	var (
		mu  sync.Mutex // outs, done, the markdown
		wg  sync.WaitGroup
		sem = make(chan struct{}, max(1, *jobs))
	)
	jobsUsed = max(1, *jobs)
	tinyRun = *tiny
	for _, c := range selected {
		from := ""
		if c.InitFrom != "" {
			from = sizeID(c.Size, c.InitFrom)
		}
		if ch, ok := finished[from]; ok {
			<-ch
		}
		sem <- struct{}{}
		o := c.Opt
		o.OutDir = filepath.Join(*out, c.ID)
		o.Progress, o.Log = os.Stderr, os.Stdout
		if jobsUsed > 1 {
			// Interleaved progress bars are unreadable: cells log lines only,
			// each prefixed with its cell.
			o.Progress, o.Log = nil, &prefixWriter{prefix: "[" + c.ID + "] ", w: os.Stdout}
		}
		if from != "" {
			// Start from that cell's warm start when it ran here (this run
			// or an earlier one); otherwise warm-start from scratch.
			prefix := filepath.Join(*out, from, "warm-")
			mu.Lock()
			ran := done[from]
			mu.Unlock()
			if m, _ := filepath.Glob(prefix + "*"); ran || len(m) > 0 {
				o.Model.Init = prefix
			}
		}
		fmt.Printf("== %s: %s\n", c.ID, c.Desc)
		wg.Add(1)
		o.ActorPrefix = c.ID + "/"
		go func(c cell, o trainer.Options) {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := trainer.Run(ctx, rt, o)
			if err != nil {
				fatal(fmt.Errorf("cell %s: %w", c.ID, err))
			}
			mu.Lock()
			defer mu.Unlock()
			outs = append(outs, outcome{ID: c.ID, Name: c.Name, Size: c.Size, Desc: c.Desc, Versus: c.Versus, Result: res, Opt: o})
			done[c.ID] = true
			close(finished[c.ID])
			// Write after every cell so an interrupted run still leaves a table.
			merged := order(all, append(append([]outcome(nil), kept...), outs...))
			if err := copyPlots(*out, merged); err != nil {
				fatal(err)
			}
			if err := write(*doc, *out, merged, time.Since(start)); err != nil {
				fatal(err)
			}
		}(c, o)
	}
	wg.Wait()
	fmt.Printf("wrote %s (%d cells, %s)\n", *doc, len(outs), time.Since(start).Round(time.Second))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "results:", err)
	os.Exit(1)
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 5 || n > 10 {
			return nil, fmt.Errorf("--sizes: %q is not a Plan-Path size (5..10)", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--sizes: no size given")
	}
	return out, nil
}

// saved is results.json: the outcomes and the total wall time.
type saved struct {
	Outcomes []outcome
	Total    time.Duration
	Jobs     int  // cells trained at the same time
	Tiny     bool // the --tiny check, not a result
}

func rewrite(from, doc, out string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var s saved
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	jobsUsed, tinyRun = max(1, s.Jobs), s.Tiny
	return write(doc, out, s.Outcomes, s.Total)
}

// order sorts outcomes in cell order.
func order(all []cell, outs []outcome) []outcome {
	var res []outcome
	for _, c := range all {
		for _, o := range outs {
			if o.ID == c.ID {
				res = append(res, o)
			}
		}
	}
	return res
}

func cellNames(cs []cell) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func cellIDs(cs []cell) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func sizeID(size int, name string) string { return fmt.Sprintf("%dx%d-%s", size, size, name) }

// cells are the table's configurations for one grid size. Every policy has
// the main job's architecture and every per-role policy the main job's warm
// start (WarmEpochs over its role's transcripts); a shared or single policy
// gets the same number of SFT steps.
func cells(s settings, size int) []cell {
	base := trainer.Options{
		Env: "planpath", EnvConfig: envs.Config{Width: size, Height: size}, Algo: "atgrpo",
		Steps: s.Steps, K: 4, Envs: 8, Seed: s.Seed,
		PPO:   trainer.PPOOptions{LR: s.LR},
		Model: trainer.ModelOptions{Layers: s.Layers, Width: s.Width},
		Warm:  trainer.WarmOptions{Episodes: s.WarmEpisodes, Epochs: s.WarmEpochs, Noise: 0.2},
		Eval:  trainer.EvalOptions{Episodes: s.EvalEpisodes, Every: s.EvalEvery, TestEpisodes: s.TestEpisodes},
	}
	joy := base
	joy.Algo, joy.PerRole, joy.K, joy.Envs, joy.Joy.Memory, joy.Warm.Hints = "joyagents", true, 6, 4, true, 0.3
	joy.Steps = max(1, s.Steps/2)
	with := func(o trainer.Options, f func(*trainer.Options)) trainer.Options { f(&o); return o }
	half := max(1, s.WarmEpochs/2)
	cs := []cell{
		{Name: "single", Desc: "single agent (the planner alone): warm start, then GRPO with turn-wise groups (AT-GRPO's sampler with one agent)",
			Opt: with(base, func(o *trainer.Options) { o.Algo, o.Name = "grpo", "single agent + GRPO" })},
		{Name: "atgrpo-shared", Desc: "tool + planner, one shared policy (warm start of the per-role policies' SFT steps): warm start, then AT-GRPO",
			Opt: with(base, func(o *trainer.Options) { o.Warm.Epochs, o.Name = half, "AT-GRPO shared policy" })},
		{Name: "atgrpo-perrole", Desc: "tool + planner, one policy per role: the main job (warm start, then AT-GRPO)",
			Opt: with(base, func(o *trainer.Options) { o.PerRole, o.Name = true, "AT-GRPO per-role policies" })},
		{Name: "atgrpo-perrole-drmas", Desc: "AT-GRPO per-role with Dr. MAS (advantages per (grid, agent), turns pooled)", InitFrom: "atgrpo-perrole", Versus: "atgrpo-perrole",
			Opt: with(base, func(o *trainer.Options) { o.PerRole, o.DrMAS, o.Name = true, true, "AT-GRPO per-role, Dr. MAS" })},
		{Name: "atgrpo-perrole-filter", Desc: "AT-GRPO per-role with PettingLLMs' low-reward group filter (mean, ratio 0.5: its Plan-Path setting)", InitFrom: "atgrpo-perrole", Versus: "atgrpo-perrole",
			Opt: with(base, func(o *trainer.Options) {
				o.PerRole, o.ATGRPO.Filter, o.ATGRPO.FilterRatio, o.Name = true, "mean", 0.5, "AT-GRPO per-role, group filter mean 0.5"
			})},
		{Name: "atgrpo-perrole-onestep", Desc: "AT-GRPO per-role with one optimiser step on the whole batch (the update before PPO mini-batches: on-policy, the clip never acts)", InitFrom: "atgrpo-perrole", Versus: "atgrpo-perrole",
			Opt: with(base, func(o *trainer.Options) {
				o.PerRole, o.PPO.MiniBatch, o.Name = true, -1, "AT-GRPO per-role, one step per update"
			})},
		{Name: "joyagents", Desc: "JoyAgents-R1, per-role (G = 6, top-5 groups by reward variance, memory read as hints and near-duplicate reuse, pooled 2.5% thresholds); warm start with 30% hinted examples",
			Opt: with(joy, func(o *trainer.Options) { o.Name = "JoyAgents-R1" })},
	}
	for _, a := range []struct {
		name, desc string
		f          func(*trainer.Options)
	}{
		{"joyagents-top1", "top-1 group per step", func(o *trainer.Options) { o.Joy.TopK = 1 }},
		{"joyagents-top2", "top-2 groups per step", func(o *trainer.Options) { o.Joy.TopK = 2 }},
		{"joyagents-all", "all groups (no marginal-benefit selection)", func(o *trainer.Options) { o.Joy.TopK = -1 }},
		{"joyagents-nomem", "no memory (not evolved, not read)", func(o *trainer.Options) { o.Joy.Memory = false }},
		{"joyagents-nohint", "memory without hints (reuse only)", func(o *trainer.Options) { o.Joy.NoHint = true }},
		{"joyagents-noreuse", "memory without reuse (hints only)", func(o *trainer.Options) { o.Joy.NoReuse = true }},
		{"joyagents-groupz", "the paper's per-group μ ± 1.96σ memory rule", func(o *trainer.Options) { o.Joy.Threshold = "group-z" }},
		{"joyagents-perstep", "memory evolved once per step (not during sampling)", func(o *trainer.Options) { o.Joy.MemoryPerStep = true }},
		{"joyagents-drmas", "Dr. MAS advantages (per backbone and agent)", func(o *trainer.Options) { o.DrMAS = true }},
	} {
		cs = append(cs, cell{Name: a.name, Desc: "JoyAgents-R1, " + a.desc, InitFrom: "joyagents", Versus: "joyagents",
			Opt: with(joy, func(o *trainer.Options) { a.f(o); o.Name = "JoyAgents-R1, " + a.desc })})
	}
	for i := range cs {
		cs[i].Size = size
		cs[i].ID = sizeID(size, cs[i].Name)
		cs[i].Opt.Name = fmt.Sprintf("%s (%dx%d)", cs[i].Opt.Name, size, size)
	}
	return cs
}

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// jobsUsed is the number of cells that ran at the same time (for the
// markdown's note on wall times); tinyRun marks a --tiny check.
var (
	jobsUsed = 1
	tinyRun  bool
)

// prefixWriter writes each Write (one log line) behind a prefix, so the
// lines of cells running at the same time stay attributable.
type prefixWriter struct {
	prefix string
	w      io.Writer
}

var logMu sync.Mutex

func (p *prefixWriter) Write(b []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

// notesFile is the hand-written observations appended to the table.
var notesFile = "examples/results/notes.md"

// plotsDir receives a copy of every cell's curves.png (repository-relative,
// linked from the markdown, which lives in docs/).
var plotsDir = "examples/results/plots"

// copyPlots copies every cell's curves.png into plotsDir as <cell>.png.
func copyPlots(out string, outs []outcome) error {
	if err := os.MkdirAll(plotsDir, 0o755); err != nil {
		return err
	}
	for _, o := range outs {
		data, err := os.ReadFile(filepath.Join(out, o.ID, "curves.png"))
		if err != nil {
			continue // a cell without a plot (no output dir) is skipped
		}
		if err := os.WriteFile(filepath.Join(plotsDir, o.ID+".png"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// paper is the AT-GRPO paper's Plan-Path success (Qwen3-1.7B, its 10×10
// grid) for the rows it has.
var paper = map[string]string{
	"single/warm": "5", "single": "11", "atgrpo-shared/warm": "10", "atgrpo-shared": "96", "atgrpo-perrole": "97",
}

// point renders a success with its standard error and n.
func point(p trainer.Point) string {
	return fmt.Sprintf("%s ± %.1f", pct(p.Success), 100*p.StdErr)
}

func write(doc, out string, outs []outcome, total time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Results: Plan-Path, miniature AT-GRPO table and JoyAgents-R1 ablations\n\n")
	if tinyRun {
		fmt.Fprintf(&b, "**This is a `--tiny` check of the program (a 1-layer width-16 model, 2 steps, a handful of episodes): the numbers mean nothing.**\n\n")
	}
	fmt.Fprintf(&b, "Generated by `go run ./examples/results` on %s (total %s). Every cell is trained from scratch on the\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), total.Round(time.Second))
	fmt.Fprintf(&b, "embedded cluster, policies as actors, and evaluated with independent rollouts (one action per turn, no\n")
	fmt.Fprintf(&b, "branching) on the **test range** of grids (seeds %d.., never used for a decision: every default was\n", trainer.TestSeed)
	fmt.Fprintf(&b, "tuned on the validation range, seeds %d..), **greedy** (as the paper decodes) and **sampled** at\n", trainer.ValidationSeed)
	fmt.Fprintf(&b, "temperature 1. Success = the planner reaches the goal within the turn budget; ± is one standard error\n")
	fmt.Fprintf(&b, "√(p(1−p)/n) over the n test grids. Wall time is the cell's own (warm start, RL, evaluations).\n")
	if jobsUsed > 1 {
		fmt.Fprintf(&b, "Cells were trained up to %d at a time (`--jobs`), so a cell's wall time includes the others' load.\n", jobsUsed)
	}
	var sizes []int
	for _, o := range outs {
		if len(sizes) == 0 || sizes[len(sizes)-1] != o.Size {
			sizes = append(sizes, o.Size)
		}
	}
	for _, size := range sizes {
		by := map[string]outcome{}
		var list []outcome
		for _, o := range outs {
			if o.Size == size {
				by[o.Name] = o
				list = append(list, o)
			}
		}
		n := 0
		for _, o := range list {
			if t := o.Result.FinalTest; t != nil {
				n = t.Greedy.Episodes
			}
		}
		fmt.Fprintf(&b, "\n## Plan-Path %d×%d\n\n", size, size)
		fmt.Fprintf(&b, "Test range: n = %d grids per cell and decoding. The paper's column is its Qwen3-1.7B on its 10×10 grid.\n\n", n)
		fmt.Fprintf(&b, "| method | test, greedy | test, sampled | validation (sampled) | paper | policies × params | RL steps | wall time (step) |\n")
		fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---|---:|---:|\n")
		row := func(name, key string, o outcome, warm bool) {
			r := o.Result
			t := r.FinalTest
			val := r.Final.Success
			steps := fmt.Sprint(r.Steps)
			wall := fmt.Sprintf("%s (%.2fs)", r.Wall.Round(time.Second), r.StepWall.Seconds())
			if warm {
				t, val, steps = r.WarmTest, r.WarmSuccess, "0 (warm start)"
				wall = r.WarmWall.Round(time.Second).String() + " (SFT)"
			} else if o.Opt.Model.Init != "" {
				wall += " + shared warm start"
			}
			greedy, sampled := "—", "—"
			if t != nil {
				greedy, sampled = "**"+point(t.Greedy)+"**", point(t.Sampled)
				if t.Greedy.Reused > 0 {
					greedy += fmt.Sprintf(" (%.0f%% from memory)", 100*t.Greedy.Reused)
				}
			}
			pp := paper[key]
			if pp == "" {
				pp = "—"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d × %dk (L%d C%d) | %s | %s |\n", name, greedy, sampled, pct(val), pp,
				r.Policies, r.Params/1000, o.Opt.Model.Layers, o.Opt.Model.Width, steps, wall)
		}
		if o, ok := by["single"]; ok {
			row("single agent, untrained¹", "single/warm", o, true)
			row("single agent + GRPO", "single", o, false)
		}
		if o, ok := by["atgrpo-shared"]; ok {
			row("multi-agent, untrained¹ (shared)", "atgrpo-shared/warm", o, true)
			row("AT-GRPO, shared policy", "atgrpo-shared", o, false)
		}
		if o, ok := by["atgrpo-perrole"]; ok {
			row("multi-agent, untrained¹ (per-role)", "atgrpo-perrole/warm", o, true)
			row("**AT-GRPO, per-role policies** (the main job)", "atgrpo-perrole", o, false)
		}
		for _, id := range []string{"atgrpo-perrole-drmas", "atgrpo-perrole-filter", "atgrpo-perrole-onestep"} {
			if o, ok := by[id]; ok {
				row(strings.TrimSuffix(o.Opt.Name, fmt.Sprintf(" (%dx%d)", size, size)), id, o, false)
			}
		}
		if o, ok := by["joyagents"]; ok {
			row("multi-agent, untrained¹ (per-role, hinted warm start)", "joyagents/warm", o, true)
		}
		for _, o := range list {
			if strings.HasPrefix(o.Name, "joyagents") {
				row(strings.TrimSuffix(o.Opt.Name, fmt.Sprintf(" (%dx%d)", size, size)), o.Name, o, false)
			}
		}
		// Ablations: each against its reference, greedy test success.
		var abl []string
		for _, o := range list {
			ref, ok := by[o.Versus]
			if o.Versus == "" || !ok || o.Result.FinalTest == nil || ref.Result.FinalTest == nil {
				continue
			}
			a, r := o.Result.FinalTest.Greedy, ref.Result.FinalTest.Greedy
			d := a.Success - r.Success
			se := math.Hypot(a.StdErr, r.StdErr)
			verdict := "no effect measurable here (|Δ| < 2 SE)"
			if math.Abs(d) >= 2*se && se > 0 {
				verdict = "an effect (|Δ| ≥ 2 SE)"
			}
			abl = append(abl, fmt.Sprintf("| %s vs %s | %+.1f ± %.1f points | %s |", o.Name, o.Versus, 100*d, 100*se, verdict))
		}
		if len(abl) > 0 {
			fmt.Fprintf(&b, "\nAblations (greedy test success, difference to the reference cell; ± one standard error of the difference;\n")
			fmt.Fprintf(&b, "the cells start from the same warm start, so the difference is the mechanism's, up to sampling noise):\n\n")
			fmt.Fprintf(&b, "| ablation | Δ success | verdict |\n|---|---:|---|\n%s\n", strings.Join(abl, "\n"))
		}
	}
	fmt.Fprintf(&b, "\n¹ \"Untrained\" means warm-started only: a randomly initialised tiny model scores 0%%, so every policy is\n")
	fmt.Fprintf(&b, "first trained with supervised learning on expert transcripts (as the paper starts from an instruction-tuned\n")
	fmt.Fprintf(&b, "model), and the untrained rows are that warm start evaluated before any RL step.\n\n")
	fmt.Fprintf(&b, "## Learning: validation success at each evaluation (sampled)\n\n| cell | warm start → evaluations (step: success) |\n|---|---|\n")
	for _, o := range outs {
		var parts []string
		for _, p := range o.Result.Evals {
			parts = append(parts, fmt.Sprintf("%d: %.0f%%", p.Step, 100*p.Success))
		}
		fmt.Fprintf(&b, "| %s | %s |\n", o.ID, strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\nThis run wrote every cell's metrics (`<cell>/metrics.jsonl`: per step clip fraction, approximate KL,\n")
	fmt.Fprintf(&b, "entropy, gradient norm, zero-advantage share, memory use), plot and checkpoints under `%s`.\n", out)
	fmt.Fprintf(&b, "Learning curves, copied next to the results program:\n\n")
	for _, o := range outs {
		fmt.Fprintf(&b, "- %s: [%s.png](../%s/%s.png)\n", o.Opt.Name, o.ID, plotsDir, o.ID)
	}
	fmt.Fprintf(&b, "\n## How the cells were made\n\n")
	if len(outs) > 0 {
		o := outs[0].Opt
		o.Defaults()
		fmt.Fprintf(&b, "- Model: the main job's policy, the Llama family (RMSNorm, RoPE, SwiGLU; the code path of a downloaded Qwen or SmolLM checkpoint), %d layers, width %d, %d heads (%d key/value heads), character tokenizer over `envs.Alphabet()`, context = longest observation + action + 3 tokens (+ a hint's length with JoyAgents-R1's memory): %s. One policy actor per role (per-role) or one for both (shared).\n",
			o.Model.Layers, o.Model.Width, o.Model.Heads, cmp.Or(o.Model.KVHeads, o.Model.Heads), contexts(outs))
		fmt.Fprintf(&b, "- Warm start: %d expert episodes (seeds 0..%d, BFS expert; %.0f%% of actions replaced by random ones that are executed but not learned), cross-entropy on the answer tokens, batch 32, lr %.0e: %d epochs over each per-role policy's transcripts; a shared or single policy gets the same number of SFT steps.\n",
			o.Warm.Episodes, max(0, o.Warm.Episodes-1), 100*o.Warm.Noise, o.Warm.LR, o.Warm.Epochs)
		fmt.Fprintf(&b, "- AT-GRPO: per step %d fresh grids, K = %d branches per (grid, role, turn) group, reward = team + local (α = 1), GRPO advantages; PPO as verl runs it for PettingLLMs: mini-batches of 16 samples (one AdamW step each, lr %.0e), 1 epoch, clip ε = 0.2, token-mean loss, behaviour log-probs from the sampling policy; the per-role updates run as one compiled actor graph.\n", o.Envs, o.K, o.PPO.LR)
		fmt.Fprintf(&b, "- Single agent + GRPO: the planner alone (`envs.Config.Single`), the same turn-wise grouped GRPO.\n")
		fmt.Fprintf(&b, "- JoyAgents-R1: node-wise Monte Carlo sampling with G = 6 alternatives per node on 4 backbones per step, reward = accuracy + format − efficiency, top-5 groups by reward variance, memory evolved after every node position with pooled 2.5%% tails and read when an agent acts (the best similar entry's answer as a hint, a near-duplicate's answer reused without sampling), at training and at evaluation; half the steps of AT-GRPO, since each samples more. Test grids are new grids, so at evaluation the memory can only answer a situation within 2 edits of one it saw in training, which on fresh Plan-Path grids hardly happens: the share of test actions answered from memory is shown beside the JoyAgents-R1 rows.\n")
		fmt.Fprintf(&b, "- Evaluation: test range n as given, validation range %d grids; turn budget the environment's.\n", o.Eval.Episodes)
	}
	if data, err := os.ReadFile(notesFile); err == nil && !tinyRun {
		b.WriteString("\n")
		b.Write(data)
	}
	fmt.Fprintf(&b, "\n## Reproduce\n\n```sh\ngo run ./examples/results                   # every cell of both sizes, then writes this file\n")
	fmt.Fprintf(&b, "go run ./examples/results --from %s/results.json   # rewrite this file only\n", out)
	fmt.Fprintf(&b, "go run ./examples/planpath-atgrpo            # the main job alone (per-role AT-GRPO, 6×6)\n")
	fmt.Fprintf(&b, "troupe eval --size 6 --role tool=%s/6x6-atgrpo-perrole/tool \\\n    --role planner=%s/6x6-atgrpo-perrole/planner\n```\n", out, out)
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(doc, []byte(b.String()), 0o644); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(saved{Outcomes: outs, Total: total, Jobs: jobsUsed, Tiny: tinyRun}, "", "  ")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "results.json"), js, 0o644)
}

// contexts lists the model context of each grid size.
func contexts(outs []outcome) string {
	seen := map[int]bool{}
	var parts []string
	for _, o := range outs {
		if seen[o.Size] {
			continue
		}
		seen[o.Size] = true
		if c, _, err := trainer.Context(o.Opt.Env, o.Opt.EnvConfig); err == nil {
			parts = append(parts, fmt.Sprintf("%d tokens on %d×%d", c, o.Size, o.Size))
		}
	}
	return strings.Join(parts, ", ")
}

// envOr is the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
