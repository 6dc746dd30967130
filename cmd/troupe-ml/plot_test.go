package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeMetrics(t *testing.T, dir string, steps int) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	var b strings.Builder
	for s := 0; s <= steps; s++ {
		fmt.Fprintf(&b, `{"kind":"step","step":%d,"reward":%g,"success":0.5,"clip_frac":0.1,"approx_kl":0.01,"tokens_per_s":4000}`+"\n", s, 0.1*float64(s))
	}
	fmt.Fprintf(&b, `{"kind":"eval","step":%d,"success":0.9}`+"\n", steps)
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPlotCommand: troupe plot draws one run into its directory and
// overlays several into -o; a directory without metrics is named.
func TestPlotCommand(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a", "run"), filepath.Join(root, "b", "run")
	writeMetrics(t, a, 8)
	writeMetrics(t, b, 12)
	if code := run([]string{"plot", a}); code != 0 {
		t.Fatalf("plot one run: exit %d", code)
	}
	for _, f := range []string{"curves.png", "curves.svg"} {
		if _, err := os.Stat(filepath.Join(a, f)); err != nil {
			t.Error(err)
		}
	}
	out := filepath.Join(root, "compare")
	if code := run([]string{"plot", "-o", out + ".png", a, b}); code != 0 {
		t.Fatalf("plot two runs: exit %d", code)
	}
	svg, err := os.ReadFile(out + ".svg")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(svg), "b/run") {
		t.Error("the second run named run is not told apart by its parent directory")
	}
	if code := run([]string{"plot", filepath.Join(root, "nothing")}); code != 1 {
		t.Errorf("plot of a directory without metrics.jsonl: exit %d, want 1", code)
	}
}
