package dashboard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
)

// This file shows a training run on the dashboard: the per-step timeline
// (where every policy actor's time went: rollout, train, sync, collective,
// idle) that the trainer appends to the run's metrics.jsonl. The dashboard
// reads the file where the run writes it (Options.RunDir: the driver's
// output directory on this machine); nothing of the training stack is
// linked, only the JSON lines are read.

// Training is the JSON document of GET api/training.
type Training struct {
	Run   string         `json:"run"`
	Steps []TimelineStep `json:"steps"`
}

// TimelineStep is one training step's timeline: seconds by actor
// ("<policy>/<role in the run>") and phase.
type TimelineStep struct {
	Step   int                           `json:"step"`
	Actors map[string]map[string]float64 `json:"actors"`
}

// maxTimelineSteps is how many of the newest steps api/training returns.
const maxTimelineSteps = 60

// tailBytes bounds how much of the end of metrics.jsonl is read per poll.
const tailBytes = 4 << 20

// ErrNoRun reports a run directory without a metrics.jsonl.
var ErrNoRun = errors.New("dashboard: no training run")

// ReadTimeline returns the timelines of the last n step records of the
// metrics.jsonl lines in r, oldest first. Lines that are not JSON objects,
// or records without a timeline, are skipped: the trainer may be writing
// the last line, and evaluations have none. Phases that are not finite
// non-negative numbers are left out.
func ReadTimeline(r io.Reader, n int) ([]TimelineStep, error) {
	var out []TimelineStep
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var rec struct {
			Kind     string                     `json:"kind"`
			Step     int                        `json:"step"`
			Timeline map[string]json.RawMessage `json:"timeline"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Kind != "step" || len(rec.Timeline) == 0 {
			continue
		}
		ts := TimelineStep{Step: rec.Step, Actors: map[string]map[string]float64{}}
		for actor, raw := range rec.Timeline {
			var ph map[string]any
			if json.Unmarshal(raw, &ph) != nil {
				continue
			}
			m := map[string]float64{}
			for k, v := range ph {
				if f, ok := v.(float64); ok && f >= 0 && !math.IsInf(f, 0) {
					m[k] = f
				}
			}
			ts.Actors[actor] = m
		}
		out = append(out, ts)
		if len(out) > n {
			out = out[len(out)-n:]
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("dashboard: read timeline: %w", err)
	}
	return out, nil
}

// readRun reads the newest timelines of the run in dir (the last tailBytes
// of its metrics.jsonl).
func readRun(dir string) (Training, error) {
	t := Training{Run: filepath.Base(dir), Steps: []TimelineStep{}}
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return t, fmt.Errorf("%w in %s (no metrics.jsonl yet)", ErrNoRun, dir)
	}
	if err != nil {
		return t, fmt.Errorf("dashboard: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return t, fmt.Errorf("dashboard: %w", err)
	}
	off := max(0, st.Size()-tailBytes)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return t, fmt.Errorf("dashboard: read %s: %w", f.Name(), err)
	}
	if off > 0 { // the first line is cut: start at the next one
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	steps, err := ReadTimeline(bytes.NewReader(b), maxTimelineSteps)
	if steps != nil {
		t.Steps = steps
	}
	return t, err
}

// serveTraining is GET api/training for the run in dir.
func serveTraining(dir string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		t, err := readRun(dir)
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrNoRun) {
				code = http.StatusNotFound
			}
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(t)
	}
}
