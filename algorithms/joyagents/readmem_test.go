package joyagents

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/grpo"
	"troupe/algorithms/rl"
)

// TestDrMASKeyedByBackbone: Dr. MAS pools an agent's alternatives over the
// nodes of one backbone (prompt uid), not over the step.
func TestDrMASKeyedByBackbone(t *testing.T) {
	gs := groupsOf([]float64{1, 2, 3}, []float64{0, 0, 9}, []float64{5, 6, 7})
	gs[2].Env = 1 // agent a's second group is on another backbone
	Assign(gs, grpo.MeanCentered, true)
	if gs[0].Alts[0].Advantage != -1 || gs[2].Alts[0].Advantage != -1 {
		t.Fatalf("Dr. MAS pooled across backbones: %v %v", gs[0].Alts[0].Advantage, gs[2].Alts[0].Advantage)
	}
	gs[2].Env = 0
	Assign(gs, grpo.MeanCentered, true)
	if gs[0].Alts[0].Advantage != -3 || gs[2].Alts[2].Advantage != 3 {
		t.Fatalf("Dr. MAS did not pool one backbone's nodes: %v %v", gs[0].Alts[0].Advantage, gs[2].Alts[2].Advantage)
	}
	bufs := Buffers(gs)
	if bufs["a"][0].UID != "env0" || bufs["b"][0].Role != "b" {
		t.Fatalf("buffer samples %+v", bufs["a"][0])
	}
}

// TestPooledThresholdsFireAtSmallG: with groups of 4, where the paper's
// per-group μ + 1.96σ can never be passed (largest z 1.5), the pooled rule
// inserts the answers at the top of the step's reward distribution that
// beat their group, and removes those at its bottom that fall short of it.
func TestPooledThresholdsFireAtSmallG(t *testing.T) {
	var groups []GroupRecord
	for i := 0; i < 20; i++ {
		groups = append(groups, GroupRecord{Role: "a", Situation: "flat " + strings.Repeat("x", i), Answers: []string{"p", "p", "p", "p"}, Rewards: []float64{0.5, 0.5, 0.5, 0.5}})
	}
	groups = append(groups,
		GroupRecord{Role: "a", Situation: "good one", Answers: []string{"u", "u", "u", "w"}, Rewards: []float64{0.5, 0.5, 0.5, 2}},
		GroupRecord{Role: "a", Situation: "bad one", Answers: []string{"u", "u", "u", "z"}, Rewards: []float64{0.5, 0.5, 0.5, -1}})
	for _, c := range []struct {
		th       Threshold
		ins, rem int
	}{{ThresholdGroupZ, 0, 0}, {ThresholdPooled, 1, 0}} {
		cfg := DefaultMemoryConfig()
		cfg.Threshold = c.th
		b := NewLocalBank(cfg)
		b.Memories["a"] = NewMemory(cfg)
		b.Memories["a"].Put(Entry{Situation: "bad one", Answer: "z", Diff: 1}, 0)
		res, err := b.Evolve(context.Background(), EvolveRequest{Now: 1, Roles: []string{"a"}, Groups: groups})
		if err != nil {
			t.Fatal(err)
		}
		rem := 1 - len(b.Entries("a")) + res.Update.Inserted
		if res.Update.Inserted != c.ins || rem != map[Threshold]int{ThresholdGroupZ: 0, ThresholdPooled: 1}[c.th] {
			t.Errorf("%v: %+v, entries %+v", c.th, res.Update, b.Entries("a"))
		}
	}
	if q := Quantile([]float64{4, 1, 3, 2}, 0.5); q != 2.5 {
		t.Errorf("median %v", q)
	}
	if q := Quantile([]float64{1, 2, 3, 4, 5}, 0.975); q != 4.9 {
		t.Errorf("0.975 quantile %v", q)
	}
}

