package actors

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// ResourceSet is what an actor holds on its node while it lives.
type ResourceSet struct {
	CPUs        float64            `msgpack:"cpus,omitempty"`
	GPUs        float64            `msgpack:"gpus,omitempty"` // fractions below 1 share a GPU
	MemoryBytes int64              `msgpack:"mem,omitempty"`
	Custom      map[string]float64 `msgpack:"custom,omitempty"`
}

// String formats the non-zero resources, e.g. "GPUs=1 CPUs=2".
func (r ResourceSet) String() string {
	var parts []string
	if r.GPUs != 0 {
		parts = append(parts, fmt.Sprintf("GPUs=%g", r.GPUs))
	}
	if r.CPUs != 0 {
		parts = append(parts, fmt.Sprintf("CPUs=%g", r.CPUs))
	}
	if r.MemoryBytes != 0 {
		parts = append(parts, fmt.Sprintf("memory=%d", r.MemoryBytes))
	}
	keys := make([]string, 0, len(r.Custom))
	for k := range r.Custom {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%g", k, r.Custom[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Validate reports the first malformed amount.
func (r ResourceSet) Validate() error {
	bad := func(v float64) bool { return v < 0 || math.IsNaN(v) || math.IsInf(v, 0) }
	if bad(r.CPUs) {
		return fmt.Errorf("CPUs(%g): must be a finite number ≥ 0", r.CPUs)
	}
	if bad(r.GPUs) {
		return fmt.Errorf("GPUs(%g): must be a finite number ≥ 0", r.GPUs)
	}
	if r.GPUs > 1 && r.GPUs != math.Trunc(r.GPUs) {
		return fmt.Errorf("GPUs(%g): requests above one GPU must be whole numbers", r.GPUs)
	}
	if r.MemoryBytes < 0 {
		return fmt.Errorf("Memory(%d): must be ≥ 0", r.MemoryBytes)
	}
	for k, v := range r.Custom {
		if k == "" {
			return fmt.Errorf("Resources: empty resource name")
		}
		if bad(v) {
			return fmt.Errorf("Resources: %s=%g must be a finite number ≥ 0", k, v)
		}
	}
	return nil
}

// Spec is everything a runtime needs to create an actor. Programs build it
// with Spawn's options; runtimes receive it.
type Spec struct {
	Type           string      `msgpack:"type"`   // registered type name
	Config         []byte      `msgpack:"config"` // the constructor's config, msgpack
	Name           string      `msgpack:"name,omitempty"`
	Resources      ResourceSet `msgpack:"res"`
	MaxRestarts    int         `msgpack:"max_restarts,omitempty"` // -1: unlimited
	MaxConcurrency int         `msgpack:"max_conc,omitempty"`     // 0 or 1: calls run one at a time
	MaxTaskRetries int         `msgpack:"max_retries,omitempty"`  // -1: unlimited
	Placement      Placement   `msgpack:"place,omitempty"`        // placement group bundle or node affinity (placement.go)
}

// Validate reports the first malformed field.
func (s *Spec) Validate() error {
	if s.Type == "" {
		return fmt.Errorf("spawn: empty actor type")
	}
	if err := s.Resources.Validate(); err != nil {
		return fmt.Errorf("spawn %s: %w", s.Type, err)
	}
	if s.MaxRestarts < -1 {
		return fmt.Errorf("spawn %s: MaxRestarts(%d): must be ≥ -1 (-1 = unlimited)", s.Type, s.MaxRestarts)
	}
	if s.MaxTaskRetries < -1 {
		return fmt.Errorf("spawn %s: MaxTaskRetries(%d): must be ≥ -1 (-1 = unlimited)", s.Type, s.MaxTaskRetries)
	}
	if s.MaxConcurrency < 0 {
		return fmt.Errorf("spawn %s: MaxConcurrency(%d): must be ≥ 1", s.Type, s.MaxConcurrency)
	}
	if err := s.Placement.Validate(); err != nil {
		return fmt.Errorf("spawn %s: %w", s.Type, err)
	}
	return nil
}

// Option configures a spawn.
type Option func(*Spec)

// GPUs requests n GPUs; a fraction below 1 shares one GPU with other
// fractional actors while their sum stays ≤ 1.
func GPUs(n float64) Option { return func(s *Spec) { s.Resources.GPUs = n } }

// CPUs requests n CPUs (default 0: an actor holds no CPU while idle).
func CPUs(n float64) Option { return func(s *Spec) { s.Resources.CPUs = n } }

// Memory requests bytes of memory.
func Memory(bytes int64) Option { return func(s *Spec) { s.Resources.MemoryBytes = bytes } }

// Resources requests custom resources, e.g. {"tpu": 1}. It adds to earlier
// Resources options.
func Resources(m map[string]float64) Option {
	return func(s *Spec) {
		if s.Resources.Custom == nil {
			s.Resources.Custom = map[string]float64{}
		}
		for k, v := range m {
			s.Resources.Custom[k] = v
		}
	}
}

// Name makes the actor a named actor, found with GetActor.
func Name(name string) Option { return func(s *Spec) { s.Name = name } }

// MaxRestarts sets how often a crashed actor is restarted (-1: always).
func MaxRestarts(n int) Option { return func(s *Spec) { s.MaxRestarts = n } }

// MaxConcurrency lets up to n calls run at once (default 1: arrival order).
func MaxConcurrency(n int) Option { return func(s *Spec) { s.MaxConcurrency = n } }

// MaxTaskRetries retries a call lost to a crash up to n times (-1: always);
// the default 0 fails it (at-most-once).
func MaxTaskRetries(n int) Option { return func(s *Spec) { s.MaxTaskRetries = n } }
