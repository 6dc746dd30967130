package envs

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"troupe/actors"
)

// Pool is a Batch over environment host actors: a Reset deals instance i
// to host i mod n, and every batched operation sends one call to each host
// concerned, all at once, so the hosts work in parallel (on different nodes
// if the cluster placed them so). A Pool is driven by one goroutine; each
// host serves its calls in order.
type Pool struct {
	Hosts []actors.Handle[Host]
}

var _ Batch = (*Pool)(nil)

// SpawnPool spawns n hosts of cfg's environment on rt; opts are passed to
// every Spawn (resources, placement). Kill them with Pool.Kill.
func SpawnPool(ctx context.Context, rt actors.Runtime, n int, cfg HostConfig, opts ...actors.Option) (*Pool, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: a pool needs at least one host, got %d", ErrInstance, n)
	}
	p := &Pool{}
	for i := 0; i < n; i++ {
		h, err := actors.Spawn[Host](ctx, rt, HostTypeName, cfg, opts...)
		if err != nil {
			p.Kill(context.Background())
			return nil, fmt.Errorf("spawn environment host %d of %d: %w", i+1, n, err)
		}
		p.Hosts = append(p.Hosts, h)
	}
	return p, nil
}

// Kill ends the pool's hosts.
func (p *Pool) Kill(ctx context.Context) {
	for _, h := range p.Hosts {
		_ = actors.Kill(ctx, h)
	}
}

// shards groups refs by host: for host h, the positions in refs and the
// host-local IDs.
func (p *Pool) shards(refs []Ref) (pos, ids [][]int, err error) {
	pos = make([][]int, len(p.Hosts))
	ids = make([][]int, len(p.Hosts))
	for i, r := range refs {
		if r.Host < 0 || r.Host >= len(p.Hosts) {
			return nil, nil, fmt.Errorf("%w: ref %+v names host %d of %d", ErrInstance, r, r.Host, len(p.Hosts))
		}
		pos[r.Host] = append(pos[r.Host], i)
		ids[r.Host] = append(ids[r.Host], r.ID)
	}
	return pos, ids, nil
}

// gather waits for every host's future and joins the errors, each naming
// its host.
func gather[R any](ctx context.Context, p *Pool, op string, futs []*actors.Future[R]) ([]R, error) {
	out := make([]R, len(futs))
	var errs []error
	for h, f := range futs {
		if f == nil {
			continue
		}
		v, err := f.Get(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("environment host %d (%v): %s: %w", h, p.Hosts[h], op, err))
			continue
		}
		out[h] = v
	}
	return out, errors.Join(errs...)
}

// Reset implements Batch: instance i goes to host i mod n.
func (p *Pool) Reset(ctx context.Context, seeds []int64) (Episodes, error) {
	if len(p.Hosts) == 0 {
		return Episodes{}, fmt.Errorf("%w: pool without hosts", ErrInstance)
	}
	if len(seeds) == 0 {
		return Episodes{}, fmt.Errorf("%w: reset without seeds", ErrInstance)
	}
	per := make([][]int64, len(p.Hosts))
	for i, s := range seeds {
		per[i%len(p.Hosts)] = append(per[i%len(p.Hosts)], s)
	}
	futs := make([]*actors.Future[ResetReply], len(p.Hosts))
	for h := range p.Hosts {
		if len(per[h]) > 0 {
			futs[h] = actors.Call(ctx, p.Hosts[h], (*Host).Reset, ResetRequest{Seeds: per[h]})
		}
	}
	reps, err := gather(ctx, p, "reset", futs)
	if err != nil {
		return Episodes{}, err
	}
	ep := Episodes{Refs: make([]Ref, len(seeds)), States: make([]State, len(seeds)), Roles: reps[0].Roles}
	for h, rep := range reps {
		if futs[h] == nil {
			continue
		}
		if len(rep.IDs) != len(per[h]) || len(rep.States) != len(per[h]) {
			return Episodes{}, fmt.Errorf("%w: host %d made %d instances for %d seeds", ErrInstance, h, len(rep.IDs), len(per[h]))
		}
		if !slices.Equal(rep.Roles, ep.Roles) {
			return Episodes{}, fmt.Errorf("%w: host %d has roles %v, host 0 has %v", ErrInstance, h, rep.Roles, ep.Roles)
		}
		for k, id := range rep.IDs {
			i := k*len(p.Hosts) + h
			ep.Refs[i] = Ref{Host: h, ID: id}
			ep.States[i] = rep.States[k]
		}
	}
	return ep, nil
}

