package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"troupe/examples/internal/recipe"
)

func TestWriteAndRewrite(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "results.md")
	cs := cells(40)
	var outs []outcome
	for i, c := range cs[:3] {
		r := recipe.Result{Params: 107648, Policies: 1 + i%2, WarmSuccess: 0.25, Final: recipe.Point{Step: 40, Success: 0.5 + 0.1*float64(i)}, Steps: 40, Wall: time.Minute}
		outs = append(outs, outcome{ID: c.ID, Desc: c.Desc, Result: r, Opt: c.Opt})
	}
	if err := write(doc, dir, outs, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(doc)
	for _, want := range []string{"| single agent, untrained¹ | **25%** | 5 |", "| single agent + GRPO | **50%** | 11 |", "| AT-GRPO, per-role policies | **70%** | 97 |", "107k"} {
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
}
