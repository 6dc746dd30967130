package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"troupe/actors"
)

// This file serves a run split into a learner and rollout workers: a
// rollout worker is a copy of the team (SpawnTeam with another NamePrefix)
// whose actors only sample; the learner team publishes every new version
// of its weights (Publish) and each worker team pulls it (Pull).

// Actors returns the team's distinct policy actors by key: the policy
// names, or the one name "shared" for a shared-base team, whose roles are
// adapters of one actor.
func (t *Team) Actors() map[string]actors.Handle[Policy] {
	if t.shared {
		return map[string]actors.Handle[Policy]{"shared": t.Handles[t.Names[0]]}
	}
	out := make(map[string]actors.Handle[Policy], len(t.Names))
	for _, n := range t.Names {
		out[n] = t.Handles[n]
	}
	return out
}

// Published is one version of a team's weights, held by the actors that
// exported it: a future per actor key (Actors), passed by reference to
// every Pull, so each worker fetches it from the exporting actor's process.
type Published struct {
	Version int64
	Sets    map[string]*actors.Future[WeightSet]
	Export  time.Duration // until every export was ready
}

// Publish exports version v of every actor's trainable weights (adapters
// alone with LoRA) once, and waits until the exports are ready (not
// fetched: they stay where they were made).
func (t *Team) Publish(ctx context.Context, v int64) (*Published, error) {
	t0 := time.Now()
	p := &Published{Version: v, Sets: map[string]*actors.Future[WeightSet]{}}
	for key, h := range t.Actors() {
		p.Sets[key] = actors.Call(ctx, h, (*Policy).ExportWeights, v)
	}
	for key, f := range p.Sets {
		select {
		case <-f.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r, ok := f.Ref().(interface{ Result() ([]byte, error, bool) }); ok {
			if _, err, _ := r.Result(); err != nil {
				return nil, fmt.Errorf("publish %s version %d: %w", key, v, err)
			}
		}
	}
	p.Export = time.Since(t0)
	return p, nil
}

// Release frees the published sets where they are held; pulls already
// made still get them.
func (p *Published) Release() {
	for _, f := range p.Sets {
		f.Release()
	}
}

// Pull imports the published version into every actor of t (a team of
// the same shape and keys; every replica of a data-parallel one), all
// actors at once, and returns how long it took.
func (t *Team) Pull(ctx context.Context, p *Published) (time.Duration, error) {
	t0 := time.Now()
	futs := map[string]*actors.Future[int64]{}
	for key, h0 := range t.Actors() {
		set, ok := p.Sets[key]
		if !ok {
			return 0, fmt.Errorf("%w: pull: version %d has no weights for %q", ErrConfig, p.Version, key)
		}
		for r, h := range t.replicasOf(h0) {
			futs[replicaName(key, r)] = actors.CallRef(ctx, h, (*Policy).ImportWeights, set)
		}
	}
	var errs []error
	for key, f := range futs {
		if _, err := f.Get(ctx); err != nil {
			errs = append(errs, fmt.Errorf("pull %s version %d: %w", key, p.Version, err))
		}
	}
	return time.Since(t0), errors.Join(errs...)
}

// Timelines reports every actor's cumulative PhaseTimes by actor key
// (replica r > 0 of a data-parallel policy under key-r<r>).
func (t *Team) Timelines(ctx context.Context) (map[string]PhaseTimes, error) {
	as := t.allActors()
	futs := make(map[string]*actors.Future[PhaseTimes], len(as))
	for key, h := range as {
		futs[key] = actors.Call(ctx, h, (*Policy).Timeline, struct{}{})
	}
	out := make(map[string]PhaseTimes, len(futs))
	var errs []error
	for key, f := range futs {
		pt, err := f.Get(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("timeline %s: %w", key, err))
			continue
		}
		out[key] = pt
	}
	return out, errors.Join(errs...)
}
