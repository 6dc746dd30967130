package trainer

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Bar is a one-line progress bar redrawn in place with '\r'.
type Bar struct {
	w     io.Writer
	total int
	start time.Time
	last  string
}

// NewBar starts a bar of total steps on w (nil: a bar that prints nothing).
func NewBar(w io.Writer, total int) *Bar { return &Bar{w: w, total: total, start: time.Now()} }

// Update redraws the bar at step done with a status text.
func (b *Bar) Update(done int, status string) {
	if b.w == nil {
		return
	}
	const width = 24
	fill := 0
	if b.total > 0 {
		fill = done * width / b.total
	}
	el := time.Since(b.start)
	eta := time.Duration(0)
	if done > 0 {
		eta = time.Duration(float64(el) / float64(done) * float64(b.total-done))
	}
	b.last = fmt.Sprintf("\r[%s%s] %d/%d %s  %s<%s ", strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		done, b.total, status, el.Round(time.Second), eta.Round(time.Second))
	fmt.Fprint(b.w, b.last)
}

// Note prints a line above the bar and redraws it.
func (b *Bar) Note(msg string) {
	if b.w == nil {
		return
	}
	fmt.Fprintf(b.w, "\r\033[K%s\n%s", msg, b.last)
}

// Done ends the bar's line.
func (b *Bar) Done() {
	if b.w != nil {
		fmt.Fprintln(b.w)
	}
}
