package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"troupe/actors"
	"troupe/actors/collective"
	"troupe/runtime"
)

// This file spawns a team's policies as data-parallel replicas
// (TeamConfig.Replicas): every policy actor (a role's, the shared
// policy's, or the shared base) becomes N actors that start from the same
// weights, sample in turn and train together (replicas.go). Where a
// policy's actors reserve resources (GPUs), its N replicas are placed
// through one placement group of N such bundles, packed: on one node where
// one has room, whose whole GPUs the scheduler picks as the best-connected
// set of that size.

// replicaSet is one policy's replicas: rank order, rank 0 first (the
// handle Team.Handles holds).
type replicaSet struct {
	group   string // the collective group's name
	handles []actors.Handle[Policy]
	pg      *runtime.PlacementGroup // nil when the replicas reserve nothing
}

// replicaName is the actor name of replica r of the policy actor named
// name: rank 0 keeps the name.
func replicaName(name string, r int) string {
	if r == 0 {
		return name
	}
	return name + "-r" + strconv.Itoa(r)
}

// spawnPolicy spawns the actor(s) of one policy key ("shared" or a role):
// one actor, or cfg.Replicas replicas in a collective group, placed
// through a placement group when they reserve resources. opts are the
// spawn options of one actor, without its name.
func (t *Team) spawnPolicy(ctx context.Context, rt actors.Runtime, cfg TeamConfig, key string, pc Config, opts []actors.Option) (actors.Handle[Policy], error) {
	n := max(cfg.Replicas, 1)
	name := func(r int) []actors.Option {
		if !cfg.Named {
			return nil
		}
		return []actors.Option{actors.Name(replicaName(cfg.NamePrefix+key, r))}
	}
	if n == 1 {
		return actors.Spawn[Policy](ctx, rt, TypeName, pc, append(opts, name(0)...)...)
	}
	rs := &replicaSet{group: cfg.NamePrefix + "replicas-" + key}
	pc.ReplicaGroup = rs.group
	var spec actors.Spec
	for _, o := range opts {
		o(&spec)
	}
	if res := spec.Resources; res.CPUs != 0 || res.GPUs != 0 || res.MemoryBytes != 0 || len(res.Custom) > 0 {
		rrt, ok := rt.(runtime.Runtime)
		if !ok {
			return actors.Handle[Policy]{}, fmt.Errorf("%w: %d replicas of %s need a placement group, runtime %T has none", ErrConfig, n, key, rt)
		}
		bundles := make([]actors.ResourceSet, n)
		for i := range bundles {
			bundles[i] = res
		}
		pg, err := runtime.CreatePlacementGroup(ctx, rrt, bundles, runtime.Pack, rs.group)
		if err != nil {
			return actors.Handle[Policy]{}, fmt.Errorf("replicas of %s: %w", key, err)
		}
		if err := pg.Wait(ctx); err != nil {
			_ = pg.Remove(context.Background())
			return actors.Handle[Policy]{}, fmt.Errorf("replicas of %s: placement group: %w", key, err)
		}
		rs.pg = pg
	}
	if t.replicas == nil {
		t.replicas = map[string]*replicaSet{}
	}
	t.replicas[key] = rs // Kill ends what was spawned if the rest fails
	for r := range n {
		o := append(append([]actors.Option(nil), opts...), name(r)...)
		if rs.pg != nil {
			o = append(o, actors.PlacementGroup(rs.pg, r))
		}
		h, err := actors.Spawn[Policy](ctx, rt, TypeName, pc, o...)
		if err != nil {
			return actors.Handle[Policy]{}, fmt.Errorf("replica %d of %d: %w", r, n, err)
		}
		rs.handles = append(rs.handles, h)
	}
	if err := rs.form(ctx); err != nil {
		return actors.Handle[Policy]{}, fmt.Errorf("replicas of %s: %w", key, err)
	}
	return rs.handles[0], nil
}

