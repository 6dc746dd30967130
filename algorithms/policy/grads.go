package policy

import "fmt"

// This file moves accumulated gradients in and out of a model as flat
// arrays, for data-parallel training: replicas of one policy each
// accumulate the gradient of their shard of a batch, reduce the arrays
// among themselves (an allreduce), put the sum back and take the same
// optimizer step.

// Gradients downloads the accumulated gradients of every parameter in the
// layout of Weights. A model with a frozen base (LoRA adapters, a BF16
// base) has no base gradients: ErrBatch; use Adapter.Gradients. Before the
// first backward (or ZeroGrad) it is ErrBatch too.
func (m *Llama) Gradients() ([]float32, error) {
	if m.frozen() {
		return nil, fmt.Errorf("policy: Gradients of a frozen base (train the adapters' instead): %w", ErrBatch)
	}
	if m.grads == nil {
		return nil, fmt.Errorf("policy: Gradients before any backward: %w", ErrBatch)
	}
	g := make([]float32, m.nparams)
	m.be.Download(g, m.grads)
	if err := m.be.Sync(); err != nil {
		return nil, fmt.Errorf("policy: download gradients: %w", err)
	}
	return g, nil
}

// SetGradients replaces the accumulated gradients with g (as Gradients
// returns them); the next Step applies them.
func (m *Llama) SetGradients(g []float32) error {
	if m.frozen() {
		return fmt.Errorf("policy: SetGradients of a frozen base (set the adapters' instead): %w", ErrBatch)
	}
	if len(g) != m.nparams {
		return fmt.Errorf("policy: SetGradients: %d values for %d parameters: %w", len(g), m.nparams, ErrBatch)
	}
	if m.grads == nil {
		if err := m.ZeroGrad(); err != nil {
			return err
		}
	}
	m.be.Upload(m.grads, g)
	if err := m.be.Sync(); err != nil {
		return fmt.Errorf("policy: upload gradients: %w", err)
	}
	return nil
}

// SetGradients replaces the adapter's accumulated gradients with g (the
// layout of Weights) and marks it as trained since ZeroGrad, so the next
// Step updates it even when this model's own shard gave it no gradient.
func (ad *Adapter) SetGradients(g []float32) error {
	if len(g) != ad.n {
		return fmt.Errorf("policy: adapter %q: SetGradients: %d values for %d parameters: %w", ad.name, len(g), ad.n, ErrBatch)
	}
	if ad.grads == nil {
		if err := ad.m.ensureAdapterGrads(); err != nil {
			return err
		}
	}
	ad.m.be.Upload(ad.grads, g)
	ad.touched = true
	if err := ad.m.be.Sync(); err != nil {
		return fmt.Errorf("policy: adapter %q: upload gradients: %w", ad.name, err)
	}
	return nil
}
