package agent

import (
	"context"
	"fmt"

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
}

var (
	_ rl.Policy = (*Client)(nil)
	_ rl.Scorer = (*Client)(nil)
)

// NewClient wraps a policy actor handle.
func NewClient(h actors.Handle[Policy]) *Client { return &Client{H: h} }

// Sample implements rl.Sampler.
func (c *Client) Sample(ctx context.Context, prompts []string, k int, seed int64) ([][]rl.Completion, error) {
	out, err := actors.Call(ctx, c.H, (*Policy).Sample, SampleRequest{Prompts: prompts, K: k, Seed: seed, Temperature: c.Temperature,
		Greedy: c.Greedy, NoLogProbs: c.NoLogProbs, Adapter: c.Adapter}).Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy actor %v: sample: %w", c.H, err)
	}
	return out, nil
}

// LogProbs implements rl.Scorer.
func (c *Client) LogProbs(ctx context.Context, prompts []string, completions []rl.Completion) ([][]float32, error) {
	out, err := actors.Call(ctx, c.H, (*Policy).LogProbs, LogProbsRequest{Prompts: prompts, Completions: completions, Adapter: c.Adapter}).Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy actor %v: log-probs: %w", c.H, err)
	}
	return out, nil
}

// Update implements rl.Learner.
func (c *Client) Update(ctx context.Context, batch []rl.Sample) (rl.UpdateStats, error) {
	var out rl.UpdateStats
	var err error
	if c.Adapter != "" {
		out, err = actors.Call(ctx, c.H, (*Policy).UpdateAdapter, AdapterUpdate{Adapter: c.Adapter, Batch: batch}).Get(ctx)
	} else {
		out, err = actors.Call(ctx, c.H, (*Policy).Update, batch).Get(ctx)
	}
	if err != nil {
		return out, fmt.Errorf("policy actor %v: update: %w", c.H, err)
	}
	return out, nil
}
