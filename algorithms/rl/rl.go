// Package rl holds the small types the RL algorithms (grpo, atgrpo,
// joyagents) share with the policies they train: what a policy must offer to
// be sampled from (Sampler) and trained (Learner), the Sample records that
// flow from rollouts to updates, deterministic seed derivation, and
// in-memory policies for tests and toy runs (Scripted, Tabular).
//
// The algorithms only ever talk to these interfaces, so the same training
// step runs against in-memory fakes in unit tests and against policy actors
// (GPTs on other nodes, called through the actor runtime) in real training.
package rl

import (
	"context"
	"errors"
	"fmt"

	"troupe/algorithms/grpo"
)

// ErrBadSample reports a Sample or Completion that cannot be used.
var ErrBadSample = errors.New("rl: bad sample")

// Completion is one sampled answer to a prompt.
type Completion struct {
	Text     string    // the decoded answer (what the environment sees)
	Tokens   []int     // sampled token ids
	LogProbs []float32 // log π(token) under the sampling policy, one per token
}

// Sampler generates completions.
type Sampler interface {
	// Sample returns k completions for every prompt: out[i][j] is the j-th
	// candidate for prompts[i]. The same seed, prompts, k and policy state
	// give the same completions.
	Sample(ctx context.Context, prompts []string, k int, seed int64) ([][]Completion, error)
}

// Learner applies one policy update from a batch of scored samples.
type Learner interface {
	// Update runs the GRPO objective (grpo.Loss) on batch and steps the
	// optimiser. An empty batch is a no-op.
	Update(ctx context.Context, batch []Sample) (UpdateStats, error)
}

// Policy is a model that can be both sampled from and trained.
type Policy interface {
	Sampler
	Learner
}

// Scorer computes log-probs of given completions (a frozen reference
// policy for the KL term).
type Scorer interface {
	// LogProbs returns, for each (prompt, completion) pair, the log-prob of
	// every completion token.
	LogProbs(ctx context.Context, prompts []string, completions []Completion) ([][]float32, error)
}

// Sample is one scored completion on its way to a Learner.
type Sample struct {
	Prompt      string
	Completion  Completion
	Group       string    // group key the advantage was computed in
	UID         string    // the task instance ("prompt uid") the sample belongs to: Dr. MAS pools by (UID, Role)
	Role        string    // the acting role
	Reward      float64   // the reward the advantage was computed from
	Advantage   float64   // shared by every token of the completion
	OldLogProbs []float32 // behaviour log-probs; nil means Completion.LogProbs
	RefLogProbs []float32 // reference log-probs for the KL term; nil when none
	// Version is the behaviour policy's version: how many learner updates
	// its weights had seen when it sampled (0 in a synchronous run, where
	// every sample is on-policy). A learner at version v sees the sample
	// v − Version versions stale.
	Version int64
}

// Old returns the behaviour log-probs: OldLogProbs, or the completion's own.
func (s Sample) Old() []float32 {
	if s.OldLogProbs != nil {
		return s.OldLogProbs
	}
	return s.Completion.LogProbs
}

// Sequence converts s into grpo's plain-data form, with current log-probs
// logp supplied by the learner. It checks lengths.
func (s Sample) Sequence(logp []float64) (grpo.Sequence, error) {
	old := s.Old()
	if len(old) != len(logp) {
		return grpo.Sequence{}, fmt.Errorf("%w: %d current log-probs but %d old ones (group %q)", ErrBadSample, len(logp), len(old), s.Group)
	}
	seq := grpo.Sequence{LogProbs: logp, OldLogProbs: f64(old), Advantage: s.Advantage}
	if s.RefLogProbs != nil {
		if len(s.RefLogProbs) != len(logp) {
			return grpo.Sequence{}, fmt.Errorf("%w: %d current log-probs but %d reference ones (group %q)", ErrBadSample, len(logp), len(s.RefLogProbs), s.Group)
		}
		seq.RefLogProbs = f64(s.RefLogProbs)
	}
	return seq, nil
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// UpdateStats reports one Learner.Update.
type UpdateStats struct {
	grpo.Stats         // loss diagnostics, token-weighted over every optimiser step of the update
	Samples    int     // samples in the batch
	GradNorm   float64 // norm of the parameter gradient before clipping, mean over the optimiser steps (learner-defined; 0 if unknown)
	OptSteps   int     // optimiser steps taken (PPO mini-batches × epochs)
}

// AssignAdvantages recomputes the advantage of every sample of batch from
// the rewards: within each Group (GRPO), or with drMAS within each
// (UID, Role) pair (Dr. MAS's agent-wise normalisation: an agent's samples
// of one task, all turns pooled). See grpo.KeyedAdvantages.
func AssignAdvantages(batch []Sample, mode grpo.AdvantageMode, drMAS bool) error {
	rewards := make([]float64, len(batch))
	keys := make([]string, len(batch))
	for i, s := range batch {
		rewards[i] = s.Reward
		keys[i] = s.Group
		if drMAS {
			keys[i] = s.UID + "\x00" + s.Role
		}
	}
	adv, err := grpo.KeyedAdvantages(rewards, keys, mode)
	if err != nil {
		return err
	}
	for i := range batch {
		batch[i].Advantage = adv[i]
	}
	return nil
}

// DeriveSeed mixes a base seed with any number of coordinates (step, env
// instance, turn, ...) into a new seed with splitmix64, so every sampling
// call gets its own reproducible stream.
func DeriveSeed(base int64, parts ...int64) int64 {
	x := uint64(base)
	for _, p := range parts {
		x = splitmix(x ^ splitmix(uint64(p)+0x9e3779b97f4a7c15))
	}
	return int64(splitmix(x))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Sequences converts a batch into grpo's form for a learner that has
// computed the current log-probs logp[i] of every sample's tokens; then
// grpo.Loss(cfg, seqs) gives the loss and d loss / d logp to backpropagate.
func Sequences(batch []Sample, logp [][]float64) ([]grpo.Sequence, error) {
	if len(logp) != len(batch) {
		return nil, fmt.Errorf("%w: %d log-prob rows for %d samples", ErrBadSample, len(logp), len(batch))
	}
	out := make([]grpo.Sequence, len(batch))
	for i, s := range batch {
		seq, err := s.Sequence(logp[i])
		if err != nil {
			return nil, fmt.Errorf("sample %d: %w", i, err)
		}
		out[i] = seq
	}
	return out, nil
}
