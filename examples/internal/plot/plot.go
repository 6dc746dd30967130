// Package plot draws simple line charts (axes, ticks, lines, a legend) as PNG
// with only the standard library: text is rendered from a built-in 5×7
// bitmap font, upper-cased. It exists so the training scripts can show
// their learning curves without dependencies.
package plot

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
)

// ErrNoData reports a chart without any point.
var ErrNoData = errors.New("plot: no data")

// XY is one point.
type XY struct{ X, Y float64 }

// Series is one line.
type Series struct {
	Name   string
	Points []XY
	Marker bool // draw a small square at every point
}

// Chart is a line chart.
type Chart struct {
	Title  string
	XLabel string
	Series []Series
	// YMin/YMax fix the y range when YMax > YMin; otherwise it is fitted.
	YMin, YMax float64
}

var palette = []color.RGBA{
	{214, 39, 40, 255},  // red
	{31, 119, 180, 255}, // blue
	{44, 160, 44, 255},  // green
	{255, 127, 14, 255}, // orange
	{148, 103, 189, 255},
	{23, 190, 207, 255},
}

// Render draws the chart into a w×h image.
func (c Chart) Render(w, h int) (*image.RGBA, error) {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	n := 0
	for _, s := range c.Series {
		for _, p := range s.Points {
			if math.IsNaN(p.X) || math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
				continue
			}
			xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
			ymin, ymax = math.Min(ymin, p.Y), math.Max(ymax, p.Y)
			n++
		}
	}
	if n == 0 {
		return nil, ErrNoData
	}
	if c.YMax > c.YMin {
		ymin, ymax = c.YMin, c.YMax
	} else {
		ymin, ymax = math.Min(ymin, 0), math.Max(ymax, 1)
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	const sc = 2 // font scale
	// The legend sits above the plot area, wrapped into rows, so it never
	// hides data.
	type entry struct{ x, row int }
	entries := make([]entry, len(c.Series))
	x0, row := 70, 0
	for i, s := range c.Series {
		ew := 30 + len(s.Name)*6*sc + 20
		if x0+ew > w-10 && x0 > 70 {
			x0, row = 70, row+1
		}
		entries[i] = entry{x0, row}
		x0 += ew
	}
	legendTop := 34
	left, right, top, bottom := 70, 20, legendTop+(row+1)*11*sc+12, 50
	pw, ph := w-left-right, h-top-bottom
	if pw < 50 || ph < 50 {
		return nil, fmt.Errorf("plot: image %dx%d too small", w, h)
	}
	px := func(x float64) int { return left + int(math.Round((x-xmin)/(xmax-xmin)*float64(pw))) }
	py := func(y float64) int { return top + ph - int(math.Round((y-ymin)/(ymax-ymin)*float64(ph))) }
	black := color.RGBA{0, 0, 0, 255}
	grey := color.RGBA{225, 225, 225, 255}
	// grid and ticks
	for _, t := range ticks(ymin, ymax, 6) {
		y := py(t)
		line(img, left, y, left+pw, y, grey, 1)
		lab := fmtTick(t)
		text(img, left-8-len(lab)*6*sc, y-3*sc, lab, black, sc)
	}
	for _, t := range ticks(xmin, xmax, 8) {
		x := px(t)
		line(img, x, top, x, top+ph, grey, 1)
		lab := fmtTick(t)
		text(img, x-len(lab)*3*sc, top+ph+8, lab, black, sc)
	}
	line(img, left, top, left, top+ph, black, 1)
	line(img, left, top+ph, left+pw, top+ph, black, 1)
	if ymin < 0 && ymax > 0 {
		line(img, left, py(0), left+pw, py(0), color.RGBA{150, 150, 150, 255}, 1)
	}
	text(img, left, 12, c.Title, black, sc)
	text(img, left+pw/2-len(c.XLabel)*3*sc, h-20, c.XLabel, black, sc)
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		for j, p := range s.Points {
			if j > 0 {
				q := s.Points[j-1]
				line(img, px(q.X), py(q.Y), px(p.X), py(p.Y), col, 2)
			}
			if s.Marker {
				fill(img, image.Rect(px(p.X)-3, py(p.Y)-3, px(p.X)+4, py(p.Y)+4), col)
			}
		}
	}
	// legend
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		e := entries[i]
		y := legendTop + e.row*11*sc + 3*sc
		line(img, e.x, y, e.x+22, y, col, 3)
		text(img, e.x+30, y-3*sc, s.Name, black, sc)
	}
	return img, nil
}

// WritePNG renders the chart and writes it to path.
func (c Chart) WritePNG(path string, w, h int) error {
	img, err := c.Render(w, h)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("plot: encode %s: %w", path, err)
	}
	return f.Close()
}

func ticks(lo, hi float64, n int) []float64 {
	span := hi - lo
	if span <= 0 {
		return []float64{lo}
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for t := math.Ceil(lo/step) * step; t <= hi+step*1e-9; t += step {
		out = append(out, t)
	}
	return out
}

func fmtTick(t float64) string {
	if math.Abs(t) < 1e-12 {
		return "0"
	}
	s := fmt.Sprintf("%.2f", t)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func rect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	line(img, r.Min.X, r.Min.Y, r.Max.X, r.Min.Y, c, 1)
	line(img, r.Min.X, r.Max.Y, r.Max.X, r.Max.Y, c, 1)
	line(img, r.Min.X, r.Min.Y, r.Min.X, r.Max.Y, c, 1)
	line(img, r.Max.X, r.Min.Y, r.Max.X, r.Max.Y, c, 1)
}

// line draws a Bresenham line of the given thickness.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, thick int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		fill(img, image.Rect(x0-(thick-1)/2, y0-(thick-1)/2, x0+thick/2+1, y0+thick/2+1), c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// text draws s (upper-cased; unknown characters as blanks) with its top-left
// corner at (x, y), each font pixel scale×scale.
func text(img *image.RGBA, x, y int, s string, c color.RGBA, scale int) {
	for _, r := range strings.ToUpper(s) {
		g, ok := font[r]
		if ok {
			for row := 0; row < 7; row++ {
				for col := 0; col < 5; col++ {
					if g[row]&(1<<(4-col)) != 0 {
						fill(img, image.Rect(x+col*scale, y+row*scale, x+(col+1)*scale, y+(row+1)*scale), c)
					}
				}
			}
		}
		x += 6 * scale
	}
}

// font is a classic 5×7 bitmap font: 7 rows of 5 bits, most significant
// bit leftmost.
var font = map[rune][7]byte{
	'0': {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E},
	'1': {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},
	'2': {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F},
	'3': {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},
	'4': {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02},
	'5': {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},
	'6': {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E},
	'7': {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},
	'8': {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E},
	'9': {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},
	'A': {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11},
	'B': {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E},
	'C': {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E},
	'D': {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C},
	'E': {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F},
	'F': {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10},
	'G': {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F},
	'H': {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11},
	'I': {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E},
	'J': {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},
	'K': {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11},
	'L': {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F},
	'M': {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11},
	'N': {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},
	'O': {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E},
	'P': {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10},
	'Q': {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D},
	'R': {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11},
	'S': {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E},
	'T': {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},
	'U': {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E},
	'V': {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04},
	'W': {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A},
	'X': {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11},
	'Y': {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04},
	'Z': {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F},
	'-': {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00},
	'.': {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C},
	'%': {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03},
	'(': {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02},
	')': {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08},
	':': {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00},
	'/': {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00},
	'+': {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00},
	'_': {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F},
	',': {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08},
	'=': {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00},
	'#': {0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A},
}
