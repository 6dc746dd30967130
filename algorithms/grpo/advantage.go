package grpo

import (
	"fmt"
	"math"
)

// StdEps is the constant added to the group standard deviation before
// dividing, so that a group whose rewards are all equal gets advantage 0
// instead of 0/0.
const StdEps = 1e-6

// AdvantageMode selects how group rewards become advantages.
type AdvantageMode int

const (
	// StdNormalized is GRPO's (r − mean) / (std + 1e-6), std unbiased.
	StdNormalized AdvantageMode = iota
	// MeanCentered is Dr. GRPO's r − mean (no division by the std, which
	// the Dr. GRPO paper shows biases updates toward too-easy and too-hard
	// questions).
	MeanCentered
)

// String names the mode.
func (m AdvantageMode) String() string {
	switch m {
	case StdNormalized:
		return "std-normalized"
	case MeanCentered:
		return "mean-centered"
	default:
		return "unknown"
	}
}

// MeanStd returns the mean and the unbiased (Bessel-corrected, divide by
// n−1) standard deviation of x. The std of fewer than two values is 0; the
// mean of none is 0.
func MeanStd(x []float64) (mean, std float64) {
	n := len(x)
	if n == 0 {
		return 0, 0
	}
	for _, v := range x {
		mean += v
	}
	mean /= float64(n)
	if n < 2 {
		return mean, 0
	}
	var ss float64
	for _, v := range x {
		d := v - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(n-1))
}

// Advantages turns one group's rewards into advantages with the given mode:
//
//	StdNormalized: A_i = (r_i − mean) / (std + 1e-6)
//	MeanCentered:  A_i =  r_i − mean
//
// A group of one (or none) gets all-zero advantages: there is nothing to be
// relative to. The result is a new slice.
func Advantages(rewards []float64, mode AdvantageMode) []float64 {
	out := make([]float64, len(rewards))
	if len(rewards) < 2 {
		return out
	}
	mean, std := MeanStd(rewards)
	for i, r := range rewards {
		if mode == MeanCentered {
			out[i] = r - mean
		} else {
			out[i] = (r - mean) / (std + StdEps)
		}
	}
	return out
}

// GroupAdvantages is Advantages with GRPO's StdNormalized mode.
func GroupAdvantages(rewards []float64) []float64 { return Advantages(rewards, StdNormalized) }

// DrGRPOAdvantages is Advantages with Dr. GRPO's MeanCentered mode.
func DrGRPOAdvantages(rewards []float64) []float64 { return Advantages(rewards, MeanCentered) }

// NormalizeWith returns (r_i − mean) / (std + 1e-6), or r_i − mean for
// MeanCentered, with statistics supplied by the caller rather than computed
// from rewards: Dr. MAS normalises each agent's rewards with that agent's own
// statistics over all of its samples, not per group.
func NormalizeWith(rewards []float64, mean, std float64, mode AdvantageMode) []float64 {
	out := make([]float64, len(rewards))
	for i, r := range rewards {
		if mode == MeanCentered {
			out[i] = r - mean
		} else {
			out[i] = (r - mean) / (std + StdEps)
		}
	}
	return out
}

// AdvStats summarises a set of advantages.
type AdvStats struct {
	Mean, Std, Min, Max float64 // Std is unbiased
	Spread              float64 // Max − Min
	Zero                float64 // fraction of advantages exactly 0 (no learning signal)
}

// SummarizeAdvantages computes AdvStats over adv (all zero for an empty slice).
func SummarizeAdvantages(adv []float64) AdvStats {
	if len(adv) == 0 {
		return AdvStats{}
	}
	s := AdvStats{Min: math.Inf(1), Max: math.Inf(-1)}
	s.Mean, s.Std = MeanStd(adv)
	zero := 0
	for _, a := range adv {
		s.Min = math.Min(s.Min, a)
		s.Max = math.Max(s.Max, a)
		if a == 0 {
			zero++
		}
	}
	s.Spread = s.Max - s.Min
	s.Zero = float64(zero) / float64(len(adv))
	return s
}

// KeyedAdvantages normalises each reward within the set of rewards that
// share its key: for key k with mean μ_k and unbiased std σ_k over every
// reward keyed k,
//
//	StdNormalized: A_i = (r_i − μ_k) / (σ_k + 1e-6)
//	MeanCentered:  A_i =  r_i − μ_k
//
// With one key per group this is Advantages group by group; Dr. MAS
// ("agent-wise advantage normalisation", verl's compute_grpo_outcome_advantage
// with group_by_agent_id) keys every sample by (prompt uid, agent), pooling an
// agent's samples over all of its turns of one task. A key held by a single
// reward gets advantage 0 (verl would give it r/1: there is no baseline to
// compare it with). The result is a new slice; keys and rewards of
// different lengths are an error (ErrInput).
func KeyedAdvantages(rewards []float64, keys []string, mode AdvantageMode) ([]float64, error) {
	if len(keys) != len(rewards) {
		return nil, fmt.Errorf("%w: %d rewards but %d keys", ErrInput, len(rewards), len(keys))
	}
	out := make([]float64, len(rewards))
	byKey := map[string][]int{}
	var order []string
	for i, k := range keys {
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	r := make([]float64, 0, len(rewards))
	for _, k := range order {
		idx := byKey[k]
		r = r[:0]
		for _, i := range idx {
			r = append(r, rewards[i])
		}
		adv := Advantages(r, mode)
		for j, i := range idx {
			out[i] = adv[j]
		}
	}
	return out, nil
}
