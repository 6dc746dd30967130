package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"troupe/actors"
	"troupe/algorithms/policy"
	"troupe/algorithms/policy/hf"
)

// This file saves and restores a policy's whole training state, so that a
// run stopped after a step continues exactly: the weights (or the LoRA
// adapter) as Save writes them, and beside them OptimizerFile with AdamW's
// moments and step counts and the actor's token counters.

// OptimizerFile is the safetensors file a state directory holds beside the
// weights: tensors "m" and "v" (AdamW's moments, flat in the order of the
// weights; absent before the first step) and the step counts in its
// metadata.
const OptimizerFile = "optimizer.safetensors"

// StateRequest names a state directory and, for a LoRA policy, the adapter.
type StateRequest struct {
	Dir     string
	Meta    map[string]string
	Adapter string // "" the actor's first
}

// SaveState writes the policy's training state at req.Dir: the checkpoint
// Save writes (a Hugging Face model directory, or a PEFT adapter
// directory) and OptimizerFile. It returns req.Dir.
func (p *Policy) SaveState(ctx context.Context, req StateRequest) (string, error) {
	if _, err := p.Save(ctx, SaveRequest{Path: req.Dir, Meta: req.Meta, Adapter: req.Adapter}); err != nil {
		return "", err
	}
	st, err := p.optState(req.Adapter)
	if err != nil {
		return "", fmt.Errorf("save state %s: %w", req.Dir, err)
	}
	meta := map[string]string{
		"step":         strconv.Itoa(st.Step),
		"model_step":   strconv.Itoa(p.model.Steps()),
		"gen_tokens":   strconv.FormatInt(p.gen, 10),
		"train_tokens": strconv.FormatInt(p.train, 10),
	}
	var ts []hf.Tensor
	if st.M != nil {
		ts = []hf.Tensor{{Name: "m", Shape: []int{len(st.M)}, Data: st.M}, {Name: "v", Shape: []int{len(st.V)}, Data: st.V}}
	}
	if err := hf.WriteSafetensors(filepath.Join(req.Dir, OptimizerFile), ts, hf.F32, meta); err != nil {
		return "", fmt.Errorf("save state %s: %w", req.Dir, err)
	}
	return req.Dir, nil
}

// LoadState restores what SaveState wrote at req.Dir: the weights (or the
// adapter's), the moments and step counts, and the token counters.
func (p *Policy) LoadState(ctx context.Context, req StateRequest) (WeightStats, error) {
	ck, err := hf.Open(filepath.Join(req.Dir, OptimizerFile))
	if err != nil {
		return WeightStats{}, fmt.Errorf("%w: load state %s: %w", ErrCheckpoint, req.Dir, err)
	}
	defer ck.Close()
	meta := ck.Metadata()
	num := func(key string) (int64, error) {
		n, err := strconv.ParseInt(meta[key], 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: load state %s: %s metadata %q", ErrCheckpoint, req.Dir, key, meta[key])
		}
		return n, nil
	}
	var vals [4]int64
	for i, k := range []string{"step", "model_step", "gen_tokens", "train_tokens"} {
		if vals[i], err = num(k); err != nil {
			return WeightStats{}, err
		}
	}
	st := policy.OptState{Step: int(vals[0])}
	if info, ok := ck.Info("m"); ok {
		n := 0 // a shape of another rank fails in ReadF32
		if len(info.Shape) == 1 {
			n = info.Shape[0]
		}
		st.M, st.V = make([]float32, n), make([]float32, n)
		if err := ck.ReadF32("m", []int{n}, st.M); err != nil {
			return WeightStats{}, fmt.Errorf("%w: load state %s: %w", ErrCheckpoint, req.Dir, err)
		}
		if err := ck.ReadF32("v", []int{n}, st.V); err != nil {
			return WeightStats{}, fmt.Errorf("%w: load state %s: %w", ErrCheckpoint, req.Dir, err)
		}
	}
	if m := p.lora(); m != nil {
		if err := p.loadAdapter(req.Dir, req.Adapter); err != nil {
			return WeightStats{}, fmt.Errorf("load state %s: %w", req.Dir, err)
		}
		ad := m.Adapter(m.ActiveAdapter())
		if err := ad.SetOptimizerState(st); err != nil {
			return WeightStats{}, fmt.Errorf("%w: load state %s: %w", ErrCheckpoint, req.Dir, err)
		}
		if err := m.SetOptimizerState(policy.OptState{Step: int(vals[1])}); err != nil {
			return WeightStats{}, fmt.Errorf("%w: load state %s: %w", ErrCheckpoint, req.Dir, err)
		}
	} else {
		if _, err := p.Load(ctx, req.Dir); err != nil {
			return WeightStats{}, err
		}
		m, ok := p.model.(*policy.Llama)
		if !ok {
			return WeightStats{}, fmt.Errorf("%w: load state: a %s model has no optimizer state to restore", ErrConfig, p.model.Family())
		}
		if err := m.SetOptimizerState(st); err != nil {
			return WeightStats{}, fmt.Errorf("%w: load state %s: %w", ErrCheckpoint, req.Dir, err)
		}
	}
	p.gen, p.train = vals[2], vals[3]
	return p.AdapterWeights(ctx, req.Adapter)
}

