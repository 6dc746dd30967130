package curves

import (
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeRun writes a metrics.jsonl of steps steps (with an evaluation every
// 5) into a new directory named name; extra fields are added to steps.
func writeRun(t *testing.T, name string, steps int, extra string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	os.MkdirAll(dir, 0o755)
	var b strings.Builder
	b.WriteString(`{"kind":"warm","step":0,"success":0}` + "\n")
	b.WriteString(`{"kind":"eval","step":0,"success":0.5,"team_return":0.4,"adv_zero":0,"elapsed_s":1}` + "\n")
	for s := 1; s <= steps; s++ {
		fmt.Fprintf(&b, `{"kind":"step","step":%d,"reward":%g,"success":%g,"tokens_per_s":%d,"adv_zero":0.25,"elapsed_s":%d%s}`+"\n",
			s, 0.1*float64(s), 0.5+0.01*float64(s), 4000+s, s, extra)
		if s%5 == 0 {
			fmt.Fprintf(&b, `{"kind":"eval","step":%d,"success":%g,"team_return":0.5,"invalid":0.02}`+"\n", s, 0.5+0.02*float64(s))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadRun(t *testing.T) {
	r, err := ReadRun(writeRun(t, "run-a", 10, ""))
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "run-a" || len(r.Records) != 14 {
		t.Fatalf("run %q with %d records, want run-a with 14", r.Name, len(r.Records))
	}
	if xy := r.points(Series{"eval", "success"}); len(xy) != 3 || xy[2].X != 10 || xy[2].Y != 0.7 {
		t.Errorf("held-out success points %v", xy)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, MetricsFile), []byte(`{"kind":"step","step":1}`+"\n"+`{"kind":"step",`+"\n"), 0o644)
	if _, err := ReadRun(dir); err == nil || !strings.Contains(err.Error(), "metrics.jsonl: line 2") {
		t.Errorf("truncated line: %v, want the file and line named", err)
	}
	os.WriteFile(filepath.Join(dir, MetricsFile), []byte(`{"kind":"step","success":1}`+"\n"), 0o644)
	if _, err := ReadRun(dir); err == nil || !strings.Contains(err.Error(), "line 1: no step") {
		t.Errorf("line without a step: %v", err)
	}
	if _, err := ReadRun(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory without metrics: %v", err)
	}
}

// TestPanels: a panel is drawn when some run has its quantity, under
// either of its names; one logged by no run is left out.
func TestPanels(t *testing.T) {
	plain, _ := ReadRun(writeRun(t, "plain", 6, ""))
	rich, _ := ReadRun(writeRun(t, "rich", 6, `,"clip_frac":0.1,"kl":0.01,"grad_norm":2,"entropy":1.5`))
	titles := func(runs ...*Run) string {
		var s []string
		for _, p := range Panels(runs) {
			s = append(s, p.Title)
		}
		return strings.Join(s, ", ")
	}
	if got := titles(plain); got != "success, reward, throughput, zero-advantage share, invalid actions" {
		t.Errorf("panels of a run without the new fields: %s", got)
	}
	if got := titles(plain, rich); got != "success, reward, clip fraction, KL, throughput, entropy, gradient norm, zero-advantage share, invalid actions" {
		t.Errorf("panels of both runs: %s", got)
	}
	if xy := rich.points(Series{"step", "approx_kl|kl"}); len(xy) != 6 {
		t.Errorf("KL logged as kl: %d points", len(xy))
	}
}

// TestDraw: one run and an overlay of two give a PNG and an SVG that
// decode, with a panel per quantity.
func TestDraw(t *testing.T) {
	a, _ := ReadRun(writeRun(t, "run-a", 20, `,"clip_frac":0.1,"approx_kl":0.01`))
	b, _ := ReadRun(writeRun(t, "run-b", 12, ""))
	out := t.TempDir()
	for name, runs := range map[string][]*Run{"one": {a}, "two": {a, b}} {
		base := filepath.Join(out, name)
		if err := Draw(base, runs, Options{}); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(base + ".png")
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s.png: %v", name, err)
		}
		if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w != 1210 || h < 1000 {
			t.Errorf("%s.png is %d×%d", name, w, h)
		}
		svg, err := os.ReadFile(base + ".svg")
		if err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(strings.NewReader(string(svg)))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s.svg: %v", name, err)
			}
		}
		for _, want := range []string{"clip fraction", "throughput", "run-a"} {
			if !strings.Contains(string(svg), want) {
				t.Errorf("%s.svg has no %q", name, want)
			}
		}
	}
	if err := Draw(filepath.Join(out, "none"), []*Run{{Name: "empty"}}, Options{}); !errors.Is(err, ErrNoData) {
		t.Errorf("a run without data: %v, want ErrNoData", err)
	}
}

// FuzzParse: any bytes as metrics.jsonl give a run or an error, never a
// panic, and a parsed run draws or reports no data.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"kind":"step","step":1,"reward":0.5}` + "\n" + `{"kind":"eval","step":1,"success":1}`))
	f.Add([]byte(`{"kind":"step","step":1e308,"reward":-1e308}`))
	f.Add([]byte("\n\n{}"))
	f.Add([]byte(`{"kind":"step","step":1,"timeline":{"a/learner":{"train":0.5,"idle":0.1}}}` + "\n" + `{"kind":"step","step":1e12,"timeline":{"a/learner":{"train":1}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		_, _ = timelinePlots([]*Run{r})
		for _, p := range Panels([]*Run{r}) {
			for _, s := range p.Series {
				r.points(s)
			}
		}
	})
}

// TestDrawOddData: a single point, huge values and equal values draw.
func TestDrawOddData(t *testing.T) {
	for i, data := range []string{
		`{"kind":"step","step":1,"reward":0.5}`,
		`{"kind":"step","step":1e11,"reward":-1e308}` + "\n" + `{"kind":"step","step":-1e11,"reward":1e11}` + "\n" + `{"kind":"step","step":0,"reward":-1e11}`,
		`{"kind":"eval","step":3,"success":2}` + "\n" + `{"kind":"eval","step":3,"success":2}`,
	} {
		r, err := Parse(strings.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := Draw(filepath.Join(t.TempDir(), "c"), []*Run{r}, Options{}); err != nil {
			t.Errorf("data %d: %v", i, err)
		}
	}
	if _, err := Parse(strings.NewReader(`{"kind":"step","step":1e308}`)); err == nil {
		t.Error("step 1e308 accepted")
	}
}
