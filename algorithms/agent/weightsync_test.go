package agent

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"troupe/algorithms/policy"
	"troupe/algorithms/rl"
)

// A trained policy's export, imported by a fresh one of the same shape,
// makes it sample and score exactly as the trainer does: full weights
// without LoRA, the adapters alone (and not the base) with LoRA.
func TestWeightSyncRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  func() Config
	}{
		{"full", tinyConfig},
		{"lora", func() Config { c := loraConfig(); c.Adapters = []string{"planner", "tool"}; return c }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			cfg.Optim = policy.DefaultOptim()
			cfg.Optim.LR = 1e-2
			learner, worker := newTiny(t, cfg), newTiny(t, cfg)
			if _, err := learner.Update(ctx, ppoBatch(t, learner)); err != nil {
				t.Fatal(err)
			}
			ws, err := learner.ExportWeights(ctx, 7)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.LoRA.Rank > 0 {
				if !slices.Equal(ws.Names, []string{"planner", "tool"}) {
					t.Fatalf("exported %v, want the adapters", ws.Names)
				}
				if ws.Bytes() >= 4*learner.model.NumParams() {
					t.Fatalf("adapter set is %d bytes, not smaller than the base", ws.Bytes())
				}
			}
			batch := ppoBatch(t, learner)
			prompts := make([]string, len(batch))
			comps := make([]rl.Completion, len(batch))
			for i, s := range batch {
				prompts[i], comps[i] = s.Prompt, s.Completion
			}
			want, err := learner.LogProbs(ctx, LogProbsRequest{Prompts: prompts, Completions: comps})
			if err != nil {
				t.Fatal(err)
			}
			before, _ := worker.LogProbs(ctx, LogProbsRequest{Prompts: prompts, Completions: comps})
			if slices.EqualFunc(before, want, slices.Equal) {
				t.Fatal("the update changed nothing the worker could miss")
			}
			if v, err := worker.ImportWeights(ctx, ws); err != nil || v != 7 {
				t.Fatalf("import = %d, %v", v, err)
			}
			got, err := worker.LogProbs(ctx, LogProbsRequest{Prompts: prompts, Completions: comps})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatal("the worker scores differently after the import")
			}
			if tl, _ := worker.Timeline(ctx, struct{}{}); tl.Version != 7 || tl.Sync <= 0 || tl.Train <= 0 {
				t.Fatalf("worker timeline %+v: want version 7 and sync and train time", tl)
			}
		})
	}
}

func TestImportWeightsErrors(t *testing.T) {
	ctx := context.Background()
	full := newTiny(t, tinyConfig())
	lcfg := loraConfig()
	lcfg.Adapters = []string{"planner"}
	lora := newTiny(t, lcfg)
	fset, _ := full.ExportWeights(ctx, 1)
	lset, _ := lora.ExportWeights(ctx, 1)
	for _, tc := range []struct {
		name string
		p    *Policy
		ws   WeightSet
	}{
		{"names and data differ", full, WeightSet{Names: []string{""}}},
		{"full set into lora", lora, fset},
		{"adapters into full", full, lset},
		{"unknown adapter", lora, WeightSet{Names: []string{"tool"}, Data: lset.Data}},
		{"odd bytes", full, WeightSet{Names: []string{""}, Data: [][]byte{{1, 2, 3}}}},
		{"short", full, WeightSet{Names: []string{""}, Data: [][]byte{fset.Data[0][:8]}}},
	} {
		if _, err := tc.p.ImportWeights(ctx, tc.ws); !errors.Is(err, ErrInput) {
			t.Errorf("%s: err %v, want ErrInput", tc.name, err)
		}
	}
}

// FuzzImportWeights: any bytes as a weight set are imported or refused
// with ErrInput, never a panic.
func FuzzImportWeights(f *testing.F) {
	p, err := NewPolicy(context.Background(), tinyConfig())
	if err != nil {
		f.Fatal(err)
	}
	ws, _ := p.ExportWeights(context.Background(), 1)
	f.Add("", ws.Data[0])
	f.Add("", []byte{0, 0, 128})
	f.Add("tool", []byte{})
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		if _, err := p.ImportWeights(context.Background(), WeightSet{Names: []string{name}, Data: [][]byte{b}}); err != nil && !errors.Is(err, ErrInput) {
			t.Fatalf("err %v, want nil or ErrInput", err)
		}
	})
}

// The decoupled objective on fresh samples (behaviour = proximal policy)
// is PPO's: importance weights 1, the same step up to the rounding of the
// rescoring. On stale samples the weights leave 1, and tokens above the cap
// are dropped.
func TestDecoupledUpdate(t *testing.T) {
	ctx := context.Background()
	cfg := tinyConfig()
	cfg.MiniBatch = WholeBatch
	plain, dec := newTiny(t, cfg), newTiny(t, func() Config { c := cfg; c.Decoupled = true; return c }())
	sp, err := plain.Update(ctx, ppoBatch(t, plain))
	if err != nil {
		t.Fatal(err)
	}
	sd, err := dec.Update(ctx, ppoBatch(t, dec))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(sp.Loss-sd.Loss) > 1e-5 || math.Abs(sp.GradNorm-sd.GradNorm) > 1e-4 {
		t.Fatalf("fresh samples: decoupled loss %v grad norm %v, PPO %v %v", sd.Loss, sd.GradNorm, sp.Loss, sp.GradNorm)
	}
	// Stale: behaviour log-probs shifted by −0.1 (weight e^0.1) and by −3
	// on the first token (weight e^3 > 5: dropped).
	batch := ppoBatch(t, dec)
	for i, s := range batch {
		old := slices.Clone(s.Completion.LogProbs)
		for j := range old {
			old[j] -= 0.1
		}
		old[0] -= 2.9
		batch[i].OldLogProbs = old
	}
	prompts := make([]string, len(batch))
	comps := make([]rl.Completion, len(batch))
	for i, s := range batch {
		prompts[i], comps[i] = s.Prompt, s.Completion
	}
	seqs, offs, err := dec.sequences(prompts, comps)
	if err != nil {
		t.Fatal(err)
	}
	out, isw, err := dec.proximal(batch, seqs, offs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if isw[i][0] != 0 {
			t.Fatalf("sample %d: first token weight %v, want 0 (above the cap)", i, isw[i][0])
		}
		for j := 1; j < len(isw[i]); j++ {
			if math.Abs(isw[i][j]-math.Exp(0.1)) > 1e-3 {
				t.Fatalf("sample %d token %d: weight %v, want e^0.1", i, j, isw[i][j])
			}
		}
		if out[i].OldLogProbs[1] == batch[i].OldLogProbs[1] {
			t.Fatalf("sample %d: old log-probs not replaced by the proximal ones", i)
		}
	}
	if st, err := dec.Update(ctx, batch); err != nil || st.OptSteps != 1 {
		t.Fatalf("stale update: %+v, %v", st, err)
	}
	bad := cfg
	bad.ISCap = 0.5
	if _, err := NewPolicy(ctx, bad); !errors.Is(err, ErrConfig) {
		t.Fatalf("cap 0.5: %v, want ErrConfig", err)
	}
}
