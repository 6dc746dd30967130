package agent

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"

	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
	"troupe/algorithms/rl"
)

// This file gives the policy actor LoRA adapters on a frozen base: one
// adapter per role it serves (Config.Adapters), chosen per request. A team
// can then run its roles as one actor with one adapter per role
// (TeamConfig.SharedBase) or as one actor per role; both give the same
// results on a seeded run, since an adapter's initial weights depend only
// on the seed and its name and each update touches one adapter.

// lora is the model with adapters, or nil for a policy that trains all
// weights.
func (p *Policy) lora() *policy.Llama {
	if m, ok := p.model.(*policy.Llama); ok && len(m.Adapters()) > 0 {
		return m
	}
	return nil
}

// adapterSeed derives an adapter's initialisation seed from the policy seed
// and the adapter's name (not the actor's position in a team).
func adapterSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return seed ^ h.Sum64()
}

// addAdapters sets up Config.LoRA after the base is built: BF16 base if
// asked and one adapter per name (an adapter checkpoint's came with the
// model, see resolve).
func (p *Policy) addAdapters() error {
	cfg := &p.cfg
	if cfg.LoRA.Rank == 0 {
		if len(cfg.Adapters) > 0 || cfg.BaseBF16 {
			return fmt.Errorf("%w: Adapters or BaseBF16 without LoRA (LoRA.Rank is 0)", ErrConfig)
		}
		return nil
	}
	m, ok := p.model.(*policy.Llama)
	if !ok {
		return fmt.Errorf("%w: LoRA needs a model of the Llama family, not %s", ErrConfig, p.model.Family())
	}
	if cfg.BaseBF16 {
		if err := m.SetBaseDType(hf.BF16); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	for _, name := range cfg.Adapters {
		if m.Adapter(name) != nil {
			continue // the checkpoint's
		}
		if _, err := m.AddAdapter(name, cfg.LoRA, adapterSeed(cfg.Seed, name)); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}

// use makes the named adapter ("" the first) active for the next call.
func (p *Policy) use(adapter string) error {
	m := p.lora()
	if m == nil {
		if adapter != "" {
			return fmt.Errorf("%w: adapter %q asked of a policy without LoRA adapters", ErrInput, adapter)
		}
		return nil
	}
	if adapter == "" {
		adapter = p.cfg.Adapters[0]
	}
	if err := m.SetActiveAdapter(adapter); err != nil {
		return fmt.Errorf("%w: %w", ErrInput, err)
	}
	return nil
}

// AdapterUpdate is an update of one adapter.
type AdapterUpdate struct {
	Adapter string
	Batch   []rl.Sample
}

// UpdateAdapter is Update on one adapter: its A and B and its AdamW state
// change, the base and the other adapters do not.
func (p *Policy) UpdateAdapter(ctx context.Context, req AdapterUpdate) (rl.UpdateStats, error) {
	if err := p.use(req.Adapter); err != nil {
		return rl.UpdateStats{}, fmt.Errorf("update %s: %w", req.Adapter, err)
	}
	return p.update(ctx, req.Batch)
}

// UpdateAdapters updates every adapter that has a buffer (buffers[name]),
// one after another: a shared-base actor's node of the team's update.
func (p *Policy) UpdateAdapters(ctx context.Context, buffers map[string][]rl.Sample) ([]NamedStats, error) {
	if p.lora() == nil {
		return nil, fmt.Errorf("%w: UpdateAdapters on a policy without LoRA adapters", ErrInput)
	}
	var out []NamedStats
	for _, name := range p.cfg.Adapters {
		st, err := p.UpdateAdapter(ctx, AdapterUpdate{Adapter: name, Batch: buffers[name]})
		if err != nil {
			return out, fmt.Errorf("adapter %s: %w", name, err)
		}
		out = append(out, NamedStats{Name: name, Stats: st})
	}
	return out, nil
}

// saveAdapter writes the request's adapter in PEFT's layout at req.Path.
func (p *Policy) saveAdapter(req SaveRequest) (string, error) {
	if err := p.use(req.Adapter); err != nil {
		return "", fmt.Errorf("save %s: %w", req.Path, err)
	}
	m := p.lora()
	ad := m.Adapter(m.ActiveAdapter())
	if err := ad.Save(req.Path); err != nil {
		return "", fmt.Errorf("save %s: %w", req.Path, err)
	}
	return req.Path, nil
}

// loadAdapter replaces an adapter's weights (adapter "" the first) with
// those of a PEFT adapter directory of the same configuration.
func (p *Policy) loadAdapter(dir, adapter string) error {
	if err := p.use(adapter); err != nil {
		return err
	}
	m := p.lora()
	if err := m.Adapter(m.ActiveAdapter()).Load(dir); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return nil
}

// AdapterWeights is Weights with Params, Norm and Steps of the named
// adapter ("" the first) for a LoRA policy: the trainable part.
func (p *Policy) AdapterWeights(ctx context.Context, adapter string) (WeightStats, error) {
	m := p.lora()
	if m == nil {
		return p.Weights(ctx, struct{}{})
	}
	if adapter == "" {
		adapter = p.cfg.Adapters[0]
	}
	ad := m.Adapter(adapter)
	if ad == nil {
		return WeightStats{}, fmt.Errorf("%w: no adapter %q (have %v)", ErrInput, adapter, m.Adapters())
	}
	w, err := ad.Weights()
	if err != nil {
		return WeightStats{}, fmt.Errorf("weights: %w", err)
	}
	var ss float64
	for _, x := range w {
		ss += float64(x) * float64(x)
	}
	return WeightStats{Name: adapter, Params: ad.NumParams(), Norm: math.Sqrt(ss), Steps: ad.Steps(),
		GenTokens: p.gen, TrainTok: p.train, Family: m.Family(), Context: m.ContextLen(), Backend: p.where}, nil
}
