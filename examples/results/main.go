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
// Each cell runs for --seeds training seeds; the table reports the mean
// and its standard error across seeds, and differences paired per seed and
// per test grid. Every (size, warm-start group, seed) has one saved warm
// start from which each cell of the group, its reference included, starts
// RL (fresh AdamW moments for all). Finished runs are kept in
// <out>/results.json and skipped when the program runs again, so the table
// can be built over several runs (--ckpt-every also resumes a run stopped
// mid-way); each run prints its wall time.
//
//	go run ./examples/results --seeds 3             # every cell of both sizes, 3 seeds (days on 2 cores)
//	go run ./examples/results --sizes 6 --cells atgrpo-perrole,atgrpo-perrole-traj --seeds 3
//	go run ./examples/results --tiny                # a few steps of everything: checks the program end to end
package main

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
	Seed   int64 // the run's training seed (warm start and RL)
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
	// WeakEpisodes is the expert episodes of the weak warm start (room to
	// learn), calibrated so that untrained test success falls in 15–40%
	// (the paper's base model starts at 5–14%): 120 episodes (× WarmEpochs, noise 0.2)
	// gave per-role 26.0, 48.0, 31.5% and single-agent 28.0, 15.5, 13.0%
	// greedy on 200 test grids at seeds 1–3 (40 gave 17.5% and 16.5% at
	// seed 1, 160 gave 20.0–66.5% per-role).
	WeakEpisodes int
}

func defaultSettings() settings {
	return settings{Steps: 40, Seed: 1, Layers: 2, Width: 64, LR: 3e-4, WarmEpisodes: 800, WarmEpochs: 16,
		EvalEpisodes: 100, TestEpisodes: 1000, EvalEvery: 10, WeakEpisodes: 120}
}

