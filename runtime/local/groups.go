package local

import (
	"context"
	"fmt"

	"troupe/runtime/api"
	"troupe/scheduler"
)

// Placement groups of the embedded cluster: the same planner and commands
// as on a cluster, applied directly to the local state.

// groupsChanged wakes every waitGroup (l.mu held).
func (l *Cluster) groupsChanged() {
	close(l.groupCh)
	l.groupCh = make(chan struct{})
}

// groupWaits reports whether some placement group waits for bundles
// (l.mu held).
func (l *Cluster) groupWaits() bool {
	if l.state.NumGroups() == 0 {
		return false
	}
	for _, g := range l.state.Groups() {
		if g.State != scheduler.GroupCreated {
			return true
		}
	}
	return false
}

func (l *Cluster) CreateGroup(ctx context.Context, spec scheduler.GroupSpec) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrShutdown
	}
	cmd, err := l.planner.CreateGroup(l.state, spec, l.now().UnixNano())
	if err == nil {
		err = l.state.Apply(cmd)
	}
	if err != nil {
		return api.Infeasible(err)
	}
	l.groupsChanged()
	return nil
}

func (l *Cluster) Group(ctx context.Context, id scheduler.GroupID) (*scheduler.PlacementGroup, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.state.Group(id); g != nil {
		return cloneGroup(g), nil
	}
	return nil, nil
}

func (l *Cluster) WaitGroup(ctx context.Context, id scheduler.GroupID) (*scheduler.PlacementGroup, error) {
	for {
		l.mu.Lock()
		g := l.state.Group(id)
		if g == nil || g.State == scheduler.GroupCreated {
			var out *scheduler.PlacementGroup
			if g != nil {
				out = cloneGroup(g)
			}
			l.mu.Unlock()
			return out, nil
		}
		ch := l.groupCh
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// RemoveGroup commits the removal (which kills the group's actors in the
// state and frees its reservations), ends the group's running instances
// and places what waited for the freed resources.
func (l *Cluster) RemoveGroup(ctx context.Context, id scheduler.GroupID) error {
	l.mu.Lock()
	if l.state.Group(id) == nil {
		l.mu.Unlock()
		return fmt.Errorf("%w: no placement group %s", scheduler.ErrNotFound, id)
	}
	var kill []*localActor
	for _, a := range l.actors {
		if a.spec.Placement.Group == string(id) {
			kill = append(kill, a)
		}
	}
	l.applyLocked(&scheduler.RemovePlacementGroup{Group: id, At: l.now().UnixNano()})
	l.mu.Unlock()
	reason := fmt.Sprintf("placement group %s removed", id)
	for _, a := range kill {
		if a.inst != nil {
			a.inst.Kill(reason)
		}
	}
	return nil
}

// cloneGroup deep-copies a group out of a state.
func cloneGroup(g *scheduler.PlacementGroup) *scheduler.PlacementGroup {
	c := *g
	c.Bundles = make([]scheduler.Bundle, len(g.Bundles))
	for i, b := range g.Bundles {
		cb := b
		cb.Resources, cb.Free = b.Resources.Clone(), b.Free.Clone()
		cb.GPUs = append([]scheduler.GPUAlloc(nil), b.GPUs...)
		cb.GPUFree = append([]scheduler.GPUAlloc(nil), b.GPUFree...)
		c.Bundles[i] = cb
	}
	return &c
}
