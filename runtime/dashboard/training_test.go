package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const timelineLines = `{"kind":"eval","step":0,"success":0.5}
{"kind":"step","step":1,"timeline":{"planner/learner":{"rollout":0,"train":0.2,"sync":0.01,"idle":0.1,"wall":0.31},"planner/rollout0":{"rollout":0.25,"idle":"x"}}}
{"kind":"step","step":2}
not json
{"kind":"step","step":3,"timeline":{"planner/learner":{"train":0.3,"idle":-1}}}
{"kind":"step","step":4,"timel`

// TestReadTimeline: step records' timelines are read, oldest first, the
// last n kept; evaluations, records without a timeline, broken and cut
// lines and phases that are not non-negative numbers are skipped.
func TestReadTimeline(t *testing.T) {
	steps, err := ReadTimeline(strings.NewReader(timelineLines), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Step != 1 || steps[1].Step != 3 {
		t.Fatalf("steps %+v", steps)
	}
	if steps[0].Actors["planner/learner"]["train"] != 0.2 || steps[0].Actors["planner/rollout0"]["rollout"] != 0.25 {
		t.Fatalf("step 1 %+v", steps[0])
	}
	if _, ok := steps[0].Actors["planner/rollout0"]["idle"]; ok {
		t.Fatal("a string phase was read")
	}
	if _, ok := steps[1].Actors["planner/learner"]["idle"]; ok {
		t.Fatal("a negative phase was read")
	}
	if steps, _ := ReadTimeline(strings.NewReader(timelineLines), 1); len(steps) != 1 || steps[0].Step != 3 {
		t.Fatalf("last 1: %+v", steps)
	}
}

// TestTrainingEndpoint: api/training serves the run's newest timelines,
// 404 with JSON while the run has no metrics.jsonl, and is absent (the
// page's 404) without a run directory.
func TestTrainingEndpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "myrun")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(failingSource{}, Options{RunDir: dir}))
	defer srv.Close()
	resp, body := get(t, srv.URL+"/api/training")
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(body), "no metrics.jsonl") {
		t.Fatalf("before the run: %s %s %s", resp.Status, resp.Header.Get("Content-Type"), body)
	}
	var b strings.Builder
	for s := 1; s <= 100; s++ {
		fmt.Fprintf(&b, `{"kind":"step","step":%d,"timeline":{"tool/policy":{"rollout":0.1,"train":0.2,"idle":0.05,"wall":0.35}}}`+"\n", s)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body = get(t, srv.URL+"/api/training")
	var tr Training
	if err := json.Unmarshal(body, &tr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s %s: %v", resp.Status, body, err)
	}
	if tr.Run != "myrun" || len(tr.Steps) != maxTimelineSteps || tr.Steps[len(tr.Steps)-1].Step != 100 || tr.Steps[0].Actors["tool/policy"]["train"] != 0.2 {
		t.Fatalf("training %+v", tr)
	}
	plain := httptest.NewServer(New(failingSource{}, Options{}))
	defer plain.Close()
	if resp, _ := get(t, plain.URL+"/api/training"); resp.StatusCode != 404 || strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("without a run: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	_, js := get(t, srv.URL+"/app.js")
	if !strings.Contains(string(js), "api/training") {
		t.Fatal("the page does not poll api/training")
	}
}

// TestReadRunTail: only the end of a long file is read, from its first
// whole line.
func TestReadRunTail(t *testing.T) {
	dir := t.TempDir()
	line := `{"kind":"step","step":%d,"timeline":{"a/learner":{"train":1}},"pad":"` + strings.Repeat("x", 1000) + `"}` + "\n"
	var b strings.Builder
	for s := 1; b.Len() < tailBytes+10*len(line); s++ {
		fmt.Fprintf(&b, line, s)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := readRun(dir)
	if err != nil || len(tr.Steps) != maxTimelineSteps {
		t.Fatalf("%d steps, %v", len(tr.Steps), err)
	}
}

// FuzzReadTimeline: any bytes give timelines or an error, never a panic.
func FuzzReadTimeline(f *testing.F) {
	f.Add([]byte(timelineLines))
	f.Add([]byte(`{"kind":"step","step":1,"timeline":{"a":{"train":1e308}}}`))
	f.Add([]byte(`{"kind":"step","step":1,"timeline":{"a":[1,2]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		steps, _ := ReadTimeline(strings.NewReader(string(data)), 3)
		if len(steps) > 3 {
			t.Fatalf("%d steps, want at most 3", len(steps))
		}
	})
}
