package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"troupe/cmd/internal/cli"
	"troupe/internal/curves"
)

const plotHelp = `Draws learning curves from the metrics.jsonl of each RUN_DIR (the --out
directory of a training script, runs/<script> by default) with
gonum.org/v1/plot, as PNG and SVG: held-out success, reward, clip
fraction, KL, tokens/s, and the other quantities the runs logged (entropy,
gradient norm, zero-advantage share, loss), one panel each. Several runs
are overlaid, one color per run, to compare them.

Examples:
  troupe plot runs/planpath-atgrpo                  writes runs/planpath-atgrpo/curves.{png,svg}
  troupe plot -o compare runs/a runs/b runs/c       writes compare.png and compare.svg
`

func runPlot(ctx context.Context, args []string) error {
	fs := newFlagSet("plot", "[-o OUT] RUN_DIR [RUN_DIR...]", plotHelp)
	out := fs.String("o", "", "output path without extension (default: RUN_DIR/curves for one run, ./curves for several)")
	title := fs.String("title", "", "figure title (default: the runs' names)")
	cols := fs.Int("cols", 2, "panels per row")
	var dirs []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return cli.ErrUsage
		}
		if fs.NArg() == 0 {
			break
		}
		dirs = append(dirs, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(dirs) == 0 {
		fmt.Fprintln(fs.Output(), "troupe plot: no RUN_DIR given")
		fs.Usage()
		return cli.ErrUsage
	}
	if *cols < 1 {
		return fmt.Errorf("--cols %d: want at least 1", *cols)
	}
	var runs []*curves.Run
	seen := map[string]int{}
	for _, d := range dirs {
		r, err := curves.ReadRun(d)
		if err != nil {
			return err
		}
		// Two runs of the same name (a/x, b/x) are told apart by their
		// parent directory.
		if seen[r.Name]++; seen[r.Name] > 1 {
			abs, _ := filepath.Abs(d)
			r.Name = filepath.Base(filepath.Dir(abs)) + "/" + r.Name
		}
		runs = append(runs, r)
	}
	base := *out
	if base == "" {
		base = "curves"
		if len(runs) == 1 {
			base = filepath.Join(dirs[0], "curves")
		}
	}
	base = strings.TrimSuffix(strings.TrimSuffix(base, ".png"), ".svg")
	if err := curves.Draw(base, runs, curves.Options{Title: *title, Cols: *cols}); err != nil {
		return err
	}
	fmt.Printf("wrote %s.png and %s.svg (%d run(s))\n", base, base, len(runs))
	return nil
}
