// Command results regenerates docs/results.md: the miniature version of the
// AT-GRPO paper's Plan-Path table. It trains every cell from scratch on the
// embedded cluster with the same recipe as examples/planpath-atgrpo (tiny
// character GPTs, warm start on expert transcripts, RL), evaluates each on
// the same 100 held-out 6×6 grids (seeds 1000000..1000099) with independent
// rollouts, and writes the table with model size, steps and wall time per
// cell next to the paper's Qwen3-1.7B row.
//
//	go run ./examples/results                 # all cells (about an hour on 2 busy cores)
//	go run ./examples/results --cells atgrpo-perrole,single-grpo --steps 20
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"troupe/algorithms/envs"
	"troupe/examples/internal/recipe"
	"troupe/runtime"
)

// cell is one trained configuration.
type cell struct {
	ID   string
	Desc string
	Opt  recipe.Options
	// InitFrom names an earlier cell whose warm-start checkpoints this cell
	// starts from (same regime and settings, so the same warm start).
	InitFrom string
}

// outcome is what a cell produced.
type outcome struct {
	ID     string
	Desc   string
	Result recipe.Result
	Opt    recipe.Options
}

func main() {
	steps := flag.Int("steps", 40, "RL steps of every AT-GRPO cell (JoyAgents cells run half of it: each of their steps samples more)")
	cellsFlag := flag.String("cells", "", "comma-separated cells to run (default all): "+strings.Join(cellIDs(cells(40)), ", "))
	out := flag.String("out", "runs/results", "directory for every cell's metrics, plots and checkpoints")
	doc := flag.String("doc", "docs/results.md", "markdown file to write")
	seed := flag.Int64("seed", 1, "seed of every cell")
	layers := flag.Int("layers", 2, "transformer layers of every policy")
	width := flag.Int("width", 64, "model width of every policy")
	lr := flag.Float64("lr", 3e-4, "RL learning rate")
	flag.StringVar(&plotsDir, "plots", plotsDir, "directory that receives a copy of every cell's plot (linked from the markdown)")
	notes := flag.String("notes", "examples/results/notes.md", "markdown appended to the table (observations written by hand; skipped if missing)")
	jobs := flag.Int("jobs", 1, "cells trained at the same time (a cell starting from another's warm start waits for it); wall times then overlap")
	from := flag.String("from", "", "only rewrite the markdown from a results.json of an earlier run (no training)")
	gpusPer := flag.Float64("gpus-per-policy", -1, "GPUs each policy actor asks for (fractions share a GPU; -1: 1 when the cluster has GPUs, else 0)")
	backend := flag.String("backend", envOr("TROUPE_BACKEND", "auto"), "policies' compute backend: auto (the GPU each was placed on, else the CPU), cpu or cuda (default $TROUPE_BACKEND)")
	flag.Parse()
	notesFile = *notes
	if *from != "" {
		if err := rewrite(*from, *doc, *out); err != nil {
			fmt.Fprintln(os.Stderr, "results:", err)
			os.Exit(1)
		}
		for _, c := range cells(*steps) {
			if _, err := os.Stat(filepath.Join(*out, c.ID, "metrics.jsonl")); err == nil {
				if err := recipe.Replot(filepath.Join(*out, c.ID), c.Opt.Name); err != nil {
					fmt.Fprintln(os.Stderr, "results:", err)
				}
			}
		}
		if err := copyPlots(*out, cellOutcomes(*steps)); err != nil {
			fmt.Fprintln(os.Stderr, "results:", err)
			os.Exit(1)
		}
		return
	}
	all := cells(*steps)
	for i := range all {
		all[i].Opt.Layers, all[i].Opt.Width, all[i].Opt.LR = *layers, *width, float32(*lr)
		all[i].Opt.GPUsPerPolicy, all[i].Opt.Backend = *gpusPer, *backend
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
			found = found || c.ID == id
		}
		if !found {
			fmt.Fprintf(os.Stderr, "results: unknown cell %q (cells: %s)\n", id, strings.Join(cellIDs(all), ", "))
			os.Exit(2)
		}
	}
	ctx := context.Background()
	rt, err := runtime.Init(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
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
			var s saved
			if json.Unmarshal(data, &s) != nil {
				_ = json.Unmarshal(data, &s.Outcomes)
			}
			for _, o := range s.Outcomes {
				if !want[o.ID] {
					kept = append(kept, o)
				}
			}
		}
	}
	var selected []cell
	for _, c := range all {
		if len(want) == 0 || want[c.ID] {
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
	for _, c := range selected {
		if ch, ok := finished[c.InitFrom]; ok {
			<-ch
		}
		sem <- struct{}{}
		o := c.Opt
		o.Seed = *seed
		o.OutDir = filepath.Join(*out, c.ID)
		o.Progress, o.Log = os.Stderr, os.Stdout
		if jobsUsed > 1 {
			// Interleaved progress bars are unreadable: cells log lines only,
			// each prefixed with its cell.
			o.Progress, o.Log = nil, &prefixWriter{prefix: "[" + c.ID + "] ", w: os.Stdout}
		}
		if c.InitFrom != "" {
			// Start from that cell's warm start when it ran here (this run
			// or an earlier one); otherwise warm-start from scratch.
			prefix := filepath.Join(*out, c.InitFrom, "warm-")
			mu.Lock()
			ran := done[c.InitFrom]
			mu.Unlock()
			if m, _ := filepath.Glob(prefix + "*"); ran || len(m) > 0 {
				o.Init = prefix
			}
		}
		fmt.Printf("== %s: %s\n", c.ID, c.Desc)
		wg.Add(1)
		o.ActorPrefix = c.ID + "/"
		go func(c cell, o recipe.Options) {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := recipe.Run(ctx, rt, o)
			if err != nil {
				fmt.Fprintf(os.Stderr, "results: cell %s: %v\n", c.ID, err)
				os.Exit(1)
			}
			mu.Lock()
			defer mu.Unlock()
			outs = append(outs, outcome{ID: c.ID, Desc: c.Desc, Result: res, Opt: o})
			done[c.ID] = true
			close(finished[c.ID])
			// Write after every cell so an interrupted run still leaves a table.
			merged := order(all, append(append([]outcome(nil), kept...), outs...))
			if err := copyPlots(*out, merged); err != nil {
				fmt.Fprintln(os.Stderr, "results:", err)
				os.Exit(1)
			}
			if err := write(*doc, *out, merged, time.Since(start)); err != nil {
				fmt.Fprintln(os.Stderr, "results:", err)
				os.Exit(1)
			}
		}(c, o)
	}
	wg.Wait()
	fmt.Printf("wrote %s (%d cells, %s)\n", *doc, len(outs), time.Since(start).Round(time.Second))
}

// saved is results.json: the outcomes and the total wall time.
type saved struct {
	Outcomes []outcome
	Total    time.Duration
	Jobs     int // cells trained at the same time (0 in older files: 1)
}

func rewrite(from, doc, out string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var s saved
	if err := json.Unmarshal(data, &s); err != nil {
		// Older files hold just the list of outcomes.
		if err2 := json.Unmarshal(data, &s.Outcomes); err2 != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
	}
	jobsUsed = max(1, s.Jobs)
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

// cellOutcomes names every cell (for copying plots without results).
func cellOutcomes(steps int) []outcome {
	var out []outcome
	for _, c := range cells(steps) {
		out = append(out, outcome{ID: c.ID, Opt: c.Opt})
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

func cells(steps int) []cell {
	base := recipe.Options{
		Env: "planpath", EnvConfig: envs.Config{Width: 6, Height: 6}, Algo: "atgrpo",
		Steps: steps, K: 4, Envs: 8, LR: 3e-4,
		WarmEpisodes: 800, WarmEpochs: 8, WarmNoise: 0.2, EvalEvery: 10,
	}
	joy := base
	joy.Algo, joy.PerRole, joy.K, joy.Envs, joy.JoyMemory = "joyagents", true, 6, 4, true
	joy.Steps = steps / 2
	with := func(o recipe.Options, f func(*recipe.Options)) recipe.Options { f(&o); return o }
	return []cell{
		{"single-grpo", "single agent (planner alone): warm start, then GRPO with turn-wise groups",
			with(base, func(o *recipe.Options) { o.Single, o.Name = true, "single agent + GRPO" }), ""},
		{"atgrpo-shared", "tool + planner, one shared policy: warm start, then AT-GRPO",
			with(base, func(o *recipe.Options) { o.Name = "AT-GRPO shared policy" }), ""},
		{"atgrpo-perrole", "tool + planner, one policy per role: warm start, then AT-GRPO",
			with(base, func(o *recipe.Options) { o.PerRole, o.Name = true, "AT-GRPO per-role policies" }), ""},
		{"atgrpo-perrole-long", "AT-GRPO per-role, three times the steps, from the same warm start",
			with(base, func(o *recipe.Options) {
				o.PerRole, o.Steps, o.EvalEvery, o.Name = true, 3*steps, 20, "AT-GRPO per-role, long"
			}), "atgrpo-perrole"},
		{"atgrpo-perrole-sft16", "AT-GRPO per-role, each policy warm-started for as many SFT steps as the shared policy (16 epochs over its role's half of the transcripts)",
			with(base, func(o *recipe.Options) {
				o.PerRole, o.WarmEpochs, o.Name = true, 2*base.WarmEpochs, "AT-GRPO per-role, equal SFT steps"
			}), ""},
		{"joyagents", "tool + planner, per-role: the per-role warm start, then JoyAgents-R1 (G=6, all groups, memory)",
			with(joy, func(o *recipe.Options) { o.Name = "JoyAgents-R1" }), "atgrpo-perrole"},
		{"joyagents-top2", "JoyAgents-R1 with marginal-benefit top-K = 2 groups per step",
			with(joy, func(o *recipe.Options) { o.JoyTopK, o.Name = 2, "JoyAgents-R1 top-2" }), "atgrpo-perrole"},
		{"joyagents-nomem", "JoyAgents-R1 without memory evolution",
			with(joy, func(o *recipe.Options) { o.JoyMemory, o.Name = false, "JoyAgents-R1 no memory" }), "atgrpo-perrole"},
	}
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

// jobsUsed is the number of cells that ran at the same time (for the
// markdown's note on wall times).
var jobsUsed = 1

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

func write(doc, out string, outs []outcome, total time.Duration) error {
	by := map[string]outcome{}
	for _, o := range outs {
		by[o.ID] = o
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Results: Plan-Path 6×6, miniature AT-GRPO table\n\n")
	fmt.Fprintf(&b, "Generated by `go run ./examples/results` on %s (total %s). Every cell is trained from scratch\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), total.Round(time.Second))
	fmt.Fprintf(&b, "on the embedded cluster, policies as actors, and evaluated on the same **100 held-out 6×6 grids**\n")
	fmt.Fprintf(&b, "(22%% obstacles, seeds 1000000..1000099, never trained on) with independent rollouts (one sampled\n")
	fmt.Fprintf(&b, "action per turn, temperature 1, no branching). Success = the planner reaches the goal within the turn budget.\n")
	if jobsUsed > 1 {
		fmt.Fprintf(&b, "Cells were trained up to %d at a time (`--jobs`), so a cell's wall time includes the others' load, and the\n", jobsUsed)
		fmt.Fprintf(&b, "process CPU time is that of the whole process up to the cell's end.\n")
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "| method | troupe (tiny GPT) | paper (Qwen3-1.7B) | policies × params | RL steps | wall time (process CPU) |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---|---:|---:|\n")
	row := func(name, paper string, o outcome, warm bool) {
		r := o.Result
		succ := pct(r.Final.Success)
		steps := fmt.Sprint(r.Steps)
		wall := fmt.Sprintf("%s (CPU %s)", r.Wall.Round(time.Second), r.CPU.Round(time.Second))
		if warm {
			succ, steps = pct(r.WarmSuccess), "0 (warm start only)"
			wall = r.WarmWall.Round(time.Second).String() + " (SFT)"
		} else if o.Opt.Init != "" {
			wall += " + shared warm start"
		}
		fmt.Fprintf(&b, "| %s | **%s** | %s | %d × %dk (L%d C%d) | %s | %s |\n", name, succ, paper, r.Policies, r.Params/1000, o.Opt.Layers, o.Opt.Width, steps, wall)
	}
	if o, ok := by["single-grpo"]; ok {
		row("single agent, untrained¹", "5", o, true)
		row("single agent + GRPO", "11", o, false)
	}
	if o, ok := by["atgrpo-shared"]; ok {
		row("multi-agent, untrained¹ (shared)", "10", o, true)
		row("AT-GRPO, shared policy", "96", o, false)
	}
	if o, ok := by["atgrpo-perrole"]; ok {
		row("multi-agent, untrained¹ (per-role)", "—", o, true)
		row("AT-GRPO, per-role policies", "97", o, false)
	}
	if o, ok := by["atgrpo-perrole-long"]; ok {
		row("AT-GRPO, per-role policies, 3× steps", "97", o, false)
	}
	if o, ok := by["atgrpo-perrole-sft16"]; ok {
		row("multi-agent, untrained¹ (per-role, shared policy's SFT steps)", "—", o, true)
		row("AT-GRPO, per-role policies, shared policy's SFT steps", "97", o, false)
	}
	for _, id := range []string{"joyagents", "joyagents-top2", "joyagents-nomem"} {
		if o, ok := by[id]; ok {
			row(o.Opt.Name+" (per-role)", "—", o, false)
		}
	}
	fmt.Fprintf(&b, "\n¹ \"Untrained\" means warm-started only: a randomly initialised tiny GPT scores 0%%, so every policy is\n")
	fmt.Fprintf(&b, "first trained with supervised learning on expert transcripts (as the paper starts from an instruction-tuned\n")
	fmt.Fprintf(&b, "model), and the untrained rows are that warm start evaluated before any RL step.\n\n")
	fmt.Fprintf(&b, "## Learning: held-out success at each evaluation\n\n| cell | warm start → evaluations (step: success) |\n|---|---|\n")
	for _, o := range outs {
		var parts []string
		for _, p := range o.Result.Evals {
			parts = append(parts, fmt.Sprintf("%d: %s", p.Step, pct(p.Success)))
		}
		fmt.Fprintf(&b, "| %s | %s |\n", o.ID, strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\nThis run wrote every cell's metrics (`<cell>/metrics.jsonl`), plot and checkpoints (`<cell>/*.safetensors`,\n")
	fmt.Fprintf(&b, "check them with `troupe eval`) under `%s`. Learning curves (held-out success, tree-sampled training\n", out)
	fmt.Fprintf(&b, "success, mean branch reward), copied next to the results program:\n\n")
	for _, o := range outs {
		fmt.Fprintf(&b, "- %s: [%s.png](../%s/%s.png)\n", o.Opt.Name, o.ID, plotsDir, o.ID)
	}
	fmt.Fprintf(&b, "\n")
	fmt.Fprintf(&b, "## How the cells were made\n\n")
	if len(outs) > 0 {
		o := outs[0].Opt
		o.Defaults()
		ctxLen, _, _ := recipe.Context(o.Env, o.EnvConfig)
		fmt.Fprintf(&b, "- Model: GPT-2 style, %d layers, width %d, %d heads, character tokenizer over `envs.Alphabet()` (%d characters + BOS, SEP, EOS), context = longest observation + action + 3 tokens (%d on 6×6). One policy actor per role (per-role) or one for both (shared).\n", o.Layers, o.Width, o.Heads, len(envs.Alphabet()), ctxLen)
		fmt.Fprintf(&b, "- Warm start: %d expert episodes (seeds 0..%d, BFS expert; %.0f%% of actions replaced by random ones that are executed but not learned, so the planner also sees wrong tool suggestions and off-path states), %d epochs of cross-entropy on the answer tokens, batch 32, lr %.0e.\n", o.WarmEpisodes, o.WarmEpisodes-1, 100*o.WarmNoise, o.WarmEpochs, o.WarmLR)
		fmt.Fprintf(&b, "- AT-GRPO: per step %d fresh grids, K = %d branches per (grid, role, turn) group, reward = team + local (α = 1), GRPO advantages, clipped loss ε = 0.2, one AdamW step per update (lr %.0e); the per-role updates run as one compiled actor graph (fan-out to the policy actors, Gather of their statistics).\n", o.Envs, o.K, o.LR)
		fmt.Fprintf(&b, "- Single agent + GRPO: the planner alone (`envs.Config.Single`), the same turn-wise grouped GRPO (AT-GRPO's sampler with one agent).\n")
		fmt.Fprintf(&b, "- JoyAgents-R1: node-wise Monte Carlo sampling with G = 6 alternatives per node on 4 backbones per step, reward = accuracy + format − efficiency, memory evolution on unless stated, top-K over all groups unless stated; same policies, warm start and evaluation. Its steps are half as many since each samples more (every node is completed G times to the end).\n")
		fmt.Fprintf(&b, "- Machine: 2 cores (AMD EPYC, AVX2), shared with other builds while the table was made, so wall times are upper bounds.\n")
	}
	if data, err := os.ReadFile(notesFile); err == nil {
		b.WriteString("\n")
		b.Write(data)
	}
	fmt.Fprintf(&b, "\n## Reproduce\n\n```sh\ngo run ./examples/results                   # every cell, then writes this file\n")
	fmt.Fprintf(&b, "go run ./examples/results --from %s/results.json   # rewrite this file only\n", out)
	fmt.Fprintf(&b, "go run ./examples/planpath-atgrpo            # the main run alone (per-role AT-GRPO)\n")
	fmt.Fprintf(&b, "troupe eval --size 6 --role tool=%s/atgrpo-perrole/tool.safetensors \\\n    --role planner=%s/atgrpo-perrole/planner.safetensors\n```\n", out, out)
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(doc, []byte(b.String()), 0o644); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(saved{Outcomes: outs, Total: total, Jobs: jobsUsed}, "", "  ")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "results.json"), js, 0o644)
}

// envOr is the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
