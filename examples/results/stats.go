package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"troupe/algorithms/trainer"
)

// meanSE is the mean of xs and its standard error across them
// (sample sd / √n; 0 for fewer than two).
func meanSE(xs []float64) (mean, se float64) {
	n := float64(len(xs))
	if n == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= n
	if n < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / (n - 1) / n)
}

// pairedGrid is the mean per-grid difference a − b of two evaluations of
// the same grids and its standard error over the grids (evaluation noise
// only; ok false when either lacks per-grid outcomes or they differ in n).
func pairedGrid(a, b []bool) (d, se float64, ok bool) {
	if len(a) == 0 || len(a) != len(b) {
		return 0, 0, false
	}
	ds := make([]float64, len(a))
	for i := range a {
		ds[i] = b2f(a[i]) - b2f(b[i])
	}
	d, se = meanSE(ds)
	return d, se, true
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// testOf is a run's final or warm-start test.
func testOf(o outcome, warm bool) *trainer.Test {
	if warm {
		return o.Result.WarmTest
	}
	return o.Result.FinalTest
}

// summary is one table cell over seeds: mean greedy and sampled test
// success across seeds with their standard errors, or with one seed the
// binomial standard error over the grids.
type summary struct {
	seeds                 int
	greedy, greedySE      float64
	sampled, sampledSE    float64
	validation            float64
	n                     int // test grids per run
	wall                  time.Duration
	reused                float64
	binomial              bool // one seed: the SE is the grids' binomial one
	steps, params, policy int
}

func summarize(runs []outcome, warm bool) summary {
	var s summary
	var g, sa, val []float64
	for _, o := range runs {
		t := testOf(o, warm)
		if t == nil {
			continue
		}
		g, sa = append(g, t.Greedy.Success), append(sa, t.Sampled.Success)
		s.reused += t.Greedy.Reused
		if warm {
			val = append(val, o.Result.WarmSuccess)
			s.wall += o.Result.WarmWall
		} else {
			val = append(val, o.Result.Final.Success)
			s.wall += o.Result.Wall
		}
		s.n = t.Greedy.Episodes
		s.steps, s.params, s.policy = o.Result.Steps, o.Result.Params, o.Result.Policies
	}
	s.seeds = len(g)
	if s.seeds == 0 {
		return s
	}
	s.greedy, s.greedySE = meanSE(g)
	s.sampled, s.sampledSE = meanSE(sa)
	s.validation, _ = meanSE(val)
	s.reused /= float64(s.seeds)
	s.wall /= time.Duration(s.seeds)
	if s.seeds == 1 {
		s.binomial = true
		s.greedySE = math.Sqrt(s.greedy * (1 - s.greedy) / float64(max(1, s.n)))
		s.sampledSE = math.Sqrt(s.sampled * (1 - s.sampled) / float64(max(1, s.n)))
	}
	return s
}

// cellText renders a success mean with its SE and the number of seeds.
func cellText(m, se float64, seeds int, binomial bool) string {
	if binomial {
		return fmt.Sprintf("%s ± %.1f (1 seed, grids' SE)", pct(m), 100*se)
	}
	return fmt.Sprintf("%s ± %.1f (%d seeds)", pct(m), 100*se, seeds)
}

// comparison is a over b on the seeds both ran: per seed the mean
// per-grid difference on the same test grids (greedy), then the mean over
// seeds with its SE across seeds, and the per-grid paired SE within seeds
// (evaluation noise alone, pooled).
type comparison struct {
	seeds     int
	d, seSeed float64
	seGrid    float64
	perSeed   []float64
}

func compare(a, b []outcome, warmA, warmB bool) comparison {
	bySeed := map[int64]outcome{}
	for _, o := range b {
		bySeed[o.Seed] = o
	}
	var c comparison
	var vGrid float64
	for _, o := range a {
		r, ok := bySeed[o.Seed]
		ta, tb := testOf(o, warmA), testOf(r, warmB)
		if !ok || ta == nil || tb == nil {
			continue
		}
		d, se, ok := pairedGrid(ta.GreedySolved, tb.GreedySolved)
		if !ok { // an older results.json: unpaired difference
			d = ta.Greedy.Success - tb.Greedy.Success
			se = math.Hypot(ta.Greedy.StdErr, tb.Greedy.StdErr)
		}
		c.perSeed = append(c.perSeed, d)
		vGrid += se * se
	}
	c.seeds = len(c.perSeed)
	if c.seeds == 0 {
		return c
	}
	c.d, c.seSeed = meanSE(c.perSeed)
	c.seGrid = math.Sqrt(vGrid) / float64(c.seeds)
	return c
}

// verdict says what a comparison supports. With n ≥ 3 seeds it is an
// effect when |Δ| reaches Student's t bound for 95% (two-sided, n − 1
// degrees of freedom: 4.30 SE with 3 seeds, 2.78 with 5), since with so
// few seeds the SE across them is itself a rough estimate and 2 SE would
// be an 82% interval at 3 seeds; between 2 SE and that bound it is
// suggestive; fewer seeds support no claim.
func (c comparison) verdict() string {
	t := tCrit95(c.seeds - 1)
	switch {
	case c.seeds < 3:
		return fmt.Sprintf("%d seed(s): no claim (needs ≥ 3)", c.seeds)
	case c.seSeed > 0 && math.Abs(c.d) >= t*c.seSeed:
		return fmt.Sprintf("an effect (|Δ| ≥ %.2f SE: 95%%, t with %d df)", t, c.seeds-1)
	case c.seSeed > 0 && math.Abs(c.d) >= 2*c.seSeed:
		return fmt.Sprintf("suggestive (|Δ| ≥ 2 SE, < %.2f SE)", t)
	}
	return "no effect measurable (|Δ| < 2 SE across seeds)"
}

// tCrit95 is Student's t quantile for a two-sided 95% interval with df
// degrees of freedom (df ≥ 1), rounded down to the table's next smaller
// df (so the bound errs high), 1.96 beyond it.
func tCrit95(df int) float64 {
	table := []struct {
		df int
		t  float64
	}{{1, 12.706}, {2, 4.303}, {3, 3.182}, {4, 2.776}, {5, 2.571}, {6, 2.447}, {7, 2.365}, {8, 2.306},
		{9, 2.262}, {10, 2.228}, {12, 2.179}, {15, 2.131}, {20, 2.086}, {30, 2.042}, {60, 2.000}, {120, 1.980}}
	if df < 1 {
		return math.Inf(1)
	}
	t := 1.96
	for i := len(table) - 1; i >= 0; i-- {
		if df >= table[i].df {
			if df < 1000 {
				t = table[i].t
			}
			break
		}
	}
	return t
}

func (c comparison) text() string {
	var per []string
	for _, d := range c.perSeed {
		per = append(per, fmt.Sprintf("%+.1f", 100*d))
	}
	across := "—"
	if c.seeds > 1 {
		across = fmt.Sprintf("%.1f", 100*c.seSeed)
	}
	return fmt.Sprintf("%+.1f | %s | %.1f | %s", 100*c.d, across, 100*c.seGrid, strings.Join(per, ", "))
}
