package joyagents

import (
	"context"
	"fmt"

	"troupe/actors"
	"troupe/algorithms/rl"
)

// MemoryTypeName is the actor type name of the memory actor.
const MemoryTypeName = "JoyMemory"

func init() { actors.MustRegister(MemoryTypeName, NewMemoryActor) }

// MemoryActor is the memory actor: every agent's Memory (a LocalBank)
// served as actor methods, so memory lives beside the policy actors and the
// update step's graph evolves it as one of its nodes. Calls are serialised
// by the actor runtime.
type MemoryActor struct {
	bank *LocalBank
}

// NewMemoryActor builds a memory actor with empty memories (the actor
// constructor).
func NewMemoryActor(_ context.Context, cfg MemoryConfig) (*MemoryActor, error) {
	if cfg.Capacity < 1 {
		return nil, fmt.Errorf("%w: memory capacity %d, want >= 1", ErrConfig, cfg.Capacity)
	}
	return &MemoryActor{bank: NewLocalBank(cfg)}, nil
}

// Advise is MemoryBank.Advise as an actor method.
func (m *MemoryActor) Advise(ctx context.Context, req AdviceRequest) ([]Advice, error) {
	return m.bank.Advise(ctx, req)
}

// Evolve is MemoryBank.Evolve as an actor method.
func (m *MemoryActor) Evolve(ctx context.Context, req EvolveRequest) (EvolveResult, error) {
	return m.bank.Evolve(ctx, req)
}

// Entries returns one role's entries in insertion order.
func (m *MemoryActor) Entries(_ context.Context, role string) ([]Entry, error) {
	return m.bank.Entries(role), nil
}

// UpdateStep is the memory node of the update step's graph: it evolves the
// memory with req.Memory (nothing when nil) and reports the result as its
// part of the step's output.
func (m *MemoryActor) UpdateStep(ctx context.Context, req UpdateRequest) (UpdatePart, error) {
	if req.Memory == nil {
		return UpdatePart{}, nil
	}
	res, err := m.bank.Evolve(ctx, *req.Memory)
	if err != nil {
		return UpdatePart{}, err
	}
	return UpdatePart{Memory: &res}, nil
}

// MemoryClient is a MemoryBank whose memories live in a memory actor.
type MemoryClient struct {
	H actors.Handle[MemoryActor]
}

var _ MemoryBank = (*MemoryClient)(nil)

// SpawnMemory spawns a memory actor with cfg on rt (opts: resources,
// placement) and returns its client.
func SpawnMemory(ctx context.Context, rt actors.Runtime, cfg MemoryConfig, opts ...actors.Option) (*MemoryClient, error) {
	h, err := actors.Spawn[MemoryActor](ctx, rt, MemoryTypeName, cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("spawn memory actor: %w", err)
	}
	return &MemoryClient{H: h}, nil
}

// Advise implements MemoryBank.
func (c *MemoryClient) Advise(ctx context.Context, req AdviceRequest) ([]Advice, error) {
	out, err := actors.Call(ctx, c.H, (*MemoryActor).Advise, req).Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("memory actor %v: advise: %w", c.H, err)
	}
	if len(out) != len(req.Queries) {
		return nil, fmt.Errorf("%w: memory actor %v returned %d advices for %d queries", ErrMemory, c.H, len(out), len(req.Queries))
	}
	return out, nil
}

// Evolve implements MemoryBank.
func (c *MemoryClient) Evolve(ctx context.Context, req EvolveRequest) (EvolveResult, error) {
	out, err := actors.Call(ctx, c.H, (*MemoryActor).Evolve, req).Get(ctx)
	if err != nil {
		return out, fmt.Errorf("memory actor %v: evolve: %w", c.H, err)
	}
	return out, nil
}

// Entries returns one role's entries from the actor.
func (c *MemoryClient) Entries(ctx context.Context, role string) ([]Entry, error) {
	out, err := actors.Call(ctx, c.H, (*MemoryActor).Entries, role).Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("memory actor %v: entries: %w", c.H, err)
	}
	return out, nil
}

// Kill ends the memory actor.
func (c *MemoryClient) Kill(ctx context.Context) error { return actors.Kill(ctx, c.H) }

// UpdateRequest is the input of one update step: the selected agents'
// sample buffers by policy name and the memory evolution (nil without
// memory). In the compiled update graph every node receives it and takes
// its own part: a policy actor buffers[its name], the memory actor Memory.
type UpdateRequest struct {
	Buffers map[string][]rl.Sample
	Memory  *EvolveRequest
}

// UpdatePart is one node's part of an update step's output: a policy's
// update statistics (Policy is its name), several policies' statistics by
// name (Updates: one actor holding every agent's adapter on a shared base)
// or the memory's evolution.
type UpdatePart struct {
	Policy  string
	Stats   rl.UpdateStats
	Updates map[string]rl.UpdateStats
	Memory  *EvolveResult
}

// UpdateResult is a whole update step's output.
type UpdateResult struct {
	Updates map[string]rl.UpdateStats // policies that trained (non-empty buffers)
	Memory  EvolveResult
}

// Updater runs a training step's update: train the policies on their
// buffers and evolve the memory. The Trainer's default trains its Policies
// with rl.UpdateAll and then evolves its memory bank; agent.JoyGraph runs
// the same as a compiled actor graph of the policy actors and the memory
// actor.
type Updater interface {
	Update(ctx context.Context, req UpdateRequest) (UpdateResult, error)
}
