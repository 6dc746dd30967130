package rl

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// FilterMethod names one of PettingLLMs' group filters
// (MultiAgentsPPOTrainer._assign_consistent_uids, options filter_method and
// filter_ratio), applied to each policy's batch before its update.
type FilterMethod string

const (
	// FilterNone keeps every sample.
	FilterNone FilterMethod = ""
	// FilterMean drops the ⌊ratio·groups⌋ groups with the lowest mean
	// reward: the low-reward group filter (PettingLLMs' Plan-Path and
	// Sokoban configs use it with ratio 0.5).
	FilterMean FilterMethod = "mean"
	// FilterStd drops the ⌊ratio·groups⌋ groups with the lowest
	// range-normalised reward variance var(r)/(max−min)² (0 for a group whose
	// rewards are all equal).
	FilterStd FilterMethod = "std"
	// FilterDAPO drops every group whose rewards are all equal (DAPO's
	// dynamic sampling filter without resampling); ratio is ignored.
	FilterDAPO FilterMethod = "dapo"
	// FilterUID drops, inside every group, the ⌊ratio·size⌋ samples whose
	// rewards lie farthest from the group mean.
	FilterUID FilterMethod = "uid"
)

// ParseFilterMethod reads a method name ("", "none", "mean", "std", "dapo",
// "uid").
func ParseFilterMethod(s string) (FilterMethod, error) {
	switch FilterMethod(s) {
	case FilterNone, "none":
		return FilterNone, nil
	case FilterMean, FilterStd, FilterDAPO, FilterUID:
		return FilterMethod(s), nil
	}
	return "", fmt.Errorf("%w: unknown group filter %q (none, mean, std, dapo, uid)", ErrBadSample, s)
}

// GroupFilter is a group filter and its ratio.
type GroupFilter struct {
	Method FilterMethod
	Ratio  float64 // share of groups (or, for uid, of each group's samples) to drop, in [0, 1)
}

// Validate reports whether f is usable.
func (f GroupFilter) Validate() error {
	if _, err := ParseFilterMethod(string(f.Method)); err != nil {
		return err
	}
	if !(f.Ratio >= 0 && f.Ratio < 1) {
		return fmt.Errorf("%w: group filter ratio %v not in [0, 1)", ErrBadSample, f.Ratio)
	}
	return nil
}

// Active reports whether f can drop anything.
func (f GroupFilter) Active() bool {
	return f.Method == FilterDAPO || (f.Method != FilterNone && f.Ratio > 0)
}

// FilterStats reports what a filter dropped.
type FilterStats struct {
	Groups, GroupsKept   int
	Samples, SamplesKept int
}

// Apply filters batch by the samples' Group keys and Rewards and returns
// the kept samples in their original order (a new slice; batch is not
// modified). Groups are ranked in order of first appearance, ties kept in
// that order, as PettingLLMs' stable sort over its insertion-ordered dict
// does.
func (f GroupFilter) Apply(batch []Sample) ([]Sample, FilterStats, error) {
	st := FilterStats{Samples: len(batch)}
	if err := f.Validate(); err != nil {
		return nil, st, err
	}
	var order []string
	members := map[string][]int{}
	for i, s := range batch {
		if _, ok := members[s.Group]; !ok {
			order = append(order, s.Group)
		}
		members[s.Group] = append(members[s.Group], i)
	}
	st.Groups = len(order)
	drop := make([]bool, len(batch))
	rewards := func(g string) []float64 {
		r := make([]float64, len(members[g]))
		for j, i := range members[g] {
			r[j] = batch[i].Reward
		}
		return r
	}
	dropGroup := func(g string) {
		for _, i := range members[g] {
			drop[i] = true
		}
	}
	dropLowest := func(score func(r []float64) float64) {
		n := int(float64(len(order)) * f.Ratio)
		if n == 0 {
			return
		}
		ranked := slices.Clone(order)
		sc := map[string]float64{}
		for _, g := range ranked {
			sc[g] = score(rewards(g))
		}
		sort.SliceStable(ranked, func(a, b int) bool { return sc[ranked[a]] < sc[ranked[b]] })
		for _, g := range ranked[:n] {
			dropGroup(g)
		}
	}
	switch f.Method {
	case FilterMean:
		dropLowest(func(r []float64) float64 {
			var m float64
			for _, x := range r {
				m += x
			}
			return m / float64(len(r))
		})
	case FilterStd:
		dropLowest(rangeNormVar)
	case FilterDAPO:
		for _, g := range order {
			if rangeNormVar(rewards(g)) == 0 {
				dropGroup(g)
			}
		}
	case FilterUID:
		for _, g := range order {
			r := rewards(g)
			n := int(float64(len(r)) * f.Ratio)
			if len(r) < 2 || n == 0 {
				continue
			}
			var mean float64
			for _, x := range r {
				mean += x
			}
			mean /= float64(len(r))
			idx := slices.Clone(members[g])
			sort.SliceStable(idx, func(a, b int) bool {
				return math.Abs(batch[idx[a]].Reward-mean) > math.Abs(batch[idx[b]].Reward-mean)
			})
			for _, i := range idx[:n] {
				drop[i] = true
			}
		}
	}
	out := make([]Sample, 0, len(batch))
	kept := map[string]bool{}
	for i, s := range batch {
		if !drop[i] {
			out = append(out, s)
			kept[s.Group] = true
		}
	}
	st.SamplesKept, st.GroupsKept = len(out), len(kept)
	return out, st, nil
}

// rangeNormVar is the population variance of r divided by its squared
// range, 0 when all rewards are equal (PettingLLMs'
// range_normalized_variance).
func rangeNormVar(r []float64) float64 {
	if len(r) == 0 {
		return 0
	}
	lo, hi, mean := r[0], r[0], 0.0
	for _, x := range r {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
		mean += x
	}
	if hi == lo {
		return 0
	}
	mean /= float64(len(r))
	var v float64
	for _, x := range r {
		v += (x - mean) * (x - mean)
	}
	v /= float64(len(r))
	return v / ((hi - lo) * (hi - lo))
}

// FilterBuffers applies f to every policy's buffer (each policy's batch is
// filtered on its own, as PettingLLMs filters each model's batch) and sums
// the statistics. The buffers map is not modified.
func FilterBuffers(f GroupFilter, buffers map[string][]Sample) (map[string][]Sample, FilterStats, error) {
	out := make(map[string][]Sample, len(buffers))
	var st FilterStats
	for name, buf := range buffers {
		kept, s, err := f.Apply(buf)
		if err != nil {
			return nil, st, fmt.Errorf("filter %s: %w", name, err)
		}
		out[name] = kept
		st.Groups += s.Groups
		st.GroupsKept += s.GroupsKept
		st.Samples += s.Samples
		st.SamplesKept += s.SamplesKept
	}
	return out, st, nil
}

// ZeroAdvantage is the share of samples in buffers whose advantage is
// exactly 0 (no learning signal), 0 for no samples.
func ZeroAdvantage(buffers map[string][]Sample) float64 {
	n, z := 0, 0
	for _, buf := range buffers {
		for _, s := range buf {
			n++
			if s.Advantage == 0 {
				z++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return float64(z) / float64(n)
}
