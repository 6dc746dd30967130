package rl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// ErrPolicy reports a missing or misbehaving policy.
var ErrPolicy = errors.New("rl: policy")

// SharedName is the policy name used in the shared regime.
const SharedName = "shared"

// Policies routes roles to policies: one shared policy for every role, or
// one policy per role (the two regimes of AT-GRPO; JoyAgents-R1's
// heterogeneous agents are the per-role case).
type Policies struct {
	shared Policy
	byRole map[string]Policy
}

// Shared is the shared regime: p acts for, and is trained on, every role.
// The role reaches the model only through the prompt (the project's
// environments name the acting role in their observations).
func Shared(p Policy) *Policies { return &Policies{shared: p} }

// PerRole is the per-role regime: m[role] acts for role and is trained only
// on that role's samples. The policy name is the role.
func PerRole(m map[string]Policy) *Policies {
	c := make(map[string]Policy, len(m))
	for k, v := range m {
		c[k] = v
	}
	return &Policies{byRole: c}
}

// For returns the name and policy acting for role.
func (p *Policies) For(role string) (string, Policy, error) {
	if p == nil {
		return "", nil, fmt.Errorf("%w: no policies", ErrPolicy)
	}
	if p.byRole == nil {
		if p.shared == nil {
			return "", nil, fmt.Errorf("%w: shared policy is nil", ErrPolicy)
		}
		return SharedName, p.shared, nil
	}
	pol, ok := p.byRole[role]
	if !ok || pol == nil {
		return "", nil, fmt.Errorf("%w: no policy for role %q", ErrPolicy, role)
	}
	return role, pol, nil
}

// Names lists the policy names, sorted.
func (p *Policies) Names() []string {
	if p == nil {
		return nil
	}
	if p.byRole == nil {
		return []string{SharedName}
	}
	names := make([]string, 0, len(p.byRole))
	for k := range p.byRole {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// ByName returns the policy called name, or nil.
func (p *Policies) ByName(name string) Policy {
	if p == nil {
		return nil
	}
	if p.byRole == nil {
		if name == SharedName {
			return p.shared
		}
		return nil
	}
	return p.byRole[name]
}

// UpdateAll calls Update on every policy with a non-empty buffer, each in
// its own goroutine (policy actors update in parallel the same way), and
// waits for all. A policy is only ever given its own buffer. Errors are
// joined, each naming its policy; the stats of the policies that succeeded
// are returned either way.
func UpdateAll(ctx context.Context, pols *Policies, buffers map[string][]Sample) (map[string]UpdateStats, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		out  = map[string]UpdateStats{}
	)
	for name := range buffers {
		if pols.ByName(name) == nil {
			errs = append(errs, fmt.Errorf("%w: buffer for unknown policy %q", ErrPolicy, name))
		}
	}
	for _, name := range pols.Names() {
		buf := buffers[name]
		if len(buf) == 0 {
			continue
		}
		pol := pols.ByName(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := pol.Update(ctx, buf)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("update %s: %w", name, err))
				return
			}
			out[name] = s
		}()
	}
	wg.Wait()
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return out, errors.Join(errs...)
}

// FillRefs sets RefLogProbs on every sample of buffers[name] from refs[name]
// (a frozen reference policy per policy name), for the learners' KL term.
// Policies without a reference are left alone.
func FillRefs(ctx context.Context, refs map[string]Scorer, buffers map[string][]Sample) error {
	for name, ref := range refs {
		buf := buffers[name]
		if len(buf) == 0 || ref == nil {
			continue
		}
		prompts := make([]string, len(buf))
		comps := make([]Completion, len(buf))
		for i, s := range buf {
			prompts[i], comps[i] = s.Prompt, s.Completion
		}
		lps, err := ref.LogProbs(ctx, prompts, comps)
		if err != nil {
			return fmt.Errorf("reference log-probs for %s: %w", name, err)
		}
		if len(lps) != len(buf) {
			return fmt.Errorf("%w: reference for %s returned %d rows for %d samples", ErrPolicy, name, len(lps), len(buf))
		}
		for i := range buf {
			buf[i].RefLogProbs = lps[i]
		}
	}
	return nil
}
