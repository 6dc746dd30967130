package curves

import (
	"fmt"
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// TimelinePhases are the phases of a step's timeline (metrics.jsonl's
// "timeline": {"<policy>/<actor>": {"rollout": s, ...}}), bottom to top of
// the stacked plot.
var TimelinePhases = []string{"rollout", "train", "sync", "collective", "idle"}

// maxTimelineSteps bounds the steps a timeline chart spans (a bar each).
const maxTimelineSteps = 1 << 16

// phaseColors are the phases' colors, in TimelinePhases' order.
var phaseColors = []color.RGBA{{31, 119, 180, 255}, {44, 160, 44, 255}, {255, 127, 14, 255}, {148, 103, 189, 255}, {199, 199, 199, 255}}

// parseTimeline reads a record's "timeline" object; nil when it has none.
// Values that are not numbers, or beyond ±maxValue, are left out.
func parseTimeline(v any) map[string]map[string]float64 {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := map[string]map[string]float64{}
	for actor, pv := range m {
		pm, ok := pv.(map[string]any)
		if !ok {
			continue
		}
		ph := map[string]float64{}
		for k, x := range pm {
			if f, ok := x.(float64); ok && math.Abs(f) <= maxValue && f >= 0 {
				ph[k] = f
			}
		}
		out[actor] = ph
	}
	return out
}

// timelineActors lists the actors of r's step timelines, sorted.
func (r *Run) timelineActors() []string {
	seen := map[string]bool{}
	for _, rec := range r.Records {
		if rec.Kind != "step" {
			continue
		}
		for a := range rec.Timeline {
			seen[a] = true
		}
	}
	out := make([]string, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// timelinePlots draws, for every run and every actor of its timelines, a
// stacked bar chart of the seconds per step in each phase. Steps where an
// actor reported nothing get an empty bar.
func timelinePlots(runs []*Run) ([]*plot.Plot, error) {
	var out []*plot.Plot
	for _, r := range runs {
		actors := r.timelineActors()
		if len(actors) == 0 {
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, rec := range r.Records {
			if rec.Kind == "step" && rec.Timeline != nil {
				lo, hi = math.Min(lo, rec.Step), math.Max(hi, rec.Step)
			}
		}
		if hi-lo >= maxTimelineSteps {
			return nil, fmt.Errorf("curves: %s: timelines over steps %g..%g, more than %d", r.Name, lo, hi, maxTimelineSteps)
		}
		n := int(hi-lo) + 1
		for _, a := range actors {
			p := plot.New()
			p.Title.Text = "time per step: " + a
			if len(runs) > 1 {
				p.Title.Text = r.Name + ": " + p.Title.Text
			}
			p.X.Label.Text = "RL step"
			p.Y.Label.Text = "seconds"
			p.Y.Tick.Marker = shortTicks{}
			p.Legend.Top, p.Legend.Left = true, true
			p.Legend.TextStyle.Font.Size = vg.Points(8)
			var below *plotter.BarChart
			for i, ph := range TimelinePhases {
				vals := make(plotter.Values, n)
				any := false
				for _, rec := range r.Records {
					if rec.Kind != "step" || rec.Timeline == nil {
						continue
					}
					if v, ok := rec.Timeline[a][ph]; ok {
						vals[int(rec.Step-lo)] = v
						any = any || v > 0
					}
				}
				if !any {
					continue
				}
				bc, err := plotter.NewBarChart(vals, vg.Points(math.Max(1, 300/float64(n))))
				if err != nil {
					return nil, fmt.Errorf("%s: timeline %s %s: %w", r.Name, a, ph, err)
				}
				bc.XMin = lo
				bc.Color = phaseColors[i]
				bc.LineStyle.Width = 0
				if below != nil {
					bc.StackOn(below)
				}
				below = bc
				p.Add(bc)
				p.Legend.Add(ph, bc)
			}
			if below == nil {
				continue
			}
			p.X.Min, p.X.Max = lo-0.5, hi+0.5
			out = append(out, p)
		}
	}
	return out, nil
}