// TestNearDuplicateReuse: a Plan-Path planner observation that differs
// from a remembered one only in the tool's suggestion is reused; one at
// another position is not (it gets the hint instead, or nothing).
func TestNearDuplicateReuse(t *testing.T) {
	e, err := envs.New("planpath", envs.Config{Width: 6, Height: 6}, 11)
	if err != nil {
		t.Fatal(err)
	}
	seen := e.Observe("planner")
	e.Step("tool", "U")
	other := e.Observe("planner") // same position, tool suggests U
	if other == seen {
		t.Fatalf("observation did not change: %q", seen)
	}
	m := NewMemory(DefaultMemoryConfig())
	m.Put(Entry{Situation: seen, Answer: "R", Diff: 1}, 0)
	if a, ok := m.Skip(other, 0); !ok || a != "R" {
		t.Fatalf("near-duplicate %q (similarity %.2f to %q) not reused", other, Similarity(seen, other), seen)
	}
	// The neighbouring cell is a different decision: not reused.
	for _, mv := range []string{"D", "L"} {
		d := e.Clone()
		d.Step("planner", mv)
		d.Step("tool", "U")
		moved := d.Observe("planner")
		if moved[:8] == other[:8] {
			t.Fatalf("move %s refused: %q", mv, moved)
		}
		if a, ok := m.Skip(moved, 0); ok {
			t.Fatalf("%q (a cell away from %q) reused %q", moved, seen, a)
		}
	}
	cfg := DefaultMemoryConfig()
	cfg.NoReuse = true
	m2 := NewMemory(cfg)
	m2.Put(Entry{Situation: seen, Answer: "R", Diff: 1}, 0)
	if h, a, skip := m2.Advise(other, 0); skip || a != "" || h != HintPrefix+"R" {
		t.Fatalf("NoReuse: hint %q answer %q skip %v", h, a, skip)
	}
	cfg.NoHint = true
	m3 := NewMemory(cfg)
	m3.Put(Entry{Situation: seen, Answer: "R", Diff: 1}, 0)
	if h, _, skip := m3.Advise(other, 0); skip || h != "" {
		t.Fatalf("NoHint, NoReuse: hint %q skip %v", h, skip)
	}
}

// TestWithMemoryReadsAtEvaluation: the evaluation wrapper reuses a
// remembered answer, hints the rest and counts both.
func TestWithMemoryReadsAtEvaluation(t *testing.T) {
	var asked []string
	inner := &rl.Scripted{Script: func(p string) []string { asked = append(asked, p); return []string{"x"} }}
	bank := NewLocalBank(DefaultMemoryConfig())
	bank.Memories["a"] = NewMemory(DefaultMemoryConfig())
	bank.Memories["a"].Put(Entry{Situation: "a: state one", Answer: "a2", Diff: 1}, 0)
	bank.Memories["a"].Put(Entry{Situation: "a: other state", Answer: "a3", Diff: -0.5}, 0) // scores 0.5 < SkipScore: hint only
	pols, use, err := WithMemory(rl.Shared(inner), []string{"a", "b"}, bank, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, pa, _ := pols.For("a")
	out, err := pa.Sample(context.Background(), []string{"a: state one", "a: other state", "a: nothing alike at all"}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if out[0][0].Text != "a2" || out[0][1].Text != "a2" || out[1][0].Text != "x" || len(out[2]) != 2 {
		t.Fatalf("completions %+v", out)
	}
	if len(asked) != 2 || asked[0] != "a: other state"+HintPrefix+"a3" || asked[1] != "a: nothing alike at all" {
		t.Fatalf("inner policy asked %q", asked)
	}
	if a, r, h := use.Counts(); a != 3 || r != 1 || h != 1 {
		t.Fatalf("counts actions %d reused %d hinted %d", a, r, h)
	}
	// Role b has no memory: it samples from the bare prompt.
	_, pb, _ := pols.For("b")
	if _, err := pb.Sample(context.Background(), []string{"b: q"}, 1, 1); err != nil || asked[len(asked)-1] != "b: q" {
		t.Fatalf("role b: %v, asked %q", err, asked)
	}
}

// levenshtein is the plain dynamic-programming edit distance.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			d := prev[j-1]
			if a[i-1] != b[j-1] {
				d++
			}
			cur[j] = min(d, prev[j]+1, cur[j-1]+1)
		}
		prev = cur
	}
	return prev[len(b)]
}

func TestWithinEditsMatchesLevenshtein(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "abc"[r.IntN(3)]
		}
		return string(b)
	}
	for i := 0; i < 20000; i++ {
		a, b, k := word(), word(), r.IntN(5)-1
		if got, want := WithinEdits(a, b, k), k >= 0 && levenshtein(a, b) <= k; got != want {
			t.Fatalf("WithinEdits(%q, %q, %d) = %v, distance %d", a, b, k, got, levenshtein(a, b))
		}
	}
}

func FuzzWithinEdits(f *testing.F) {
	f.Add("p a05 g00 n:-DL- t:U", "p a05 g00 n:-DL- t:-", 2)
	f.Add("", "abc", 3)
	f.Fuzz(func(t *testing.T, a, b string, k int) {
		if len(a) > 64 || len(b) > 64 {
			return
		}
		k = k % 6
		if got, want := WithinEdits(a, b, k), k >= 0 && levenshtein(a, b) <= k; got != want {
			t.Fatalf("WithinEdits(%q, %q, %d) = %v, distance %d", a, b, k, got, levenshtein(a, b))
		}
	})
}
