package plot

import (
	"errors"
	"image/color"
	"os"
	"path/filepath"
	"testing"
)

func TestRender(t *testing.T) {
	c := Chart{Title: "t", XLabel: "step", Series: []Series{
		{Name: "a", Points: []XY{{0, 0.1}, {10, 0.9}}, Marker: true},
		{Name: "b", Points: []XY{{0, -0.5}, {10, 0.2}}},
	}}
	img, err := c.Render(400, 300)
	if err != nil {
		t.Fatal(err)
	}
	// Both series' colours appear somewhere in the plot.
	found := map[color.RGBA]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			found[img.RGBAAt(x, y)] = true
		}
	}
	for i := 0; i < 2; i++ {
		if !found[palette[i]] {
			t.Errorf("series %d colour missing", i)
		}
	}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := c.WritePNG(path, 400, 300); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < 100 {
		t.Fatalf("png %v %v", st, err)
	}
	if _, err := (Chart{}).Render(400, 300); !errors.Is(err, ErrNoData) {
		t.Fatalf("empty chart: %v", err)
	}
	if _, err := c.Render(20, 20); err == nil {
		t.Fatal("tiny image accepted")
	}
}

func TestFontCoversLabels(t *testing.T) {
	for _, r := range "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-.%():/+_,=#" {
		if _, ok := font[r]; !ok {
			t.Errorf("no glyph for %q", r)
		}
	}
}

func TestTicks(t *testing.T) {
	got := ticks(0, 1, 5)
	if len(got) != 6 || got[0] != 0 || got[5] < 0.999 {
		t.Fatalf("ticks(0,1,5) = %v", got)
	}
}
