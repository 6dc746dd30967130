package joyagents

import (
	"context"
	"fmt"
	"sync/atomic"

	"troupe/algorithms/rl"
)

// MemoryUse counts how a memory served the actions of WithMemory's
// policies. It is safe for concurrent use.
type MemoryUse struct {
	actions, reused, hinted atomic.Int64
}

// Counts returns the actions asked for, those answered from memory
// without sampling and those sampled with a hint in the prompt.
func (u *MemoryUse) Counts() (actions, reused, hinted int64) {
	return u.actions.Load(), u.reused.Load(), u.hinted.Load()
}

// WithMemory returns policies that read bank when their agent acts, as the
// training sampler does: for every observation the agent's memory is asked
// (at clock now, e.g. Trainer.Steps()); a near-duplicate's remembered answer
// is played without sampling, and otherwise the retrieved answer is
// appended to the prompt as a hint. The memory is only read, never evolved.
// Every role in roles gets its own wrapper (the memory is per agent), so a
// shared policy appears once per role; Update passes through to the
// wrapped policy.
func WithMemory(pols *rl.Policies, roles []string, bank MemoryBank, now int64) (*rl.Policies, *MemoryUse, error) {
	use := &MemoryUse{}
	m := make(map[string]rl.Policy, len(roles))
	for _, role := range roles {
		_, p, err := pols.For(role)
		if err != nil {
			return nil, nil, err
		}
		m[role] = &memoryPolicy{role: role, inner: p, bank: bank, now: now, use: use}
	}
	return rl.PerRole(m), use, nil
}

// memoryPolicy is one agent's policy reading its memory before it acts.
type memoryPolicy struct {
	role  string
	inner rl.Policy
	bank  MemoryBank
	now   int64
	use   *MemoryUse
}

// Sample implements rl.Sampler: remembered answers for near-duplicates
// (k copies, without tokens), the inner policy's samples from the hinted
// prompts for the rest.
func (m *memoryPolicy) Sample(ctx context.Context, prompts []string, k int, seed int64) ([][]rl.Completion, error) {
	req := AdviceRequest{Now: m.now, Queries: make([]Query, len(prompts))}
	for i, p := range prompts {
		req.Queries[i] = Query{Role: m.role, Situation: p}
	}
	adv, err := m.bank.Advise(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("memory advice for %s: %w", m.role, err)
	}
	if len(adv) != len(prompts) {
		return nil, fmt.Errorf("%w: %d advices for %d observations", ErrMemory, len(adv), len(prompts))
	}
	out := make([][]rl.Completion, len(prompts))
	var idx []int
	var ask []string
	for i, a := range adv {
		m.use.actions.Add(1)
		if a.Skip {
			m.use.reused.Add(1)
			out[i] = make([]rl.Completion, k)
			for j := range out[i] {
				out[i][j] = rl.Completion{Text: a.Answer}
			}
			continue
		}
		if a.Hint != "" {
			m.use.hinted.Add(1)
		}
		idx = append(idx, i)
		ask = append(ask, prompts[i]+a.Hint)
	}
	if len(ask) == 0 {
		return out, nil
	}
	got, err := m.inner.Sample(ctx, ask, k, seed)
	if err != nil {
		return nil, err
	}
	if len(got) != len(ask) {
		return nil, fmt.Errorf("%w: %d candidate lists for %d prompts", ErrPolicy, len(got), len(ask))
	}
	for j, i := range idx {
		out[i] = got[j]
	}
	return out, nil
}

// Update implements rl.Learner by passing through.
func (m *memoryPolicy) Update(ctx context.Context, batch []rl.Sample) (rl.UpdateStats, error) {
	return m.inner.Update(ctx, batch)
}
