// Package curves draws the learning curves of training runs from their
// metrics.jsonl files with gonum.org/v1/plot: one panel per quantity
// (success, reward, clip fraction, KL, tokens/s and whatever else the run
// logged), several runs overlaid in one figure for comparison, written as
// PNG and SVG. The training scripts call it at the end of a run, and
// `troupe plot` calls it on run directories.
package curves

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// MetricsFile is the name of a run's metrics log in its directory.
const MetricsFile = "metrics.jsonl"

// ErrNoData: no run has any point to draw.
var ErrNoData = errors.New("curves: no training steps or evaluations to plot")

// maxValue bounds the values plotted.
const maxValue = 1e12

// Record is one line of metrics.jsonl: its kind ("step", "eval", "warm")
// and its numeric fields by JSON name.
type Record struct {
	Kind   string
	Step   float64
	Fields map[string]float64
	// Timeline is the step's time by actor and phase, in seconds (see
	// TimelinePhases); nil when the line has none.
	Timeline map[string]map[string]float64
}

// Run is one training run's metrics.
type Run struct {
	// Name labels the run in figures (its directory's name by default).
	Name    string
	Records []Record
}

// ReadRun reads dir/metrics.jsonl. A line that is not a JSON object is an
// error naming the file and line; fields that are not numbers are
// ignored.
func ReadRun(dir string) (*Run, error) {
	path := filepath.Join(dir, MetricsFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read run: %w", err)
	}
	defer f.Close()
	r, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", path, err)
	}
	abs, _ := filepath.Abs(dir)
	r.Name = filepath.Base(abs)
	return r, nil
}

// Parse reads metrics.jsonl lines from r.
func Parse(r io.Reader) (*Run, error) {
	run := &Run{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		rec := Record{Fields: map[string]float64{}}
		rec.Kind, _ = m["kind"].(string)
		rec.Timeline = parseTimeline(m["timeline"])
		for k, v := range m {
			// Values beyond ±maxValue are no metric (and would overflow the
			// axis arithmetic): left out like a missing field.
			if x, ok := v.(float64); ok && math.Abs(x) <= maxValue {
				rec.Fields[k] = x
			}
		}
		step, ok := rec.Fields["step"]
		if !ok {
			return nil, fmt.Errorf("line %d: no step number (or one beyond ±%g)", line, maxValue)
		}
		rec.Step = step
		run.Records = append(run.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return run, nil
}

// Series is one curve of a panel: the values of Field in the records of
// Kind.
type Series struct {
	Kind string // "step" (training batches) or "eval" (held-out evaluations)
	// Field is the JSON field name, or names separated by "|" when
	// different runs may log the quantity under different names: a run's
	// curve is its first field with data.
	Field string
}

// Panel is one chart of a figure.
type Panel struct {
	Title  string
	YLabel string
	Series []Series
	// Unit fixes the y range to [0, 1].
	Unit bool
}

// StandardPanels are the panels a figure may have, in order; a panel is
// drawn when one of its series has a point in some run. Fields the
// algorithms may log under two names are listed under both.
var StandardPanels = []Panel{
	{Title: "success", YLabel: "success rate", Unit: true, Series: []Series{{"eval", "success"}, {"step", "success"}}},
	{Title: "reward", YLabel: "return", Series: []Series{{"step", "reward"}, {"eval", "team_return"}}},
	{Title: "clip fraction", YLabel: "share of tokens clipped", Series: []Series{{"step", "clip_frac"}}},
	{Title: "KL", YLabel: "approx. KL", Series: []Series{{"step", "approx_kl|kl"}}},
	{Title: "throughput", YLabel: "tokens/s", Series: []Series{{"step", "tokens_per_s"}}},
	{Title: "entropy", YLabel: "nats per token", Series: []Series{{"step", "entropy"}}},
	{Title: "gradient norm", YLabel: "‖g‖", Series: []Series{{"step", "grad_norm"}}},
	{Title: "zero-advantage share", YLabel: "share of samples", Unit: true, Series: []Series{{"step", "zero_adv_frac|adv_zero"}}},
	{Title: "loss", YLabel: "loss", Series: []Series{{"step", "loss"}}},
	{Title: "invalid actions", YLabel: "share of actions", Unit: true, Series: []Series{{"eval", "invalid"}}},
}

// points returns the (step, value) points of s in r, in step order.
func (r *Run) points(s Series) plotter.XYs {
	for _, field := range strings.Split(s.Field, "|") {
		var xy plotter.XYs
		for _, rec := range r.Records {
			if rec.Kind != s.Kind {
				continue
			}
			if v, ok := rec.Fields[field]; ok {
				xy = append(xy, plotter.XY{X: rec.Step, Y: v})
			}
		}
		if len(xy) > 0 {
			sort.SliceStable(xy, func(i, j int) bool { return xy[i].X < xy[j].X })
			return xy
		}
	}
	return nil
}

// stepRange is the range of steps over all runs' steps and evaluations.
func stepRange(runs []*Run) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, r := range runs {
		for _, rec := range r.Records {
			if rec.Kind == "step" || rec.Kind == "eval" {
				lo, hi = math.Min(lo, rec.Step), math.Max(hi, rec.Step)
			}
		}
	}
	if lo > hi {
		return 0, 1
	}
	if lo == hi {
		hi = lo + 1
	}
	return lo, hi
}

// Panels returns the standard panels with data in some run, each with the
// series that have points.
func Panels(runs []*Run) []Panel {
	var out []Panel
	for _, p := range StandardPanels {
		q := p
		q.Series = nil
		for _, s := range p.Series {
			for _, r := range runs {
				if len(r.points(s)) > 0 {
					q.Series = append(q.Series, s)
					break
				}
			}
		}
		if len(q.Series) > 0 {
			out = append(out, q)
		}
	}
	return out
}

// Options size a figure.
type Options struct {
	Title string
	// Cols is the number of panel columns (default 2).
	Cols int
	// Width and PanelHeight size the figure (default 11 × 3.2 inches).
	Width, PanelHeight vg.Length
	// DPI is the PNG resolution (default 110).
	DPI int
}

func (o *Options) defaults() {
	if o.Cols <= 0 {
		o.Cols = 2
	}
	if o.Width <= 0 {
		o.Width = 11 * vg.Inch
	}
	if o.PanelHeight <= 0 {
		o.PanelHeight = 3.2 * vg.Inch
	}
	if o.DPI <= 0 {
		o.DPI = 110
	}
}

// runColors are the runs' colors (the Tableau 10 palette), in order.
var runColors = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255}, {148, 103, 189, 255},
	{140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255}, {23, 190, 207, 255},
}

