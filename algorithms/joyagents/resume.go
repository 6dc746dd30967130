package joyagents

import (
	"context"
	"fmt"

	"troupe/actors"
)

// This file saves and restores what a JoyAgents-R1 run carries from step
// to step besides the policies: the step clock (every seed of a step and
// the memory's decay derive from it) and the memory bank.

// MemorySnapshot is every agent's memory: its entries by role, in
// insertion order (the order retrieval and eviction break ties by).
type MemorySnapshot struct {
	Entries map[string][]Entry
}

// SetSteps sets the step clock, as when a run resumes after n steps.
func (t *Trainer) SetSteps(n int64) { t.step = n }

// Snapshot returns the memory bank's contents (empty without memory).
func (t *Trainer) Snapshot(ctx context.Context) (MemorySnapshot, error) {
	switch b := t.bank().(type) {
	case nil:
		return MemorySnapshot{Entries: map[string][]Entry{}}, nil
	case *MemoryClient:
		return b.Snapshot(ctx)
	case *LocalBank:
		return b.Snapshot(), nil
	default:
		return MemorySnapshot{}, fmt.Errorf("%w: cannot snapshot a %T memory", ErrConfig, b)
	}
}

// Restore replaces the memory bank's contents with s.
func (t *Trainer) Restore(ctx context.Context, s MemorySnapshot) error {
	switch b := t.bank().(type) {
	case nil:
		if len(s.Entries) > 0 {
			return fmt.Errorf("%w: memory entries for a run without memory", ErrConfig)
		}
		return nil
	case *MemoryClient:
		return b.Restore(ctx, s)
	case *LocalBank:
		b.Restore(s)
		return nil
	default:
		return fmt.Errorf("%w: cannot restore a %T memory", ErrConfig, b)
	}
}

// Snapshot returns every memory's entries.
func (b *LocalBank) Snapshot() MemorySnapshot {
	s := MemorySnapshot{Entries: make(map[string][]Entry, len(b.Memories))}
	for r, m := range b.Memories {
		s.Entries[r] = m.Entries()
	}
	return s
}

// Restore replaces every memory with s's entries: a role of s gets a
// memory holding them, a role not in s loses its memory.
func (b *LocalBank) Restore(s MemorySnapshot) {
	b.Memories = make(map[string]*Memory, len(s.Entries))
	for r, es := range s.Entries {
		m := NewMemory(b.Config)
		m.entries = append([]Entry(nil), es...)
		b.Memories[r] = m
	}
}

// Snapshot is LocalBank.Snapshot as an actor method.
func (m *MemoryActor) Snapshot(_ context.Context, _ struct{}) (MemorySnapshot, error) {
	return m.bank.Snapshot(), nil
}

// Restore is LocalBank.Restore as an actor method.
func (m *MemoryActor) Restore(_ context.Context, s MemorySnapshot) (struct{}, error) {
	m.bank.Restore(s)
	return struct{}{}, nil
}

// Snapshot returns the memory actor's contents.
func (c *MemoryClient) Snapshot(ctx context.Context) (MemorySnapshot, error) {
	out, err := actors.Call(ctx, c.H, (*MemoryActor).Snapshot, struct{}{}).Get(ctx)
	if err != nil {
		return out, fmt.Errorf("memory actor %v: snapshot: %w", c.H, err)
	}
	if out.Entries == nil {
		out.Entries = map[string][]Entry{}
	}
	return out, nil
}

// Restore replaces the memory actor's contents with s.
func (c *MemoryClient) Restore(ctx context.Context, s MemorySnapshot) error {
	if _, err := actors.Call(ctx, c.H, (*MemoryActor).Restore, s).Get(ctx); err != nil {
		return fmt.Errorf("memory actor %v: restore: %w", c.H, err)
	}
	return nil
}