// form makes the replicas the members of their collective group, in rank
// order; forming it again replaces it on every member.
func (rs *replicaSet) form(ctx context.Context) error {
	refs := make([]actors.Ref, len(rs.handles))
	for r, h := range rs.handles {
		refs[r] = h.Ref()
	}
	if err := collective.Create(ctx, rs.group, refs...); err != nil {
		return fmt.Errorf("form group %s: %w", rs.group, err)
	}
	return nil
}

// reformGroups forms every replica group again, as after a replica
// restarted (it comes back from its constructor, outside the group).
func (t *Team) reformGroups(ctx context.Context) error {
	for _, key := range slices.Sorted(maps.Keys(t.replicas)) {
		if err := t.replicas[key].form(ctx); err != nil {
			return fmt.Errorf("replicas of %s: %w", key, err)
		}
	}
	return nil
}

// replicasOf returns the actors of the policy actor h (itself alone when
// it has no replicas), rank 0 first.
func (t *Team) replicasOf(h actors.Handle[Policy]) []actors.Handle[Policy] {
	for _, rs := range t.replicas {
		if len(rs.handles) > 0 && rs.handles[0] == h {
			return rs.handles
		}
	}
	return []actors.Handle[Policy]{h}
}

// Replicas is the number of replicas of every policy actor (1 without).
func (t *Team) Replicas() int {
	for _, rs := range t.replicas {
		return len(rs.handles)
	}
	return 1
}

// allActors is Actors with every replica: rank 0 under the policy's key,
// replica r under replicaName(key, r).
func (t *Team) allActors() map[string]actors.Handle[Policy] {
	out := map[string]actors.Handle[Policy]{}
	for key, h := range t.Actors() {
		for r, hr := range t.replicasOf(h) {
			out[replicaName(key, r)] = hr
		}
	}
	return out
}

// callReplicas calls method with arg on every replica of h at once and
// returns rank 0's result (the replicas' agree); errors name the replica.
func callReplicas[A, R any](ctx context.Context, t *Team, h actors.Handle[Policy], method func(*Policy, context.Context, A) (R, error), arg A) (R, error) {
	hs := t.replicasOf(h)
	futs := make([]*actors.Future[R], len(hs))
	for r, hr := range hs {
		futs[r] = actors.Call(ctx, hr, method, arg)
	}
	var out R
	var errs []error
	for r, f := range futs {
		v, err := f.Get(ctx)
		if err != nil {
			if len(hs) > 1 {
				err = fmt.Errorf("replica %d: %w", r, err)
			}
			errs = append(errs, err)
			continue
		}
		if r == 0 {
			out = v
		}
	}
	return out, errors.Join(errs...)
}

// ReplicaHashes reports, by policy key and replica, the hash of each
// replica's trainable weights after its last update (0 before any); the
// replicas check them against each other in every update.
func (t *Team) ReplicaHashes(ctx context.Context) (map[string][]uint64, error) {
	out := map[string][]uint64{}
	for key, h := range t.Actors() {
		hs := t.replicasOf(h)
		if len(hs) < 2 {
			continue
		}
		for _, hr := range hs {
			v, err := actors.Call(ctx, hr, (*Policy).ReplicaHash, struct{}{}).Get(ctx)
			if err != nil {
				return out, fmt.Errorf("replica hash of %s: %w", key, err)
			}
			out[key] = append(out[key], v)
		}
	}
	return out, nil
}

// ReplicaHash reports the hash of the trainable weights after the actor's
// last data-parallel update (0 before any).
func (p *Policy) ReplicaHash(context.Context, struct{}) (uint64, error) { return p.replicaHash, nil }

// killReplicas ends every replica and removes the placement groups.
func (t *Team) killReplicas(ctx context.Context) {
	for _, rs := range t.replicas {
		for _, h := range rs.handles {
			_ = actors.Kill(ctx, h)
		}
		if rs.pg != nil {
			_ = rs.pg.Remove(ctx)
		}
	}
}

// replicaList is the Replicas of the policy actor h for its clients, nil
// when it has none.
func (t *Team) replicaList(h actors.Handle[Policy]) *Replicas {
	hs := t.replicasOf(h)
	if len(hs) < 2 {
		return nil
	}
	return &Replicas{Handles: hs}
}