func runColor(i int) color.Color { return runColors[i%len(runColors)] }

// style draws a series: evaluations as a thick line with dots, training
// steps as a thin line.
func style(kind string, c color.Color) (draw.LineStyle, *draw.GlyphStyle) {
	if kind == "eval" {
		return draw.LineStyle{Color: c, Width: vg.Points(2)}, &draw.GlyphStyle{Color: c, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
	}
	return draw.LineStyle{Color: c, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(2)}}, nil
}

// seriesLabel names a series in a legend.
func seriesLabel(s Series) string {
	if s.Kind == "eval" {
		return "held-out evaluation"
	}
	return "training steps"
}

// figure lays the panels of runs out on a canvas c of size w × h.
func figure(c draw.Canvas, runs []*Run, panels []Panel, o Options) error {
	// Top strip: the title and a legend of runs (colors) and series
	// (line styles); below, the panels in a grid.
	const titleSize, legendLine = 14, 13
	kinds := map[string]bool{}
	for _, p := range panels {
		for _, s := range p.Series {
			kinds[s.Kind] = true
		}
	}
	lines := max(len(runs), len(kinds))
	if len(runs) == 1 {
		lines = len(kinds)
	}
	stripH := vg.Points(titleSize+8) + vg.Points(float64(legendLine*lines)+6)
	top := draw.Crop(c, 0, 0, c.Size().Y-stripH, 0)
	grid := draw.Crop(c, 0, 0, 0, -stripH)

	title := plot.New()
	title.Title.Text = o.Title
	title.Title.TextStyle.Font.Size = vg.Points(titleSize)
	title.HideAxes()
	title.Draw(draw.Crop(top, 0, 0, vg.Points(float64(legendLine*lines)+6), 0))

	legendArea := draw.Crop(top, 0, 0, 0, -vg.Points(titleSize+8))
	if len(runs) > 1 {
		lr := plot.NewLegend()
		lr.Left, lr.Top = true, true
		lr.XOffs = vg.Points(40)
		for i, r := range runs {
			ls, _ := style("step", runColor(i))
			ls.Dashes, ls.Width = nil, vg.Points(3)
			lr.Add(r.Name, lineThumb{ls})
		}
		lr.Draw(legendArea)
	}
	ls := plot.NewLegend()
	ls.Left, ls.Top = len(runs) == 1, true
	ls.XOffs = vg.Points(40)
	if len(runs) > 1 {
		ls.Left, ls.XOffs = false, -vg.Points(40)
	}
	gray := color.Gray{Y: 60}
	if len(runs) == 1 {
		gray = color.Gray{}
	}
	for _, k := range []string{"eval", "step"} {
		if kinds[k] {
			l, g := style(k, gray)
			if len(runs) == 1 {
				l.Color = runColor(0)
				if g != nil {
					g.Color = runColor(0)
				}
			}
			ls.Add(seriesLabel(Series{Kind: k}), lineThumb{l}, glyphThumb{g})
		}
	}
	ls.Draw(legendArea)

	xlo, xhi := stepRange(runs)    // one step axis for every panel
	tl, err := timelinePlots(runs) // beside the curves: where the time went
	if err != nil {
		return err
	}
	rows := (len(panels) + len(tl) + o.Cols - 1) / o.Cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, o.Cols)
	}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.Title
		p.X.Label.Text = "RL step"
		p.Y.Label.Text = pn.YLabel
		p.Add(plotter.NewGrid())
		for ri, r := range runs {
			for _, s := range pn.Series {
				xy := r.points(s)
				if len(xy) == 0 {
					continue
				}
				l, err := plotter.NewLine(xy)
				if err != nil {
					return fmt.Errorf("%s: %s %s: %w", r.Name, s.Kind, s.Field, err)
				}
				l.LineStyle, _ = style(s.Kind, runColor(ri))
				p.Add(l)
				if _, g := style(s.Kind, runColor(ri)); g != nil {
					sc, err := plotter.NewScatter(xy)
					if err != nil {
						return err
					}
					sc.GlyphStyle = *g
					p.Add(sc)
				}
			}
		}
		p.X.Min, p.X.Max = xlo, xhi
		p.Y.Tick.Marker = shortTicks{}
		if pn.Unit {
			p.Y.Min, p.Y.Max = 0, 1
		}
		plots[i/o.Cols][i%o.Cols] = p
	}
	for i, p := range tl {
		k := len(panels) + i
		plots[k/o.Cols][k%o.Cols] = p
	}
	tiles := draw.Tiles{Rows: rows, Cols: o.Cols, PadX: vg.Points(18), PadY: vg.Points(14), PadTop: vg.Points(4),
		PadBottom: vg.Points(6), PadLeft: vg.Points(8), PadRight: vg.Points(12)}
	canvases := plot.Align(plots, tiles, grid)
	for i := range plots {
		for j, p := range plots[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	return nil
}

// shortTicks are gonum's default ticks labelled plainly between 0.001
// and a million ("10000", "0.06") and with three significant digits
// outside ("6.34e-18", not "6.34138e-18").
type shortTicks struct{}

func (shortTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label == "" {
			continue
		}
		v := ts[i].Value
		if a := math.Abs(v); a == 0 || (a >= 1e-3 && a < 1e6) {
			ts[i].Label = strconv.FormatFloat(v, 'g', 6, 64) // 1.5, not 1.5000000000000002
		} else {
			ts[i].Label = strconv.FormatFloat(v, 'g', 3, 64)
		}
	}
	return ts
}

