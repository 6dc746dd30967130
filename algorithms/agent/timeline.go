package agent

import (
	"context"
	"time"
)

// phaseClock adds up where a policy actor's time went since it started;
// the trainer reads it after every step (Timeline) and takes differences.
// The actor runtime serialises an actor's calls, so it needs no lock.
type phaseClock struct {
	rollout    time.Duration // Sample: generation and its scoring pass
	train      time.Duration // Update, LogProbs (reference and proximal scoring), SFT
	sync       time.Duration // ExportWeights, ImportWeights
	collective time.Duration // waiting for other replicas (none of this package's paths wait yet)
}

// since adds the time since t0 to *d: defer p.clock.since(&p.clock.x, time.Now()).
func (c *phaseClock) since(d *time.Duration, t0 time.Time) { *d += time.Since(t0) }

// PhaseTimes are a policy actor's cumulative busy times by phase, the
// version of the weights it last imported (0 when it never did) and the
// tokens it generated.
type PhaseTimes struct {
	Rollout, Train, Sync, Collective time.Duration
	Version                          int64
	GenTokens                        int64 // tokens generated so far
}

// Timeline reports the actor's cumulative PhaseTimes.
func (p *Policy) Timeline(ctx context.Context, _ struct{}) (PhaseTimes, error) {
	return PhaseTimes{Rollout: p.clock.rollout, Train: p.clock.train, Sync: p.clock.sync, Collective: p.clock.collective, Version: p.version, GenTokens: p.gen}, nil
}
