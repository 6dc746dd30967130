package joyagents

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"troupe/algorithms/envs"
)

// ErrMemory reports a malformed memory request (a group whose answers and
// rewards differ in number, a query without a role).
var ErrMemory = errors.New("joyagents: bad memory request")

// MemoryBank is every agent's memory as the sampler and the trainer use it:
// batched retrieval before acting (Advise) and one evolution per training
// step (Evolve). LocalBank keeps the memories in this process; a
// MemoryClient talks to a memory actor. For the same calls both give the
// same answers, so a training run does not depend on where memory lives.
type MemoryBank interface {
	// Advise answers one query per observation: the hint to append to the
	// prompt, or an exact high-scoring answer that skips sampling.
	Advise(ctx context.Context, req AdviceRequest) ([]Advice, error)
	// Evolve applies a step's groups (MemoryConfig.Threshold decides which
	// answers are inserted and which remove entries) and then the feedback
	// of memory answers, in order.
	Evolve(ctx context.Context, req EvolveRequest) (EvolveResult, error)
}

// Query is one observation an agent is about to act on.
type Query struct {
	Role      string `msgpack:"r"`
	Situation string `msgpack:"s"`
}

// AdviceRequest asks for advice on observations at training step Now.
type AdviceRequest struct {
	Now     int64
	Queries []Query
}

// Advice is memory's answer to one Query.
type Advice struct {
	Hint   string `msgpack:"h,omitempty"` // appended to the observation ("" when nothing is similar)
	Answer string `msgpack:"a,omitempty"` // the remembered answer when Skip
	Skip   bool   `msgpack:"k,omitempty"` // answer with Answer instead of sampling
}

// GroupRecord is one node group as memory sees it: the situation, the G
// answers and their memory rewards (accuracy + format).
type GroupRecord struct {
	Role      string
	Situation string
	Answers   []string
	Rewards   []float64
}

// FeedbackRecord is the memory reward a trajectory earned after an agent
// answered Situation with Answer straight from memory (Memory.Feedback).
type FeedbackRecord struct {
	Role      string
	Situation string
	Answer    string
	Got       float64
}

// EvolveRequest is one training step's memory evolution.
type EvolveRequest struct {
	Now      int64
	Roles    []string // agents whose memories must exist (created empty)
	Groups   []GroupRecord
	Feedback []FeedbackRecord
}

// EvolveResult reports an evolution: the summed changes and every agent's
// memory size after it.
type EvolveResult struct {
	Update GroupUpdate
	Sizes  map[string]int
}

// Validate reports the first malformed group.
func (r *EvolveRequest) Validate() error {
	for i, g := range r.Groups {
		if len(g.Answers) != len(g.Rewards) {
			return fmt.Errorf("%w: group %d (%s) has %d answers but %d rewards", ErrMemory, i, g.Role, len(g.Answers), len(g.Rewards))
		}
	}
	return nil
}

// LocalBank is a MemoryBank over Memory values in this process (the
// trainer's default). Advise never creates a memory: a role without one gets
// no advice. Evolve creates the memories of req.Roles with Config. It is
// not safe for concurrent use (the Memory values themselves are).
type LocalBank struct {
	Config   MemoryConfig
	Memories map[string]*Memory
}

var _ MemoryBank = (*LocalBank)(nil)

// NewLocalBank returns an empty bank whose memories use cfg.
func NewLocalBank(cfg MemoryConfig) *LocalBank {
	return &LocalBank{Config: cfg, Memories: map[string]*Memory{}}
}

// Advise implements MemoryBank.
func (b *LocalBank) Advise(_ context.Context, req AdviceRequest) ([]Advice, error) {
	out := make([]Advice, len(req.Queries))
	for i, q := range req.Queries {
		m := b.Memories[q.Role]
		if m == nil {
			continue
		}
		out[i].Hint, out[i].Answer, out[i].Skip = m.Advise(b.key(q.Role, q.Situation), req.Now)
	}
	return out, nil
}

// Evolve implements MemoryBank. A malformed request changes nothing.
func (b *LocalBank) Evolve(_ context.Context, req EvolveRequest) (EvolveResult, error) {
	if err := req.Validate(); err != nil {
		return EvolveResult{}, err
	}
	if b.Memories == nil {
		b.Memories = map[string]*Memory{}
	}
	for _, r := range req.Roles {
		if b.Memories[r] == nil {
			b.Memories[r] = NewMemory(b.Config)
		}
	}
	var res EvolveResult
	bounds := b.pooledBounds(req.Groups)
	for _, g := range req.Groups {
		m := b.Memories[g.Role]
		if m == nil {
			continue
		}
		var u GroupUpdate
		if bd, ok := bounds[g.Role]; ok {
			u = m.ObserveBounds(b.key(g.Role, g.Situation), g.Answers, g.Rewards, bd[0], bd[1], true, req.Now)
		} else {
			u = m.Observe(b.key(g.Role, g.Situation), g.Answers, g.Rewards, req.Now)
		}
		res.Update.Inserted += u.Inserted
		res.Update.Replaced += u.Replaced
		res.Update.Removed += u.Removed
	}
	for _, f := range req.Feedback {
		if m := b.Memories[f.Role]; m != nil && m.Feedback(b.key(f.Role, f.Situation), f.Answer, f.Got) {
			res.Update.Removed++
		}
	}
	res.Sizes = make(map[string]int, len(b.Memories))
	for r, m := range b.Memories {
		res.Sizes[r] = m.Len()
	}
	return res, nil
}

// key is what the memory of role files situation under: its abstraction
// (MemoryConfig.Abstract) or, without one or when it cannot be read, the
// raw text.
func (b *LocalBank) key(role, situation string) string {
	if b.Config.Abstract == "" {
		return situation
	}
	if s, err := envs.Situation(b.Config.Abstract, role, situation); err == nil {
		return s
	}
	return situation
}

// pooledBounds returns, under ThresholdPooled, every role's (upper, lower)
// bounds: the (1−Tail) and Tail quantiles of the memory rewards of all of
// that role's answers in groups; nil under ThresholdGroupZ.
func (b *LocalBank) pooledBounds(groups []GroupRecord) map[string][2]float64 {
	if b.Config.Threshold != ThresholdPooled {
		return nil
	}
	pooled := map[string][]float64{}
	for _, g := range groups {
		pooled[g.Role] = append(pooled[g.Role], g.Rewards...)
	}
	out := make(map[string][2]float64, len(pooled))
	for r, x := range pooled {
		out[r] = [2]float64{Quantile(x, 1-b.Config.Tail), Quantile(x, b.Config.Tail)}
	}
	return out
}

// Entries returns role's entries in insertion order (nil without memory).
func (b *LocalBank) Entries(role string) []Entry {
	if m := b.Memories[role]; m != nil {
		return m.Entries()
	}
	return nil
}

// Roles lists the roles that have a memory, sorted.
func (b *LocalBank) Roles() []string {
	out := make([]string, 0, len(b.Memories))
	for r := range b.Memories {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