// tinySettings run every cell in seconds to check the program end to end
// (the numbers mean nothing).
func tinySettings() settings {
	return settings{Steps: 2, Seed: 1, Layers: 1, Width: 16, LR: 3e-4, WarmEpisodes: 12, WarmEpochs: 2,
		EvalEpisodes: 8, TestEpisodes: 16, EvalEvery: 1, WeakEpisodes: 4}
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
	from := flag.String("from", "", "only rewrite the markdown from the results.json of earlier runs (no training): comma-separated files, .gz ones decompressed, a later file's run of a cell and seed replacing an earlier one's")
	gpusPer := flag.Float64("gpus-per-policy", -1, "GPUs each policy actor asks for (fractions share a GPU; -1: 1 when the cluster has GPUs, else 0)")
	backend := flag.String("backend", envOr("TROUPE_BACKEND", "auto"), "policies' compute backend: auto (the GPU each was placed on, else the CPU), cpu or cuda (default $TROUPE_BACKEND)")
	seeds := flag.Int("seeds", 1, "training seeds per cell (--seed, --seed+1, ...); the table reports the mean and its standard error across seeds, and differences paired per seed and grid")
	redo := flag.Bool("redo", false, "retrain cells that results.json in --out already holds (default: keep them, so a stopped run resumes where it stopped)")
	ckptEvery := flag.Int("ckpt-every", 0, "checkpoint every cell every N RL steps and resume a cell stopped mid-run from its last checkpoint (0: none; a stopped cell restarts)")
	warmEps := flag.Int("warm-episodes", 0, "expert episodes of every warm start (0: 800, or 12 with --tiny)")
	warmEpochs := flag.Int("warm-epochs", 0, "warm-start epochs over a per-role policy's transcripts (a shared or single policy gets half; 0: 16, or 2 with --tiny)")
	weak := flag.Int("weak-episodes", 0, "expert episodes of the weak warm start of the room-to-learn cells (0: 120, or 4 with --tiny: untrained test success 35% ± 7 per-role, 19% ± 5 single agent over 3 seeds, in 15–40%)")
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
	if *weak > 0 {
		s.WeakEpisodes = *weak
	}
	if *warmEps > 0 {
		s.WarmEpisodes = *warmEps
	}
	if *warmEpochs > 0 {
		s.WarmEpochs = *warmEpochs
	}
	if *seeds < 1 {
		fmt.Fprintf(os.Stderr, "results: --seeds %d: want at least 1\n", *seeds)
		os.Exit(2)
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
	var selected []cell
	for _, c := range all {
		if len(want) == 0 || want[c.ID] || want[c.Name] {
			selected = append(selected, c)
		}
	}
	jobsUsed = max(1, *jobs)
	tinyRun = *tiny
	p := plan{out: *out, doc: *doc, all: all, seeds: seedRange(s.Seed, *seeds), redo: *redo, jobs: jobsUsed, ckptEvery: *ckptEvery}
	if err := p.run(ctx, rt, selected); err != nil {
		fatal(err)
	}
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

// rewrite writes the markdown from the results files in from
// (comma-separated; a name ending in .gz is gzip-compressed, as the
// committed copies are). Runs of the same cell and seed in two files are
// taken from the later file; the total wall time is the files' sum.
func rewrite(from, doc, out string) error {
	var all saved
	index := map[string]int{} // cell ID and seed → position in all.Outcomes
	for _, f := range strings.Split(from, ",") {
		s, err := readSaved(f)
		if err != nil {
			return err
		}
		for _, o := range s.Outcomes {
			k := fmt.Sprintf("%s/%d", o.ID, o.Seed)
			if i, ok := index[k]; ok {
				all.Outcomes[i] = o
				continue
			}
			index[k] = len(all.Outcomes)
			all.Outcomes = append(all.Outcomes, o)
		}
		all.Total += s.Total
		all.Jobs = max(all.Jobs, s.Jobs)
		all.Tiny = all.Tiny || s.Tiny
	}
	jobsUsed, tinyRun = max(1, all.Jobs), all.Tiny
	return write(doc, out, all.Outcomes, all.Total)
}

// readSaved reads one results file, gzip-compressed if its name ends in
// .gz.
func readSaved(path string) (saved, error) {
	var s saved
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return s, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// order sorts outcomes in cell order.
// order sorts outs into the cells' order, each cell's runs by seed. Runs of
// cells outside all (another size, or a cell this run did not select) are
// kept after them in the order they came: a run over some cells rewrites
// results.json with every earlier run, not just its own.
func order(all []cell, outs []outcome) []outcome {
	var res []outcome
	known := map[string]bool{}
	for _, c := range all {
		known[c.ID] = true
		var mine []outcome
		for _, o := range outs {
			if o.ID == c.ID {
				mine = append(mine, o)
			}
		}
		slices.SortStableFunc(mine, func(a, b outcome) int { return cmp.Compare(a.Seed, b.Seed) })
		res = append(res, mine...)
	}
	for _, o := range outs {
		if !known[o.ID] {
			res = append(res, o)
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
	// The AT-GRPO paper's own ablations, against AT-GRPO in both regimes:
	// other group keys, and independent (non-tree) sampling with about the
	// tree's number of samples (K episodes per grid).
	for _, reg := range []string{"perrole", "shared"} {
		ref := "atgrpo-" + reg
		for _, a := range []struct {
			name, desc string
			f          func(*trainer.Options)
		}{
			{"traj", "trajectory-level GRPO (K independent episodes per grid, each action gets its episode's return advantage)", func(o *trainer.Options) {
				o.ATGRPO.Grouping, o.ATGRPO.Sampler = "trajectory", "independent"
			}},
			{"agentkey", "agent-only key (env, role): turns pooled", func(o *trainer.Options) { o.ATGRPO.Grouping = "agent" }},
			{"turnkey", "turn-only key (env, turn): agents pooled", func(o *trainer.Options) { o.ATGRPO.Grouping = "turn" }},
			{"indep", "independent sampling, AT-GRPO's key (K episodes per grid, one action per turn)", func(o *trainer.Options) { o.ATGRPO.Sampler = "independent" }},
		} {
			var refOpt trainer.Options
			for _, c := range cs {
				if c.Name == ref {
					refOpt = c.Opt
				}
			}
			name := refOpt.Name
			cs = append(cs, cell{Name: ref + "-" + a.name, Desc: "AT-GRPO " + reg + ", " + a.desc, InitFrom: ref, Versus: ref,
				Opt: with(refOpt, func(o *trainer.Options) { a.f(o); o.Name = name + ", " + a.desc })})
		}
	}
	for _, a := range []struct {
		name, desc string
		f          func(*trainer.Options)
	}{
		{"drgrpo", "Dr. GRPO (mean-centred advantages, constant length normalisation)", func(o *trainer.Options) {
			o.Advantage, o.PPO.Aggregation = "mean", "seq-mean-token-sum-norm"
		}},
		{"k8", "K = 8 branches per node (PettingLLMs' setting)", func(o *trainer.Options) { o.K = 8 }},
		{"dapo", "zero-variance groups dropped (DAPO's filter)", func(o *trainer.Options) { o.ATGRPO.Filter = "dapo" }},
		{"resample", "zero-variance groups dropped and refilled from up to 16 more grids a step (DAPO's dynamic sampling)", func(o *trainer.Options) {
			o.ATGRPO.Filter, o.ATGRPO.Resample = "dapo", 16
		}},
		{"toolteam", "the tool earns the team reward of its suggestion (α acts on it)", func(o *trainer.Options) { o.EnvConfig.ToolTeam = true }},
	} {
		cs = append(cs, cell{Name: "atgrpo-perrole-" + a.name, Desc: "AT-GRPO per-role, " + a.desc, InitFrom: "atgrpo-perrole", Versus: "atgrpo-perrole",
			Opt: with(base, func(o *trainer.Options) { o.PerRole = true; a.f(o); o.Name = "AT-GRPO per-role, " + a.desc })})
	}
	// Room to learn: a weak warm start (s.WeakEpisodes expert episodes), where
	// RL has to do the work; the paper's claim is that AT-GRPO's margin over
	// single-agent GRPO grows there.
	weak := func(o *trainer.Options) { o.Warm.Episodes = s.WeakEpisodes }
	cs = append(cs,
		cell{Name: "single-weak", Desc: fmt.Sprintf("single agent + GRPO from a weak warm start (%d expert episodes)", s.WeakEpisodes),
			Opt: with(base, func(o *trainer.Options) { weak(o); o.Algo, o.Name = "grpo", "single agent + GRPO, weak warm start" })},
		cell{Name: "atgrpo-perrole-weak", Desc: fmt.Sprintf("AT-GRPO per-role from a weak warm start (%d expert episodes)", s.WeakEpisodes), Versus: "single-weak",
			Opt: with(base, func(o *trainer.Options) { weak(o); o.PerRole, o.Name = true, "AT-GRPO per-role, weak warm start" })},
	)
	for _, a := range []struct {
		name, desc string
		f          func(*trainer.Options)
	}{
		{"joyagents-frac", "top-50% of each agent's groups by reward variance", func(o *trainer.Options) { o.Joy.TopFrac = 0.5 }},
		{"joyagents-situation", "memory keyed on the situation (3×3 neighbourhood, goal direction, last message), so it can answer on fresh grids", func(o *trainer.Options) { o.Joy.MemoryKey = "situation" }},
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
	// JoyAgents-R1's master agent (envs routepath): each round a master
	// routes the turn to sub-agent h (left/right) or v (up/down), its route
	// an action with its own grouped advantage; off, the environment routes
	// at random. Memory off in both, so that the routing is what differs;
	// each agent keeps the top half of its groups (--top-frac 0.5), so the
	// master's routes are trained every step (a global top-5 trains about
	// 30 samples a step, whoever owns them).
	route := with(joy, func(o *trainer.Options) {
		o.Env, o.Joy.Memory, o.Warm.Hints, o.Joy.TopFrac = "routepath", false, 0, 0.5
	})
	cs = append(cs,
		cell{Name: "joyagents-route", Desc: "JoyAgents-R1 with a master agent routing each round to one of two sub-agents (routepath: h moves left/right, v up/down), trained by RL with the sub-agents; no memory, top-50% of each agent's groups",
			Versus: "joyagents-route-random", Opt: with(route, func(o *trainer.Options) { o.Name = "JoyAgents-R1, master routing (routepath)" })},
		cell{Name: "joyagents-route-random", Desc: "the same sub-agents without the master: the environment routes each round at random (routing off)",
			Opt: with(route, func(o *trainer.Options) {
				o.EnvConfig.RandomRoute, o.Name = true, "JoyAgents-R1, random routing (routepath, no master)"
			})},
	)
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
	copied := map[string]bool{}
	for _, o := range outs {
		if copied[o.ID] { // the first seed's curves
			continue
		}
		copied[o.ID] = true
		data, err := os.ReadFile(filepath.Join(o.Opt.OutDir, "curves.png"))
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
	fmt.Fprintf(&b, "temperature 1. Success = the planner reaches the goal within the turn budget. Each cell is trained with\n")
	fmt.Fprintf(&b, "one or more seeds (`--seeds`); each (grid size, warm-start group, seed) has one supervised warm start, saved, from\n")
	fmt.Fprintf(&b, "which every cell of the group (its reference included) starts RL. Wall time is a run's own (RL and evaluations).\n")
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
		by := map[string][]outcome{} // runs of each cell, seed order
		var names []string
		for _, o := range outs {
			if o.Size == size {
				if _, ok := by[o.Name]; !ok {
					names = append(names, o.Name)
				}
				by[o.Name] = append(by[o.Name], o)
			}
		}
		n := 0
		for _, name := range names {
			for _, o := range by[name] {
				if t := o.Result.FinalTest; t != nil {
					n = t.Greedy.Episodes
				}
			}
		}
		fmt.Fprintf(&b, "\n## Plan-Path %d×%d\n\n", size, size)
		fmt.Fprintf(&b, "Test range: n = %d grids per run and decoding. Each row is the mean over its training seeds ± the standard error\n", n)
		fmt.Fprintf(&b, "across seeds (with one seed: the grids' binomial SE, which leaves out run-to-run training variance).\n")
		fmt.Fprintf(&b, "The paper's column is its Qwen3-1.7B on its 10×10 grid.\n\n")
		fmt.Fprintf(&b, "| method | test, greedy | test, sampled | validation (sampled) | paper | policies × params | RL steps | wall time per run |\n")
		fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---|---:|---:|\n")
		row := func(label, key string, runs []outcome, warm bool) {
			sm := summarize(runs, warm)
			if sm.seeds == 0 {
				return
			}
			steps := fmt.Sprint(sm.steps)
			wall := sm.wall.Round(time.Second).String()
			if warm {
				steps, wall = "0 (warm start)", wall+" (SFT)"
				if sm.wall == 0 { // trained once per seed as its own run: its time is in the log
					wall = "saved warm start"
				}
			}
			greedy := "**" + cellText(sm.greedy, sm.greedySE, sm.seeds, sm.binomial) + "**"
			if o := runs[0].Opt; sm.reused > 0 || (o.Algo == "joyagents" && o.Joy.Memory && !o.Joy.EvalNoMemory) {
				// The memory's share of test actions, shown when it is 0 too.
				greedy += fmt.Sprintf(" (%.1f%% of actions from memory)", 100*sm.reused)
			}
			pp := paper[key]
			if pp == "" {
				pp = "—"
			}
			o := runs[0]
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d × %dk (L%d C%d) | %s | %s |\n", label, greedy, cellText(sm.sampled, sm.sampledSE, sm.seeds, sm.binomial),
				pct(sm.validation), pp, sm.policy, sm.params/1000, o.Opt.Model.Layers, o.Opt.Model.Width, steps, wall)
		}
		label := func(o outcome) string { return strings.TrimSuffix(o.Opt.Name, fmt.Sprintf(" (%dx%d)", size, size)) }
		shown := map[string]bool{}
		for _, r := range []struct{ name, warm, rl string }{
			{"single", "single agent, untrained¹", "single agent + GRPO"},
			{"atgrpo-shared", "multi-agent, untrained¹ (shared)", "AT-GRPO, shared policy"},
			{"atgrpo-perrole", "multi-agent, untrained¹ (per-role)", "**AT-GRPO, per-role policies** (the main job's recipe)"},
		} {
			if runs, ok := by[r.name]; ok {
				row(r.warm, r.name+"/warm", runs, true)
				row(r.rl, r.name, runs, false)
				shown[r.name] = true
			}
		}
		if runs, ok := by["joyagents"]; ok {
			row("multi-agent, untrained¹ (per-role, hinted warm start)", "joyagents/warm", runs, true)
		}
		for _, w := range []string{"single-weak", "atgrpo-perrole-weak"} {
			if runs, ok := by[w]; ok {
				row(label(runs[0])+", untrained¹", w+"/warm", runs, true)
			}
		}
		for _, name := range names {
			if !shown[name] {
				row(label(by[name][0]), name, by[name], false)
			}
		}
		// Comparisons, each paired per seed and per grid on the same test grids.
		var cmpRows []string
		add := func(what string, c comparison) {
			if c.seeds > 0 {
				cmpRows = append(cmpRows, fmt.Sprintf("| %s | %s | %s |", what, c.text(), c.verdict()))
			}
		}
		for _, name := range names {
			runs := by[name]
			add(name+": RL gain (final − its warm start)", compare(runs, runs, false, true))
		}
		for _, name := range names {
			o := by[name][0]
			if ref, ok := by[o.Versus]; ok && o.Versus != "" {
				add(name+" − "+o.Versus, compare(by[name], ref, false, false))
			}
		}
		if a, ok := by["atgrpo-perrole"]; ok {
			if s1, ok := by["single"]; ok {
				add("atgrpo-perrole − single", compare(a, s1, false, false))
			}
			if sh, ok := by["atgrpo-shared"]; ok {
				add("atgrpo-perrole − atgrpo-shared", compare(a, sh, false, false))
			}
		}
		if a, ok := by["atgrpo-shared"]; ok {
			if s1, ok := by["single"]; ok {
				add("atgrpo-shared − single", compare(a, s1, false, false))
			}
		}
		if len(cmpRows) > 0 {
			fmt.Fprintf(&b, "\nDifferences in greedy test success (points), paired: per seed the mean over the same test grids of\n")
			fmt.Fprintf(&b, "(solved by A) − (solved by B), then the mean over seeds. \"SE seeds\" is its standard error across seeds (training\n")
			fmt.Fprintf(&b, "variance included: the one that decides); \"SE grids\" the per-grid paired error within seeds (evaluation noise alone).\n")
			fmt.Fprintf(&b, "An ablation and its reference start RL from the same saved warm start with fresh AdamW moments and share the seed's\n")
			fmt.Fprintf(&b, "random streams, so the difference is the mechanism's plus training noise.\n\n")
			fmt.Fprintf(&b, "| comparison | Δ | SE seeds | SE grids | Δ per seed | verdict |\n|---|---:|---:|---:|---|---|\n%s\n", strings.Join(cmpRows, "\n"))
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
		fmt.Fprintf(&b, "| %s | %s |\n", runKey(o.ID, o.Seed), strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\nThis run wrote every cell's metrics (`<cell>/metrics.jsonl`: per step clip fraction, approximate KL,\n")
	fmt.Fprintf(&b, "entropy, gradient norm, zero-advantage share, memory use), plot and checkpoints under `%s`.\n", out)
	fmt.Fprintf(&b, "Learning curves, copied next to the results program:\n\n")
	plotted := map[string]bool{}
	for _, o := range outs {
		if !plotted[o.ID] {
			plotted[o.ID] = true
			fmt.Fprintf(&b, "- %s (seed %d): [%s.png](../%s/%s.png)\n", o.Opt.Name, o.Seed, o.ID, plotsDir, o.ID)
		}
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
	fmt.Fprintf(&b, "\n## Reproduce\n\n```sh\ngo run ./examples/results --seeds 3 --ckpt-every 10             # the full table: every cell of both sizes, 3 seeds each, then writes this file\n")
	fmt.Fprintf(&b, "go run ./examples/results --seeds 3 --ckpt-every 10 --sizes 6   # or 6×6 alone first; runs of other cells in --out are kept\n")
	fmt.Fprintf(&b, "# stopped? run the same command again: finished runs are kept, a stopped run resumes from its last checkpoint\n")
	fmt.Fprintf(&b, "go run ./examples/results --from %s/results.json   # rewrite this file only\n", out)
	fmt.Fprintf(&b, "go run ./examples/planpath-atgrpo            # the main job alone (per-role AT-GRPO, 6×6)\n")
	fmt.Fprintf(&b, "troupe eval --size 6 --role tool=%s/6x6-atgrpo-perrole/s1/tool \\\n    --role planner=%s/6x6-atgrpo-perrole/s1/planner\n```\n", out, out)
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