// optState is the optimizer state of the adapter in use (adapter "" the
// first) or of the whole model.
func (p *Policy) optState(adapter string) (policy.OptState, error) {
	if err := p.use(adapter); err != nil {
		return policy.OptState{}, err
	}
	if m := p.lora(); m != nil {
		return m.Adapter(m.ActiveAdapter()).OptimizerState()
	}
	m, ok := p.model.(*policy.Llama)
	if !ok {
		return policy.OptState{}, fmt.Errorf("%w: a %s model has no optimizer state to save", ErrConfig, p.model.Family())
	}
	return m.OptimizerState()
}

// SaveState writes every policy's training state as dir/<name> (see
// Policy.SaveState) and returns the paths by policy name.
func (t *Team) SaveState(ctx context.Context, dir string, meta map[string]string) (map[string]string, error) {
	out := map[string]string{}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return out, fmt.Errorf("save state: %w", err)
	}
	for _, name := range t.Names {
		req := StateRequest{Dir: filepath.Join(dir, name), Meta: meta}
		if t.lora {
			req.Adapter = name
		}
		p, err := actors.Call(ctx, t.Handles[name], (*Policy).SaveState, req).Get(ctx)
		if err != nil {
			return out, fmt.Errorf("save state %s: %w", name, err)
		}
		out[name] = p
	}
	return out, nil
}

// LoadState restores every policy's training state from dir/<name>, as
// Team.SaveState wrote it (into every data-parallel replica, whose groups
// are formed again first: a replica the runtime restarted has left its
// group).
func (t *Team) LoadState(ctx context.Context, dir string) error {
	if err := t.reformGroups(ctx); err != nil {
		return err
	}
	for _, name := range t.Names {
		req := StateRequest{Dir: filepath.Join(dir, name)}
		if t.lora {
			req.Adapter = name
		}
		if _, err := callReplicas(ctx, t, t.Handles[name], (*Policy).LoadState, req); err != nil {
			return fmt.Errorf("load state %s: %w", name, err)
		}
	}
	return nil
}

// Steps is the number of AT-GRPO steps taken: the clock every step's
// environment seeds and sampling seeds derive from.
func (a *ATGRPO) Steps() int64 { return a.step }

// SetSteps sets the step clock, as when a run resumes after n steps.
func (a *ATGRPO) SetSteps(n int64) { a.step = n }

// Crash crashes the actor as the loss of its process would
// (actors.Crash): a fault to inject in tests and chaos runs. The runtime
// restarts it within its MaxRestarts, from its constructor.
func (p *Policy) Crash(_ context.Context, reason string) (struct{}, error) {
	panic(actors.Crash(reason))
}

// Pid is the OS process the actor runs in: a worker process on a cluster,
// the driver's own in the embedded one.
func (p *Policy) Pid(context.Context, struct{}) (int, error) { return os.Getpid(), nil }
