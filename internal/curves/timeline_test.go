package curves

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTimeline: a step's "timeline" object is read by actor and phase
// (bad values left out), and a run with timelines gets one stacked panel
// per actor beside its curves.
func TestTimeline(t *testing.T) {
	in := `{"kind":"step","step":1,"reward":0.5,"timeline":{"planner/learner":{"rollout":0,"train":0.2,"sync":0.01,"idle":0.1,"wall":0.31},"planner/rollout0":{"rollout":0.25,"idle":"x"}}}
{"kind":"step","step":2,"reward":0.6,"timeline":{"planner/learner":{"train":0.3,"idle":-1}}}
{"kind":"eval","step":2,"success":0.5}
`
	r, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	tl := r.Records[0].Timeline
	if tl["planner/learner"]["train"] != 0.2 || tl["planner/rollout0"]["rollout"] != 0.25 {
		t.Fatalf("timeline %v", tl)
	}
	if _, ok := tl["planner/rollout0"]["idle"]; ok {
		t.Fatal("a string phase was read")
	}
	if _, ok := r.Records[1].Timeline["planner/learner"]["idle"]; ok {
		t.Fatal("a negative phase was read")
	}
	if r.Records[2].Timeline != nil {
		t.Fatal("an evaluation got a timeline")
	}
	if got := r.timelineActors(); len(got) != 2 || got[0] != "planner/learner" {
		t.Fatalf("actors %v", got)
	}
	plots, err := timelinePlots([]*Run{r})
	if err != nil || len(plots) != 2 {
		t.Fatalf("%d timeline plots, %v; want 2", len(plots), err)
	}
	base := filepath.Join(t.TempDir(), "curves")
	r.Name = "run"
	if err := Draw(base, []*Run{r}, Options{}); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(base + ".svg")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "time per step: planner/rollout0") {
		t.Fatal("the figure has no timeline panel")
	}
}
