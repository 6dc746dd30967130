package policy

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"troupe/gpu/compute/cpu"
)

// TestOptStateResumesExactly: a model that trained, copied into a fresh
// one through its weights and optimizer state, takes the same next steps
// bit for bit; without the state the next step differs (the test can fail).
func TestOptStateResumesExactly(t *testing.T) {
	cfg := tinyVariants(t)["llama-mqa-biases-llama3"]
	r := rand.New(rand.NewPCG(5, 5))
	batch := Batch{Tokens: randSeqs(r, 3, 8, 12, cfg.VocabSize)}
	a := mustLlama(t, cpu.New(), cfg, 1)
	for range 3 {
		if _, err := a.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := a.Weights()
	st, err := a.OptimizerState()
	if err != nil || st.Step != 3 || len(st.M) != a.NumParams() {
		t.Fatalf("state step %d, %d moments, %v", st.Step, len(st.M), err)
	}
	b := mustLlama(t, cpu.New(), cfg, 99)
	c := mustLlama(t, cpu.New(), cfg, 99)
	for _, m := range []*Llama{b, c} {
		if err := m.SetWeights(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetOptimizerState(st); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for _, m := range []*Llama{a, b, c} {
			if _, err := m.TrainStep(batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	wa, _ := a.Weights()
	wb, _ := b.Weights()
	wc, _ := c.Weights()
	if !slices.Equal(wa, wb) || b.Steps() != 5 {
		t.Fatalf("restored model diverged (steps %d)", b.Steps())
	}
	if slices.Equal(wa, wc) {
		t.Fatal("a model without the optimizer state took the same steps: the test cannot tell")
	}
	if err := b.SetOptimizerState(OptState{Step: 1, M: st.M[:3], V: st.V[:3]}); !errors.Is(err, ErrOptState) {
		t.Fatalf("short moments: %v", err)
	}
	if err := b.SetOptimizerState(OptState{Step: 1, M: st.M}); !errors.Is(err, ErrOptState) {
		t.Fatalf("one moment: %v", err)
	}
}

// TestAdapterOptStateResumesExactly: the same for one adapter of a model
// with two.
func TestAdapterOptStateResumesExactly(t *testing.T) {
	a := twoAdapterModel(t, cpu.New())
	b := twoAdapterModel(t, cpu.New())
	cfg := tinyVariants(t)["llama-mqa-biases-llama3"]
	r := rand.New(rand.NewPCG(6, 6))
	batch := Batch{Tokens: randSeqs(r, 3, 8, 12, cfg.VocabSize)}
	if err := a.SetActiveAdapter("b"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := a.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
	}
	ad := a.Adapter("b")
	w, _ := ad.Weights()
	st, err := ad.OptimizerState()
	if err != nil || st.Step != 2 || st.M == nil {
		t.Fatalf("adapter state %d %v", st.Step, err)
	}
	ms, _ := a.OptimizerState()
	if ms.Step != 2 || ms.M != nil {
		t.Fatalf("frozen base state: step %d, moments %v", ms.Step, ms.M != nil)
	}
	bd := b.Adapter("b")
	if err := bd.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	if err := bd.SetOptimizerState(st); err != nil {
		t.Fatal(err)
	}
	if err := b.SetOptimizerState(ms); err != nil {
		t.Fatal(err)
	}
	if err := b.SetActiveAdapter("b"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Llama{a, b} {
		if _, err := m.TrainStep(batch); err != nil {
			t.Fatal(err)
		}
	}
	wa, _ := a.Adapter("b").Weights()
	wb, _ := bd.Weights()
	if !slices.Equal(wa, wb) || bd.Steps() != 3 || b.Steps() != 3 {
		t.Fatalf("restored adapter diverged (steps %d, model %d)", bd.Steps(), b.Steps())
	}
	if err := b.SetOptimizerState(OptState{Step: 1, M: st.M, V: st.V}); !errors.Is(err, ErrOptState) {
		t.Fatalf("moments for a frozen base: %v", err)
	}
}
