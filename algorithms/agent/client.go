package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"troupe/actors"
	"troupe/algorithms/rl"
)

// Client is an rl.Policy and rl.Scorer whose model lives in a policy actor:
// every method is one actor call, so the algorithms' trainers run unchanged
// against policies on other nodes.
type Client struct {
	H actors.Handle[Policy]
	// Temperature, if > 0, overrides the actor's sampling temperature for
	// this client's Sample calls (e.g. a low-temperature evaluation client
	// next to the training client of the same actor).
	Temperature float32
	// Greedy decodes by argmax (evaluation as the paper runs it).
	Greedy bool
	// NoLogProbs skips the scoring pass (evaluation needs only the text).
	NoLogProbs bool
	// Adapter, if set, names the actor's LoRA adapter (the role) every call
	// of this client uses: one actor with one adapter per role.
	Adapter string
	// Replicas, if not nil, are H's data-parallel replicas
	// (TeamConfig.Replicas), H first: a Sample or LogProbs call is split
	// over them (a call of one prompt goes to them in turn; they hold the
	// same weights, so which one serves a row does not change it), Update
	// goes to all of them.
	Replicas *Replicas
}

// Replicas are the actors of one data-parallel policy, rank 0 first, and
// the turn of the next call.
type Replicas struct {
	Handles []actors.Handle[Policy]
	next    atomic.Uint64
}

// pick is the actor the next sampling or scoring call goes to.
func (c *Client) pick() actors.Handle[Policy] {
	if c.Replicas == nil || len(c.Replicas.Handles) == 0 {
		return c.H
	}
	hs := c.Replicas.Handles
	return hs[(c.Replicas.next.Add(1)-1)%uint64(len(hs))]
}

var (
	_ rl.Policy = (*Client)(nil)
	_ rl.Scorer = (*Client)(nil)
)

// NewClient wraps a policy actor handle.
func NewClient(h actors.Handle[Policy]) *Client { return &Client{H: h} }

// Sample implements rl.Sampler. With replicas the prompts are split in
// contiguous parts, one per replica, sampled at once; each part keeps its
// rows' random streams (SampleRequest.RowOffset), so the completions are
// the whole request's.
func (c *Client) Sample(ctx context.Context, prompts []string, k int, seed int64) ([][]rl.Completion, error) {
	req := SampleRequest{Prompts: prompts, K: k, Seed: seed, Temperature: c.Temperature,
		Greedy: c.Greedy, NoLogProbs: c.NoLogProbs, Adapter: c.Adapter}
	if c.Replicas != nil && len(c.Replicas.Handles) > 1 && len(prompts) > 1 {
		return splitCall(ctx, c, len(prompts), func(lo, hi int) SampleRequest {
			r := req
			r.Prompts, r.RowOffset = prompts[lo:hi], lo*k
			return r
		}, (*Policy).Sample, "sample")
	}
	out, err := actors.Call(ctx, c.pick(), (*Policy).Sample, req).Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy actor %v: sample: %w", c.H, err)
	}
	return out, nil
}

// splitCall calls method on every replica of c with the part [lo, hi) of
// n items (contiguous, in rank order, none empty) and concatenates the
// results.
func splitCall[Req, Item any](ctx context.Context, c *Client, n int, part func(lo, hi int) Req, method func(*Policy, context.Context, Req) ([]Item, error), what string) ([]Item, error) {
	hs := c.Replicas.Handles
	m := min(len(hs), n)
	futs := make([]*actors.Future[[]Item], m)
	for r := range m {
		futs[r] = actors.Call(ctx, hs[r], method, part(r*n/m, (r+1)*n/m))
	}
	out := make([]Item, 0, n)
	var errs []error
	for r, f := range futs {
		v, err := f.Get(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy actor %v: %s: %w", hs[r], what, err))
			continue
		}
		out = append(out, v...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(out) != n {
		return nil, fmt.Errorf("%w: %s: replicas returned %d results for %d items", ErrInput, what, len(out), n)
	}
	return out, nil
}

// LogProbs implements rl.Scorer.
func (c *Client) LogProbs(ctx context.Context, prompts []string, completions []rl.Completion) ([][]float32, error) {
	if c.Replicas != nil && len(c.Replicas.Handles) > 1 && len(prompts) > 1 && len(prompts) == len(completions) {
		return splitCall(ctx, c, len(prompts), func(lo, hi int) LogProbsRequest {
			return LogProbsRequest{Prompts: prompts[lo:hi], Completions: completions[lo:hi], Adapter: c.Adapter}
		}, (*Policy).LogProbs, "log-probs")
	}
	out, err := actors.Call(ctx, c.pick(), (*Policy).LogProbs, LogProbsRequest{Prompts: prompts, Completions: completions, Adapter: c.Adapter}).Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy actor %v: log-probs: %w", c.H, err)
	}
	return out, nil
}

// Update implements rl.Learner.
func (c *Client) Update(ctx context.Context, batch []rl.Sample) (rl.UpdateStats, error) {
	hs := []actors.Handle[Policy]{c.H}
	if c.Replicas != nil && len(c.Replicas.Handles) > 0 {
		hs = c.Replicas.Handles // every replica trains, on its shard
	}
	futs := make([]*actors.Future[rl.UpdateStats], len(hs))
	for r, h := range hs {
		if c.Adapter != "" {
			futs[r] = actors.Call(ctx, h, (*Policy).UpdateAdapter, AdapterUpdate{Adapter: c.Adapter, Batch: batch})
		} else {
			futs[r] = actors.Call(ctx, h, (*Policy).Update, batch)
		}
	}
	var out rl.UpdateStats
	var errs []error
	for r, f := range futs {
		st, err := f.Get(ctx)
		if err != nil {
			errs = append(errs, err)
		} else if r == 0 {
			out = st
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("policy actor %v: update: %w", c.H, err)
	}
	return out, nil
}