// Observe implements Batch.
func (p *Pool) Observe(ctx context.Context, refs []Ref, role string) ([]string, error) {
	pos, ids, err := p.shards(refs)
	if err != nil {
		return nil, err
	}
	futs := make([]*actors.Future[[]string], len(p.Hosts))
	for h := range p.Hosts {
		if len(ids[h]) > 0 {
			futs[h] = actors.Call(ctx, p.Hosts[h], (*Host).Observe, ObserveRequest{IDs: ids[h], Role: role})
		}
	}
	reps, err := gather(ctx, p, "observe", futs)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(refs))
	for h, rep := range reps {
		if len(rep) != len(pos[h]) {
			return nil, fmt.Errorf("%w: host %d returned %d observations for %d instances", ErrInstance, h, len(rep), len(pos[h]))
		}
		for k, i := range pos[h] {
			out[i] = rep[k]
		}
	}
	return out, nil
}

// Step implements Batch.
func (p *Pool) Step(ctx context.Context, refs []Ref, role string, actions []string) ([]Result, error) {
	if len(refs) != len(actions) {
		return nil, fmt.Errorf("%w: %d instances but %d actions", ErrInstance, len(refs), len(actions))
	}
	pos, ids, err := p.shards(refs)
	if err != nil {
		return nil, err
	}
	futs := make([]*actors.Future[[]Result], len(p.Hosts))
	for h := range p.Hosts {
		if len(ids[h]) == 0 {
			continue
		}
		acts := make([]string, len(pos[h]))
		for k, i := range pos[h] {
			acts[k] = actions[i]
		}
		futs[h] = actors.Call(ctx, p.Hosts[h], (*Host).Step, StepRequest{IDs: ids[h], Role: role, Actions: acts})
	}
	reps, err := gather(ctx, p, "step", futs)
	if err != nil {
		return nil, err
	}
	out := make([]Result, len(refs))
	for h, rep := range reps {
		if len(rep) != len(pos[h]) {
			return nil, fmt.Errorf("%w: host %d returned %d results for %d instances", ErrInstance, h, len(rep), len(pos[h]))
		}
		for k, i := range pos[h] {
			out[i] = rep[k]
		}
	}
	return out, nil
}

// Branch implements Batch.
func (p *Pool) Branch(ctx context.Context, refs []Ref, role string, actions [][]string) ([][]Ref, [][]Result, error) {
	if len(refs) != len(actions) {
		return nil, nil, fmt.Errorf("%w: %d instances but %d action lists", ErrInstance, len(refs), len(actions))
	}
	pos, ids, err := p.shards(refs)
	if err != nil {
		return nil, nil, err
	}
	futs := make([]*actors.Future[BranchReply], len(p.Hosts))
	for h := range p.Hosts {
		if len(ids[h]) == 0 {
			continue
		}
		acts := make([][]string, len(pos[h]))
		for k, i := range pos[h] {
			acts[k] = actions[i]
		}
		futs[h] = actors.Call(ctx, p.Hosts[h], (*Host).Branch, BranchRequest{IDs: ids[h], Role: role, Actions: acts})
	}
	reps, err := gather(ctx, p, "branch", futs)
	if err != nil {
		return nil, nil, err
	}
	outRefs := make([][]Ref, len(refs))
	outRes := make([][]Result, len(refs))
	for h, rep := range reps {
		if len(rep.IDs) != len(pos[h]) || len(rep.Results) != len(pos[h]) {
			return nil, nil, fmt.Errorf("%w: host %d returned %d branch lists for %d instances", ErrInstance, h, len(rep.IDs), len(pos[h]))
		}
		for k, i := range pos[h] {
			if len(rep.IDs[k]) != len(actions[i]) || len(rep.Results[k]) != len(actions[i]) {
				return nil, nil, fmt.Errorf("%w: host %d returned %d branches for %d actions", ErrInstance, h, len(rep.IDs[k]), len(actions[i]))
			}
			outRefs[i] = make([]Ref, len(rep.IDs[k]))
			for j, id := range rep.IDs[k] {
				outRefs[i][j] = Ref{Host: h, ID: id}
			}
			outRes[i] = rep.Results[k]
		}
	}
	return outRefs, outRes, nil
}

// Drop implements Batch.
func (p *Pool) Drop(ctx context.Context, refs []Ref) error {
	_, ids, err := p.shards(refs)
	if err != nil {
		return err
	}
	futs := make([]*actors.Future[int], len(p.Hosts))
	for h := range p.Hosts {
		if len(ids[h]) > 0 {
			futs[h] = actors.Call(ctx, p.Hosts[h], (*Host).Drop, ids[h])
		}
	}
	_, err = gather(ctx, p, "drop", futs)
	return err
}
