package rl

import (
	"context"
	"fmt"
	"sync"
)

// Script maps a prompt to the candidate texts a Scripted policy returns.
type Script func(prompt string) []string

// Scripted is an in-memory Sampler and Learner for tests. For a prompt it
// returns the texts Script(prompt) in order (the j-th candidate is
// texts[j mod len]), each as a one-token completion with log-prob −1. It
// records every Sample call and every Update batch.
type Scripted struct {
	Script Script

	mu      sync.Mutex
	calls   []SampleCall
	updates [][]Sample
}

// SampleCall records one Sample invocation.
type SampleCall struct {
	Prompts []string
	K       int
	Seed    int64
}

// NewScripted returns a Scripted policy answering from m (prompt → texts);
// prompts missing from m get fallback.
func NewScripted(m map[string][]string, fallback ...string) *Scripted {
	return &Scripted{Script: func(p string) []string {
		if t, ok := m[p]; ok {
			return t
		}
		return fallback
	}}
}

// Sample implements Sampler.
func (s *Scripted) Sample(ctx context.Context, prompts []string, k int, seed int64) ([][]Completion, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if k < 1 {
		return nil, fmt.Errorf("scripted sample: k = %d, want >= 1", k)
	}
	s.mu.Lock()
	s.calls = append(s.calls, SampleCall{Prompts: append([]string(nil), prompts...), K: k, Seed: seed})
	s.mu.Unlock()
	out := make([][]Completion, len(prompts))
	for i, p := range prompts {
		texts := s.Script(p)
		if len(texts) == 0 {
			return nil, fmt.Errorf("scripted sample: no script for prompt %q", p)
		}
		out[i] = make([]Completion, k)
		for j := range k {
			out[i][j] = Completion{Text: texts[j%len(texts)], Tokens: []int{j % len(texts)}, LogProbs: []float32{-1}}
		}
	}
	return out, nil
}

// Update implements Learner: it records the batch and reports its size.
func (s *Scripted) Update(ctx context.Context, batch []Sample) (UpdateStats, error) {
	if err := ctx.Err(); err != nil {
		return UpdateStats{}, err
	}
	s.mu.Lock()
	s.updates = append(s.updates, append([]Sample(nil), batch...))
	s.mu.Unlock()
	return UpdateStats{Samples: len(batch)}, nil
}

// Calls returns the recorded Sample calls.
func (s *Scripted) Calls() []SampleCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SampleCall(nil), s.calls...)
}

// Updates returns the recorded Update batches.
func (s *Scripted) Updates() [][]Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]Sample(nil), s.updates...)
}

// Sampled is the total number of completions produced (Σ prompts·k).
func (s *Scripted) Sampled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		n += len(c.Prompts) * c.K
	}
	return n
}
