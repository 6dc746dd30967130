package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"troupe/algorithms/trainer"
)

func TestWriteAndRewrite(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "results.md")
	plotsDir = filepath.Join(dir, "plots")
	var outs []outcome
	// solved marks the first k of 100 grids solved.
	solved := func(k int) []bool {
		s := make([]bool, 100)
		for i := range k {
			s[i] = true
		}
		return s
	}
	for _, size := range []int{6, 10} {
		for i, c := range cells(defaultSettings(), size) {
			for seed := int64(1); seed <= 3; seed++ {
				test := func(k int) *trainer.Test {
					p := float64(k) / 100
					return &trainer.Test{Greedy: trainer.Point{Success: p, StdErr: 0.01, Episodes: 100}, Sampled: trainer.Point{Success: p - 0.05, StdErr: 0.01, Episodes: 100},
						GreedySolved: solved(k)}
				}
				// Cell i solves 50 + i (+ seed − 2) grids: i points above the
				// first cell at every seed, a spread of 1 point across seeds.
				r := trainer.Result{Params: 107648, Policies: 2, WarmSuccess: 0.25, Final: trainer.Point{Step: 40, Success: 0.5},
					WarmTest: test(30), FinalTest: test(50 + i + int(seed) - 2), Steps: 40, Wall: time.Minute}
				outs = append(outs, outcome{ID: c.ID, Name: c.Name, Size: c.Size, Desc: c.Desc, Versus: c.Versus, Seed: seed, Result: r, Opt: c.Opt})
			}
		}
	}
	if err := write(doc, dir, outs, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(doc)
	for _, want := range []string{
		"## Plan-Path 6×6", "## Plan-Path 10×10", "n = 100 grids",
		"| single agent, untrained¹ | **30.0% ± 0.0 (3 seeds)** | 25.0% ± 0.0 (3 seeds) | 25.0% | 5 |",
		"| single agent + GRPO | **50.0% ± 0.6 (3 seeds)** | 45.0% ± 0.6 (3 seeds) | 50.0% | 11 |",
		// drmas (cell 3) solves one grid more than its reference (cell 2)
		// at every seed: SE across seeds 0; per grid 1.0 point within each
		// seed, 1.0/√3 pooled.
		"| atgrpo-perrole-drmas − atgrpo-perrole | +1.0 | 0.0 | 0.6 | +1.0, +1.0, +1.0 |",
		"| single: RL gain (final − its warm start) | +20.0 | 0.6 | ",
		"an effect (|Δ| ≥ 4.30 SE: 95%, t with 2 df)",
		"107k", "JoyAgents-R1, top-1 group per step", "AT-GRPO per-role policies, trajectory-level GRPO",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if err := os.Remove(doc); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(filepath.Join(dir, "results.json"), doc, dir); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(doc)
	if len(again) == 0 || !strings.Contains(string(again), "AT-GRPO, shared policy") {
		t.Fatalf("rewritten markdown:\n%s", again)
	}
	if err := rewrite(filepath.Join(dir, "missing.json"), doc, dir); err == nil {
		t.Fatal("missing results.json accepted")
	}
	// Several files, one compressed: the later file's run of a cell and
	// seed replaces the earlier one's, the others are kept.
	first, _ := os.ReadFile(filepath.Join(dir, "results.json"))
	gz := filepath.Join(dir, "first.json.gz")
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(first)
	zw.Close()
	if err := os.WriteFile(gz, zb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	later := outs[0]
	later.Result.FinalTest = &trainer.Test{Greedy: trainer.Point{Success: 0.99, StdErr: 0.01, Episodes: 100}, Sampled: trainer.Point{Success: 0.9, StdErr: 0.01, Episodes: 100}, GreedySolved: solved(99)}
	js, _ := json.Marshal(saved{Outcomes: []outcome{later}, Total: time.Minute, Jobs: 1})
	second := filepath.Join(dir, "second.json")
	if err := os.WriteFile(second, js, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(gz+","+second, doc, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	merged, _ := os.ReadFile(doc)
	if !strings.Contains(string(merged), "AT-GRPO, shared policy") || !strings.Contains(string(merged), "(total 4m0s)") {
		t.Fatalf("merged markdown lacks the first file's cells or the summed time:\n%s", merged)
	}
	// Seed 1 of the single agent now solves 99 grids, not 49: the mean of
	// its three seeds is (99+50+51)/3.
	if !strings.Contains(string(merged), "| single agent + GRPO | **66.7%") {
		t.Fatalf("the later file's run did not replace the earlier one's:\n%s", merged)
	}
	if err := rewrite(gz+","+filepath.Join(dir, "missing.json"), doc, dir); err == nil {
		t.Fatal("a missing second file accepted")
	}
	// Fewer than 3 seeds make no claim.
	if v := compare(outs[:2], outs[:2], false, true).verdict(); !strings.Contains(v, "no claim") {
		t.Fatalf("2 seeds: %q", v)
	}
	// Student's t decides with few seeds: 3 seeds need 4.30 SE for an
	// effect, and 2–4.30 SE is only suggestive.
	for _, tc := range []struct {
		d, se float64
		seeds int
		want  string
	}{
		{0.05, 0.01, 3, "an effect"}, {0.03, 0.01, 3, "suggestive"}, {0.01, 0.01, 3, "no effect"},
		{0.03, 0.01, 5, "an effect"}, {-0.05, 0.01, 3, "an effect"}, {0.05, 0.01, 2, "no claim"},
	} {
		c := comparison{seeds: tc.seeds, d: tc.d, seSeed: tc.se}
		if v := c.verdict(); !strings.HasPrefix(v, tc.want) && !strings.Contains(v, tc.want) {
			t.Errorf("Δ %v SE %v over %d seeds: %q, want %q", tc.d, tc.se, tc.seeds, v, tc.want)
		}
	}
	if _, err := parseSizes("6,11"); err == nil {
		t.Fatal("size 11 accepted")
	}
}

// TestOrderKeepsOtherCells: a run over some cells (one size) writes
// results.json with the earlier runs of the others, which it must not drop.
func TestOrderKeepsOtherCells(t *testing.T) {
	all := []cell{{ID: "10x10-a"}, {ID: "10x10-b"}}
	outs := []outcome{{ID: "6x6-a", Seed: 1}, {ID: "10x10-b", Seed: 2}, {ID: "6x6-b", Seed: 1}, {ID: "10x10-b", Seed: 1}, {ID: "10x10-a", Seed: 1}}
	got := order(all, outs)
	var ids []string
	for _, o := range got {
		ids = append(ids, fmt.Sprintf("%s/%d", o.ID, o.Seed))
	}
	want := "10x10-a/1 10x10-b/1 10x10-b/2 6x6-a/1 6x6-b/1"
	if strings.Join(ids, " ") != want {
		t.Fatalf("order: %v, want %s", ids, want)
	}
}
