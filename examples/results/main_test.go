package main

import (
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
	for _, size := range []int{6, 10} {
		for i, c := range cells(defaultSettings(), size) {
			test := func(p float64) *trainer.Test {
				return &trainer.Test{Greedy: trainer.Point{Success: p, StdErr: 0.01, Episodes: 1000}, Sampled: trainer.Point{Success: p - 0.05, StdErr: 0.01, Episodes: 1000}}
			}
			r := trainer.Result{Params: 107648, Policies: 2, WarmSuccess: 0.25, Final: trainer.Point{Step: 40, Success: 0.5},
				WarmTest: test(0.3), FinalTest: test(0.5 + 0.01*float64(i)), Steps: 40, Wall: time.Minute}
			outs = append(outs, outcome{ID: c.ID, Name: c.Name, Size: c.Size, Desc: c.Desc, Versus: c.Versus, Result: r, Opt: c.Opt})
		}
	}
	if err := write(doc, dir, outs, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(doc)
	for _, want := range []string{
		"## Plan-Path 6×6", "## Plan-Path 10×10", "n = 1000 grids",
		"| single agent, untrained¹ | **30.0% ± 1.0** | 25.0% ± 1.0 | 25.0% | 5 |",
		"| single agent + GRPO | **50.0% ± 1.0** | 45.0% ± 1.0 | 50.0% | 11 |",
		"| atgrpo-perrole-drmas vs atgrpo-perrole | +1.0 ± 1.4 points | no effect measurable here",
		"| joyagents-drmas vs joyagents | +9.0 ± 1.4 points | an effect",
		"107k", "JoyAgents-R1, top-1 group per step",
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
	if _, err := parseSizes("6,11"); err == nil {
		t.Fatal("size 11 accepted")
	}
}
