package gpu

import (
	"context"
	"sync"
	"time"
)

// SampleSource is what a Sampler reads: an Inventory, or a test double.
type SampleSource interface {
	Devices() []DeviceInfo
	Sample() []Sample
}

// SamplerConfig configures a Sampler.
type SamplerConfig struct {
	// Interval between samples in Run (default 1 s).
	Interval time.Duration
	// History is how many samples per GPU the ring buffer keeps (default 300).
	History int
	// Attribution, if set, fills Sample.Actors.
	Attribution *Attribution
	// Ticker makes the tick channel for Run (a time.Ticker if nil); tests
	// inject a channel they drive. stop releases it.
	Ticker func(d time.Duration) (tick <-chan time.Time, stop func())
	// BeforeSample, if set, runs before each sampling pass (a BusyFeed's
	// Pull, so simulated GPUs see the work reported since the last pass).
	BeforeSample func()
	// OnSample, if set, is called after each stored sampling pass (for
	// pushing samples elsewhere, and for tests to wait on Run).
	OnSample func([]Sample)
}

// Sampler samples a node's GPUs periodically and keeps a ring buffer of
// recent samples per GPU. Reads never touch NVML: they return the stored
// samples, so metrics scrapes and dashboard polls cost no device queries.
// It is safe for concurrent use.
type Sampler struct {
	src  SampleSource
	cfg  SamplerConfig
	devs []DeviceInfo

	mu     sync.RWMutex
	rings  [][]Sample // per GPU, capacity History
	next   []int      // next write position per GPU
	count  []int      // samples stored per GPU
	latest []Sample
}

// NewSampler returns a sampler over src; call Run or SampleOnce.
func NewSampler(src SampleSource, cfg SamplerConfig) *Sampler {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.History <= 0 {
		cfg.History = 300
	}
	if cfg.Ticker == nil {
		cfg.Ticker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	devs := src.Devices()
	s := &Sampler{src: src, cfg: cfg, devs: devs,
		rings: make([][]Sample, len(devs)), next: make([]int, len(devs)), count: make([]int, len(devs))}
	for i := range s.rings {
		s.rings[i] = make([]Sample, cfg.History)
	}
	return s
}

// Interval is the sampling interval.
func (s *Sampler) Interval() time.Duration { return s.cfg.Interval }

// Devices returns the static descriptions of the sampled GPUs.
func (s *Sampler) Devices() []DeviceInfo { return append([]DeviceInfo(nil), s.devs...) }

// SampleOnce takes one sample of every GPU, stores it and returns it.
func (s *Sampler) SampleOnce() []Sample {
	if s.cfg.BeforeSample != nil {
		s.cfg.BeforeSample()
	}
	samples := s.src.Sample()
	for i := range samples {
		samples[i].Actors = measureHolders(s.cfg.Attribution.Holders(samples[i].Index), samples[i].Processes)
	}
	s.mu.Lock()
	for _, smp := range samples {
		i := smp.Index
		if i < 0 || i >= len(s.rings) {
			continue // a source that grew devices: not ours to store
		}
		s.rings[i][s.next[i]] = smp
		s.next[i] = (s.next[i] + 1) % len(s.rings[i])
		s.count[i] = min(s.count[i]+1, len(s.rings[i]))
	}
	s.latest = samples
	s.mu.Unlock()
	if s.cfg.OnSample != nil {
		s.cfg.OnSample(samples)
	}
	return samples
}

// Run samples at every tick until ctx ends, starting with one sample now.
// It returns ctx.Err().
func (s *Sampler) Run(ctx context.Context) error {
	tick, stop := s.cfg.Ticker(s.cfg.Interval)
	defer stop()
	s.SampleOnce()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			s.SampleOnce()
		}
	}
}

// Latest returns the most recent sample of every GPU (nil before the first).
func (s *Sampler) Latest() []Sample {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]Sample(nil), s.latest...)
}

// History returns the stored samples of GPU index, oldest first.
func (s *Sampler) History(index int) []Sample {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if index < 0 || index >= len(s.rings) {
		return nil
	}
	n, ring := s.count[index], s.rings[index]
	if n == 0 {
		return nil
	}
	out := make([]Sample, 0, n)
	start := (s.next[index] - n + len(ring)) % len(ring)
	for k := 0; k < n; k++ {
		out = append(out, ring[(start+k)%len(ring)])
	}
	return out
}

// measureHolders sets each holder's measured SM utilization from the
// process samples when its PID identifies it alone on the GPU.
func measureHolders(hs []Holder, procs []Process) []Holder {
	perPID := map[uint32]int{}
	for _, h := range hs {
		if h.PID != 0 {
			perPID[h.PID]++
		}
	}
	for k := range hs {
		h := &hs[k]
		h.SMUtil = nil
		if h.PID == 0 || perPID[h.PID] != 1 {
			continue
		}
		for _, p := range procs {
			if p.PID == h.PID && p.SMUtil != nil {
				u := *p.SMUtil
				h.SMUtil = &u
			}
		}
		if h.SMUtil == nil {
			zero := uint32(0) // no process entry: the actor ran nothing here
			h.SMUtil = &zero
		}
	}
	return hs
}
