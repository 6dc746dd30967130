package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"troupe/algorithms/trainer"
	"troupe/runtime"
)

// plan trains the selected cells for every seed. Each (size, warm group,
// seed) has one warm start, trained once as its own run (RL steps 0) and
// saved; every cell of the group, its reference included, starts RL from
// those weights with fresh AdamW moments, so an ablation and its reference
// differ only by the mechanism (and share the seed's RL random streams).
// Finished runs are kept in results.json and skipped when the program is
// run again, so the table can be built over several runs.
type plan struct {
	out, doc  string
	all       []cell
	seeds     []int64
	redo      bool
	jobs      int
	ckptEvery int
}

// seedRange is n seeds from first.
func seedRange(first int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = first + int64(i)
	}
	return out
}

// runKey names one run of a cell: "6x6-atgrpo-perrole/s1".
func runKey(id string, seed int64) string { return id + "/s" + strconv.FormatInt(seed, 10) }

// warmGroup is the cell whose warm start c starts from: the cell it was
// declared to share one with, or itself.
func warmGroup(c cell) string {
	if c.InitFrom != "" {
		return c.InitFrom
	}
	return c.Name
}

// warmDir is where the warm start of group on size, seed lives.
func (p *plan) warmDir(size int, group string, seed int64) string {
	return filepath.Join(p.out, sizeID(size, "warm-"+group), "s"+strconv.FormatInt(seed, 10))
}

// warmDone marks a complete warm start (its weights saved).
const warmDone = "warm.done"

func (p *plan) run(ctx context.Context, rt runtime.Runtime, selected []cell) error {
	start := time.Now()
	var prev []outcome
	if data, err := os.ReadFile(filepath.Join(p.out, "results.json")); err == nil {
		var sv saved
		if err := json.Unmarshal(data, &sv); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(p.out, "results.json"), err)
		}
		prev = sv.Outcomes
	}
	done := map[string]bool{}
	for _, o := range prev {
		done[runKey(o.ID, o.Seed)] = true
	}
	type job struct {
		c    cell
		seed int64
	}
	var todo []job
	var kept []outcome
	want := map[string]bool{}
	for _, c := range selected {
		for _, seed := range p.seeds {
			k := runKey(c.ID, seed)
			want[k] = true
			if done[k] && !p.redo {
				fmt.Printf("== %s: kept from %s/results.json\n", k, p.out)
				continue
			}
			todo = append(todo, job{c, seed})
		}
	}
	for _, o := range prev {
		if k := runKey(o.ID, o.Seed); !want[k] || (done[k] && !p.redo) {
			kept = append(kept, o)
		}
	}
	// Warm starts first, each once.
	type warmJob struct {
		ref  cell
		seed int64
		dir  string
	}
	var warms []warmJob
	seenWarm := map[string]bool{}
	for _, j := range todo {
		g := warmGroup(j.c)
		dir := p.warmDir(j.c.Size, g, j.seed)
		if seenWarm[dir] {
			continue
		}
		seenWarm[dir] = true
		if _, err := os.Stat(filepath.Join(dir, warmDone)); err == nil {
			continue
		}
		ref, ok := p.find(j.c.Size, g)
		if !ok {
			return fmt.Errorf("cell %s: no warm-start cell %s", j.c.ID, g)
		}
		warms = append(warms, warmJob{ref, j.seed, dir})
	}
	var (
		mu   sync.Mutex // outs, firstErr, the markdown
		outs []outcome
		err1 error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err1 == nil {
			err1 = err
		}
	}
	parallel := func(n int, f func(i int)) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, p.jobs)
		for i := range n {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				f(i)
			}()
		}
		wg.Wait()
	}
	parallel(len(warms), func(i int) {
		w := warms[i]
		o := w.ref.Opt
		o.Steps, o.Seed, o.OutDir = 0, w.seed, w.dir
		o.Eval.TestEpisodes, o.Eval.Every = 0, 0 // the cells test the warm start themselves
		o.ActorPrefix = sizeID(w.ref.Size, "warm-"+warmGroup(w.ref)) + "/s" + strconv.FormatInt(w.seed, 10) + "/"
		p.logTo(&o, o.ActorPrefix)
		fmt.Printf("== warm start %s (seed %d): %s\n", w.dir, w.seed, w.ref.Desc)
		t0 := time.Now()
		if _, err := trainer.Run(ctx, rt, o); err != nil {
			fail(fmt.Errorf("warm start %s: %w", w.dir, err))
			return
		}
		if err := os.WriteFile(filepath.Join(w.dir, warmDone), nil, 0o644); err != nil {
			fail(err)
			return
		}
		fmt.Printf("== warm start %s done in %s\n", w.dir, time.Since(t0).Round(time.Second))
	})
	if err1 != nil {
		return err1
	}
	parallel(len(todo), func(i int) {
		j := todo[i]
		k := runKey(j.c.ID, j.seed)
		o := j.c.Opt
		o.Seed = j.seed
		o.OutDir = filepath.Join(p.out, j.c.ID, "s"+strconv.FormatInt(j.seed, 10))
		o.Model.Init = filepath.Join(p.warmDir(j.c.Size, warmGroup(j.c), j.seed), "warm-")
		o.ActorPrefix = k + "/"
		if p.ckptEvery > 0 {
			o.CkptEvery, o.Resume = p.ckptEvery, o.OutDir
		}
		p.logTo(&o, k)
		fmt.Printf("== %s: %s\n", k, j.c.Desc)
		res, err := trainer.Run(ctx, rt, o)
		if err != nil {
			fail(fmt.Errorf("cell %s: %w", k, err))
			return
		}
		g := "—"
		if t := res.FinalTest; t != nil {
			g = pct(t.Greedy.Success)
		}
		fmt.Printf("== %s done in %s (greedy test %s)\n", k, res.Wall.Round(time.Second), g)
		mu.Lock()
		defer mu.Unlock()
		outs = append(outs, outcome{ID: j.c.ID, Name: j.c.Name, Size: j.c.Size, Desc: j.c.Desc, Versus: j.c.Versus, Seed: j.seed, Result: res, Opt: o})
		// Write after every run so a stopped run still leaves a table and
		// its finished runs.
		merged := order(p.all, append(append([]outcome(nil), kept...), outs...))
		if err := copyPlots(p.out, merged); err != nil {
			err1 = err
			return
		}
		if err := write(p.doc, p.out, merged, time.Since(start)); err != nil {
			err1 = err
		}
	})
	if err1 != nil {
		return err1
	}
	if len(outs) == 0 && len(kept) > 0 { // nothing new: rewrite from what is kept
		if err := write(p.doc, p.out, order(p.all, kept), time.Since(start)); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %s (%d runs trained, %d kept, %s)\n", p.doc, len(outs), len(kept), time.Since(start).Round(time.Second))
	return nil
}

// find is the cell named name on size.
func (p *plan) find(size int, name string) (cell, bool) {
	for _, c := range p.all {
		if c.Size == size && c.Name == name {
			return c, true
		}
	}
	return cell{}, false
}

// logTo sends a run's progress bar and log lines to the terminal: the bar
// alone when one run trains at a time, prefixed lines otherwise.
func (p *plan) logTo(o *trainer.Options, prefix string) {
	o.Progress, o.Log = os.Stderr, os.Stdout
	if p.jobs > 1 {
		o.Progress, o.Log = nil, &prefixWriter{prefix: "[" + prefix + "] ", w: os.Stdout}
	}
}
