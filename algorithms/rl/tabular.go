package rl

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sync"

	"troupe/algorithms/grpo"
)

// Tabular is a categorical softmax policy over a fixed list of actions with
// one logit vector per distinct prompt: the smallest real policy. Each
// completion is a single token (the action index) whose text is the action.
// It computes exact log-probs and exact gradients, so GRPO training on it is
// the real algorithm on a model small enough to reason about by hand.
//
// Update runs Epochs passes of plain gradient descent on grpo.Loss with
// respect to the logits:
//
//	d loss / d z_j = Σ_tokens (d loss / d logp) · (1[j = a] − π_j)
//
// (the softmax log-prob derivative).
type Tabular struct {
	Actions []string    // the action texts; token id = index
	LR      float64     // learning rate
	Epochs  int         // gradient passes per Update (≥ 1)
	Loss    grpo.Config // GRPO loss configuration

	mu     sync.Mutex
	logits map[string][]float64
}

// NewTabular returns a uniform Tabular policy.
func NewTabular(actions []string, lr float64, epochs int, loss grpo.Config) (*Tabular, error) {
	if len(actions) == 0 {
		return nil, fmt.Errorf("tabular policy: no actions")
	}
	if !(lr > 0) || epochs < 1 {
		return nil, fmt.Errorf("tabular policy: learning rate %v and epochs %d must be positive", lr, epochs)
	}
	if err := loss.Validate(); err != nil {
		return nil, fmt.Errorf("tabular policy: %w", err)
	}
	return &Tabular{Actions: actions, LR: lr, Epochs: epochs, Loss: loss, logits: map[string][]float64{}}, nil
}

// Probs returns the action distribution for prompt.
func (p *Tabular) Probs(prompt string) []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return softmax(p.row(prompt))
}

func (p *Tabular) row(prompt string) []float64 {
	z, ok := p.logits[prompt]
	if !ok {
		z = make([]float64, len(p.Actions))
		p.logits[prompt] = z
	}
	return z
}

func softmax(z []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range z {
		m = math.Max(m, v)
	}
	out := make([]float64, len(z))
	var s float64
	for i, v := range z {
		out[i] = math.Exp(v - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

// Sample implements Sampler.
func (p *Tabular) Sample(ctx context.Context, prompts []string, k int, seed int64) ([][]Completion, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if k < 1 {
		return nil, fmt.Errorf("tabular sample: k = %d, want >= 1", k)
	}
	rng := rand.New(rand.NewSource(seed))
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]Completion, len(prompts))
	for i, prompt := range prompts {
		pr := softmax(p.row(prompt))
		out[i] = make([]Completion, k)
		for j := range k {
			u, a := rng.Float64(), len(pr)-1
			for c, v := range pr {
				if u < v {
					a = c
					break
				}
				u -= v
			}
			out[i][j] = Completion{Text: p.Actions[a], Tokens: []int{a}, LogProbs: []float32{float32(math.Log(pr[a]))}}
		}
	}
	return out, nil
}

// LogProbs implements Scorer (so a frozen copy can serve as reference).
func (p *Tabular) LogProbs(ctx context.Context, prompts []string, completions []Completion) ([][]float32, error) {
	if len(prompts) != len(completions) {
		return nil, fmt.Errorf("tabular log-probs: %d prompts, %d completions", len(prompts), len(completions))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]float32, len(prompts))
	for i, c := range completions {
		pr := softmax(p.row(prompts[i]))
		for _, tok := range c.Tokens {
			if tok < 0 || tok >= len(pr) {
				return nil, fmt.Errorf("%w: token %d out of range [0,%d)", ErrBadSample, tok, len(pr))
			}
			out[i] = append(out[i], float32(math.Log(pr[tok])))
		}
	}
	return out, nil
}

// Clone returns an independent copy (for a frozen reference policy).
func (p *Tabular) Clone() *Tabular {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &Tabular{Actions: p.Actions, LR: p.LR, Epochs: p.Epochs, Loss: p.Loss, logits: map[string][]float64{}}
	for k, v := range p.logits {
		c.logits[k] = append([]float64(nil), v...)
	}
	return c
}

// Update implements Learner.
func (p *Tabular) Update(ctx context.Context, batch []Sample) (UpdateStats, error) {
	if err := ctx.Err(); err != nil {
		return UpdateStats{}, err
	}
	st := UpdateStats{Samples: len(batch)}
	if len(batch) == 0 {
		return st, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range batch {
		for _, tok := range s.Completion.Tokens {
			if tok < 0 || tok >= len(p.Actions) {
				return st, fmt.Errorf("tabular update: %w: token %d out of range [0,%d) (group %q)", ErrBadSample, tok, len(p.Actions), s.Group)
			}
		}
	}
	for range p.Epochs {
		seqs := make([]grpo.Sequence, len(batch))
		probs := make([][]float64, len(batch))
		for i, s := range batch {
			probs[i] = softmax(p.row(s.Prompt))
			logp := make([]float64, len(s.Completion.Tokens))
			for t, tok := range s.Completion.Tokens {
				logp[t] = math.Log(probs[i][tok])
			}
			seq, err := s.Sequence(logp)
			if err != nil {
				return st, fmt.Errorf("tabular update: sample %d: %w", i, err)
			}
			seqs[i] = seq
		}
		res, err := grpo.Loss(p.Loss, seqs)
		if err != nil {
			return st, fmt.Errorf("tabular update: %w", err)
		}
		st.Stats = res.Stats
		// Accumulate logit gradients per prompt before stepping, so the
		// whole batch sees the same parameters.
		grads := map[string][]float64{}
		var order []string // prompts in batch order: GradNorm's sum must not follow map order
		for i, s := range batch {
			g, ok := grads[s.Prompt]
			if !ok {
				g = make([]float64, len(p.Actions))
				grads[s.Prompt] = g
				order = append(order, s.Prompt)
			}
			for t, tok := range s.Completion.Tokens {
				for j := range g {
					ind := 0.0
					if j == tok {
						ind = 1
					}
					g[j] += res.Grads[i][t] * (ind - probs[i][j])
				}
			}
		}
		var norm float64
		for _, prompt := range order {
			g, z := grads[prompt], p.row(prompt)
			for j := range z {
				z[j] -= p.LR * g[j]
				norm += g[j] * g[j]
			}
		}
		st.GradNorm = math.Sqrt(norm)
	}
	return st, nil
}