// lineThumb and glyphThumb draw legend thumbnails.
type lineThumb struct{ s draw.LineStyle }

func (t lineThumb) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(t.s, c.Min.X, y, c.Max.X, y)
}

type glyphThumb struct{ g *draw.GlyphStyle }

func (t glyphThumb) Thumbnail(c *draw.Canvas) {
	if t.g != nil {
		c.DrawGlyph(*t.g, c.Center())
	}
}

// Draw renders runs into a PNG and an SVG figure (the paths written are
// base+".png" and base+".svg"). The title defaults to the runs' names.
func Draw(base string, runs []*Run, o Options) error {
	o.defaults()
	panels := Panels(runs)
	if len(panels) == 0 {
		return ErrNoData
	}
	if o.Title == "" {
		var names []string
		for _, r := range runs {
			names = append(names, r.Name)
		}
		o.Title = strings.Join(names, " vs ")
	}
	tl, err := timelinePlots(runs)
	if err != nil {
		return err
	}
	rows := (len(panels) + len(tl) + o.Cols - 1) / o.Cols
	lines := max(len(runs), 2)
	h := vg.Length(rows)*o.PanelHeight + vg.Points(float64(22+13*lines+6))
	svg := vgsvg.New(o.Width, h)
	if err := figure(draw.New(svg), runs, panels, o); err != nil {
		return err
	}
	png := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(o.Width, h), vgimg.UseDPI(o.DPI))}
	if err := figure(draw.New(png), runs, panels, o); err != nil {
		return err
	}
	for ext, w := range map[string]io.WriterTo{".svg": svg, ".png": png} {
		if err := writeFile(base+ext, w); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, w io.WriterTo) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("curves: %w", err)
	}
	bw := bufio.NewWriter(f)
	_, err = w.WriteTo(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("curves: write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
