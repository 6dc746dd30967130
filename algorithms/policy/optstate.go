package policy

import (
	"errors"
	"fmt"

	"troupe/gpu/compute"
)

// OptState is an AdamW optimizer's state: the step count and the first
// and second moments (M, V), flat in the order of Weights. M and V are nil
// before the first step allocates them. A run that restores it (with the
// weights) continues exactly as if it had never stopped: the next Step
// uses the same moments and bias correction.
type OptState struct {
	Step int
	M, V []float32
}

// ErrOptState reports optimizer state that does not fit the model.
var ErrOptState = errors.New("policy: optimizer state does not fit")

// OptimizerState returns the model's optimizer state: its step count and,
// while the base trains (no adapters, no BF16 base), the base's moments.
// A model with adapters keeps each adapter's state in the adapter (see
// Adapter.OptimizerState); its own Step still counts every step taken.
func (m *Llama) OptimizerState() (OptState, error) {
	s := OptState{Step: m.step}
	if m.mom == nil {
		return s, nil
	}
	var err error
	if s.M, s.V, err = downloadMoments(m.be, m.mom, m.vel, m.nparams); err != nil {
		return OptState{}, fmt.Errorf("policy: optimizer state: %w", err)
	}
	return s, nil
}

// SetOptimizerState replaces the step count and the base's moments with s
// (as OptimizerState returned it). Moments need a trainable base; nil
// moments drop any the model has, as before its first step.
func (m *Llama) SetOptimizerState(s OptState) error {
	if err := checkOptState(s, m.nparams); err != nil {
		return err
	}
	if s.M != nil && m.frozen() {
		return fmt.Errorf("%w: moments for a frozen base (adapters or a BF16 base)", ErrOptState)
	}
	if s.M == nil {
		for _, b := range []compute.Buffer{m.mom, m.vel} {
			if b != nil {
				m.be.Free(b)
			}
		}
		m.mom, m.vel, m.momV, m.velV = nil, nil, lviews{}, lviews{}
		m.step = s.Step
		return nil
	}
	if m.mom == nil {
		var err error
		if m.mom, m.momV, err = m.allocParams("AdamW m"); err != nil {
			return err
		}
		if m.vel, m.velV, err = m.allocParams("AdamW v"); err != nil {
			return err
		}
	}
	m.be.Upload(m.mom, s.M)
	m.be.Upload(m.vel, s.V)
	if err := m.be.Sync(); err != nil {
		return fmt.Errorf("policy: set optimizer state: %w", err)
	}
	m.step = s.Step
	return nil
}

// OptimizerState returns the adapter's own optimizer state: its step
// count and moments (nil before its first step).
func (ad *Adapter) OptimizerState() (OptState, error) {
	s := OptState{Step: ad.step}
	if ad.mom == nil {
		return s, nil
	}
	var err error
	if s.M, s.V, err = downloadMoments(ad.m.be, ad.mom, ad.vel, ad.n); err != nil {
		return OptState{}, fmt.Errorf("policy: adapter %q: optimizer state: %w", ad.name, err)
	}
	return s, nil
}

// SetOptimizerState replaces the adapter's step count and moments with s
// (as OptimizerState returned it).
func (ad *Adapter) SetOptimizerState(s OptState) error {
	if err := checkOptState(s, ad.n); err != nil {
		return fmt.Errorf("adapter %q: %w", ad.name, err)
	}
	be := ad.m.be
	if s.M == nil {
		for _, b := range []compute.Buffer{ad.mom, ad.vel} {
			if b != nil {
				be.Free(b)
			}
		}
		ad.mom, ad.vel, ad.mv, ad.vv = nil, nil, nil, nil
		ad.step = s.Step
		return nil
	}
	if ad.mom == nil {
		var err error
		if ad.mom, ad.mv, err = ad.alloc("AdamW m"); err != nil {
			return err
		}
		if ad.vel, ad.vv, err = ad.alloc("AdamW v"); err != nil {
			return err
		}
	}
	be.Upload(ad.mom, s.M)
	be.Upload(ad.vel, s.V)
	if err := be.Sync(); err != nil {
		return fmt.Errorf("policy: adapter %q: set optimizer state: %w", ad.name, err)
	}
	ad.step = s.Step
	return nil
}

func checkOptState(s OptState, n int) error {
	switch {
	case s.Step < 0:
		return fmt.Errorf("%w: step %d", ErrOptState, s.Step)
	case (s.M == nil) != (s.V == nil):
		return fmt.Errorf("%w: one moment without the other", ErrOptState)
	case s.M != nil && (len(s.M) != n || len(s.V) != n):
		return fmt.Errorf("%w: moments of %d and %d values for %d parameters", ErrOptState, len(s.M), len(s.V), n)
	}
	return nil
}

func downloadMoments(be compute.Backend, mom, vel compute.Buffer, n int) (m, v []float32, err error) {
	m, v = make([]float32, n), make([]float32, n)
	be.Download(m, mom)
	be.Download(v, vel)
	if err := be.Sync(); err != nil {
		return nil, nil, err
	}
	return m, v, nil
}
