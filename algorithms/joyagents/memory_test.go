package joyagents

import (
	"context"
	"math"
	"testing"
)

func TestSimilarityTable(t *testing.T) {
	cases := []struct {
		a, b string
		want float64
	}{
		{"p1", "p1", 1},
		{"p1", "p2", 0}, // padded trigrams {"\0p1","p1\0"} vs {"\0p2","p2\0"}
		{"", "", 1},
		{"abc", "abd", 1.0 / 5}, // {"\0ab","abc","bc\0"} vs {"\0ab","abd","bd\0"}
		{"planner: goal 2", "planner: goal 3", 13.0 / 17}, // 15 trigrams each, 13 shared
		{"x", "", 0},
	}
	for _, c := range cases {
		if got := Similarity(c.a, c.b); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Similarity(%q,%q) = %v want %v", c.a, c.b, got, c.want)
		}
		if Similarity(c.a, c.b) != Similarity(c.b, c.a) {
			t.Errorf("Similarity(%q,%q) not symmetric", c.a, c.b)
		}
	}
}

func TestScore(t *testing.T) {
	c := DefaultMemoryConfig()
	cases := []struct {
		e    Entry
		now  int64
		want float64
	}{
		{Entry{Diff: 0.5, Time: 0}, 0, 1.5},
		{Entry{Diff: 0.5, Time: 0}, 50, 0.5 + math.Exp(-1)},
		{Entry{Diff: 0.5, Time: 10}, 110, 0.5 + math.Exp(-2)},
		{Entry{Diff: 0.5, Time: 10}, 5, 1.5}, // future: fresh
	}
	for _, k := range cases {
		if got := c.Score(k.e, k.now); math.Abs(got-k.want) > 1e-12 {
			t.Errorf("Score(%+v, %d) = %v want %v", k.e, k.now, got, k.want)
		}
	}
	c.Alpha, c.Beta = 2, 0.5
	if got := c.Score(Entry{Diff: 1}, 0); got != 2.5 {
		t.Errorf("weighted score %v", got)
	}
}

func TestObserveThresholds(t *testing.T) {
	seven0 := []float64{0, 0, 0, 0, 0, 0, 0, 1} // μ = 0.125, σ = √0.125 ≈ 0.3536: hi ≈ 0.818
	seven1 := []float64{1, 1, 1, 1, 1, 1, 1, 0} // μ = 0.875: lo ≈ 0.182
	ans := []string{"a", "a", "a", "a", "a", "a", "a", "b"}
	cases := []struct {
		name               string
		z                  float64
		rewards            []float64
		answers            []string
		pre                []Entry
		ins, rep, rem, len int
	}{
		{"high outlier inserted", 1.96, seven0, ans, nil, 1, 0, 0, 1},
		{"low outlier evicts similar", 1.96, seven1, ans, []Entry{{Situation: "s", Answer: "b"}, {Situation: "s", Answer: "a"}, {Situation: "other thing", Answer: "b"}}, 0, 0, 1, 2},
		{"G=4 cannot pass 1.96 (max z = 1.5)", 1.96, []float64{0, 0, 0, 1}, []string{"a", "a", "a", "b"}, nil, 0, 0, 0, 0},
		{"G=4 with z=1", 1, []float64{0, 0, 0, 1}, []string{"a", "a", "a", "b"}, nil, 1, 0, 0, 1},
		{"equal rewards: nothing", 1.96, []float64{1, 1, 1, 1, 1, 1, 1, 1}, ans, nil, 0, 0, 0, 0},
		{"replaces older similar", 1.96, seven0, ans, []Entry{{Situation: "s", Answer: "old", Diff: 0.1, Time: 0}}, 0, 1, 0, 1},
		{"keeps better similar", 1.96, seven0, ans, []Entry{{Situation: "s", Answer: "old", Diff: 5, Time: 0}}, 0, 0, 0, 1},
	}
	for _, c := range cases {
		cfg := DefaultMemoryConfig()
		cfg.Z = c.z
		m := NewMemory(cfg)
		for _, e := range c.pre {
			m.entries = append(m.entries, e)
		}
		u := m.Observe("s", c.answers, c.rewards, 0)
		if u.Inserted != c.ins || u.Replaced != c.rep || u.Removed != c.rem || m.Len() != c.len {
			t.Errorf("%s: %+v len %d; want ins %d rep %d rem %d len %d", c.name, u, m.Len(), c.ins, c.rep, c.rem, c.len)
		}
	}
	// The inserted entry carries its reward and difference from the mean.
	m := NewMemory(DefaultMemoryConfig())
	m.Observe("s", ans, seven0, 7)
	e := m.Entries()[0]
	if e.Situation != "s" || e.Answer != "b" || e.Reward != 1 || e.Diff != 0.875 || e.Time != 7 {
		t.Errorf("entry %+v", e)
	}
}

func TestPutReplaceEvict(t *testing.T) {
	cfg := DefaultMemoryConfig()
	cfg.Capacity = 2
	m := NewMemory(cfg)
	steps := []struct {
		e    Entry
		now  int64
		want string
	}{
		{Entry{Situation: "s1 aaaa", Answer: "x1", Diff: 1}, 0, "inserted"},            // score 2
		{Entry{Situation: "zzzz", Answer: "z", Diff: 1}, 0, "inserted"},                // score 2
		{Entry{Situation: "s1 aaaa", Answer: "x2", Diff: 0.5}, 0, ""},                  // 1.5 < 2: kept out
		{Entry{Situation: "s1 aaaa", Answer: "x3", Diff: 2}, 0, "replaced"},            // 3 ≥ 2: replaces x1
		{Entry{Situation: "qqqq", Answer: "q", Diff: 0.2}, 0, ""},                      // full; 1.2 < lowest (2)
		{Entry{Situation: "rrrr", Answer: "r", Diff: 3}, 0, "replaced"},                // evicts zzzz (2 < 3)
		{Entry{Situation: "tttt", Answer: "t", Diff: 1.5}, 0, ""},                      // 2.5 < lowest (x3: 3)
		{Entry{Situation: "uuuu", Answer: "u", Diff: 1.5, Time: 200}, 200, "replaced"}, // x3 decayed to 2+e^-4 < 2.5
	}
	for i, s := range steps {
		if got := m.Put(s.e, s.now); got != s.want {
			t.Fatalf("put %d (%s): %q want %q; entries %+v", i, s.e.Answer, got, s.want, m.Entries())
		}
	}
	es := m.Entries()
	if len(es) != 2 || es[0].Answer != "u" || es[1].Answer != "r" {
		t.Errorf("entries %+v, want [u r]", es)
	}
}

func TestRemove(t *testing.T) {
	m := NewMemory(DefaultMemoryConfig())
	m.entries = []Entry{{Situation: "goal 1", Answer: "p1"}, {Situation: "goal 1", Answer: "p2"}, {Situation: "completely different", Answer: "p1"}}
	if n := m.Remove("goal 1", "p1"); n != 1 {
		t.Fatalf("removed %d", n)
	}
	es := m.Entries()
	if len(es) != 2 || es[0].Answer != "p2" || es[1].Situation != "completely different" {
		t.Errorf("left %+v", es)
	}
}

func TestRetrieveHintSkip(t *testing.T) {
	cfg := DefaultMemoryConfig()
	cfg.HintMax = 4
	cfg.SimThreshold = 0.8 // "planner: goal 2!" is 14/17 ≈ 0.82 similar to "planner: goal 2"
	m := NewMemory(cfg)
	m.entries = []Entry{
		{Situation: "planner: goal 2", Answer: "p2-long-answer", Diff: 0.5, Time: 0}, // score 1.5
		{Situation: "planner: goal 2!", Answer: "p9", Diff: 3, Time: 0},
		{Situation: "executor: plan p1", Answer: "m1", Diff: -0.5, Time: 0}, // score 0.5
	}
	hits := m.Retrieve("planner: goal 2", 5, 0)
	if len(hits) != 2 || hits[0].Answer != "p2-long-answer" || hits[0].Sim != 1 || hits[1].Answer != "p9" {
		t.Fatalf("hits %+v", hits)
	}
	if h := m.Hint("planner: goal 2", 0); h != " h:p2-l" {
		t.Errorf("hint %q", h)
	}
	if h := m.Hint("nothing like it", 0); h != "" {
		t.Errorf("hint for unknown %q", h)
	}
	if a, ok := m.Skip("planner: goal 2", 0); !ok || a != "p2-long-answer" {
		t.Errorf("skip exact: %q %v", a, ok)
	}
	// A near-duplicate (1 edit from "planner: goal 2!") is answered from
	// memory; 3 edits away it is not (the hint still applies).
	if a, ok := m.Skip("planner: goal 2!!", 0); !ok || a != "p9" {
		t.Errorf("near-duplicate: %q %v", a, ok)
	}
	if _, ok := m.Skip("planner: goal 2!!!!", 0); ok {
		t.Error("skipped 3 edits away")
	}
	m.cfg.SkipEdits = 0 // exact situations only
	if _, ok := m.Skip("planner: goal 2!!", 0); ok {
		t.Error("skipped on an inexact hit with SkipEdits 0")
	}
	// Exact but low-scoring: no skip.
	if _, ok := m.Skip("executor: plan p1", 0); ok {
		t.Error("skipped on a low-scoring hit")
	}
	// Decay below SkipScore: at now=50 the first entry scores 0.5+e^-1 < 1.
	if _, ok := m.Skip("planner: goal 2", 50); ok {
		t.Error("skipped on a decayed hit")
	}
}

func TestFeedback(t *testing.T) {
	m := NewMemory(DefaultMemoryConfig())
	m.entries = []Entry{{Situation: "s", Answer: "a", Reward: 1.5, Diff: 0.875}, {Situation: "s2", Answer: "b", Reward: 1.5, Diff: 0.875}}
	cases := []struct {
		sit, ans string
		got      float64
		removed  bool
		diff     float64 // of entry "s"/"a" afterwards (if kept)
	}{
		{"s", "a", 1.5, false, 0.875}, // as good as recorded: unchanged
		{"s", "a", 2, false, 0.875},   // better: unchanged
		{"s", "x", 0, false, 0.875},   // other answer: not this entry
		{"s", "a", 1.2, false, 0.575}, // short by 0.3
		{"s", "a", 0.5, true, 0},      // short by 1.0: Diff −0.425 → removed
	}
	for i, c := range cases {
		if got := m.Feedback(c.sit, c.ans, c.got); got != c.removed {
			t.Fatalf("case %d: removed %v want %v", i, got, c.removed)
		}
		es := m.Entries()
		if !c.removed && (es[0].Answer != "a" || math.Abs(es[0].Diff-c.diff) > 1e-12) {
			t.Fatalf("case %d: entries %+v want diff %v", i, es, c.diff)
		}
	}
	if es := m.Entries(); len(es) != 1 || es[0].Answer != "b" {
		t.Errorf("left %+v", es)
	}
}

// Keyed on the situation abstraction, the memory answers on a grid it never
// saw: what the planner learned on one grid is reused on another with the
// same neighbourhood, goal direction and tool suggestion; keyed on the raw
// observation it answers nothing there.
func TestAbstractMemoryAnswersOnFreshGrid(t *testing.T) {
	seen := "p a00 g44 n:-D-R m:- t:D A.#../..#../...../.#.../....G"
	fresh := "p a00 g55 n:-D-R m:- t:D A.#.#./..#.../....../....../....../.....G"
	for _, abstract := range []string{"", "planpath"} {
		cfg := DefaultMemoryConfig()
		cfg.Abstract = abstract
		b := NewLocalBank(cfg)
		// A group where D stands out (the pooled 2.5% tails keep it).
		req := EvolveRequest{Now: 1, Roles: []string{"planner"}, Groups: []GroupRecord{
			{Role: "planner", Situation: seen, Answers: []string{"D", "R", "L", "U", "R", "L"}, Rewards: []float64{1.3, 0, 0, 0, 0, 0}},
		}}
		res, err := b.Evolve(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Sizes["planner"] == 0 {
			t.Fatalf("abstract %q: nothing inserted: %+v", abstract, res)
		}
		adv, err := b.Advise(context.Background(), AdviceRequest{Now: 1, Queries: []Query{{Role: "planner", Situation: fresh}}})
		if err != nil {
			t.Fatal(err)
		}
		answered := adv[0].Skip && adv[0].Answer == "D"
		if abstract == "" && (answered || adv[0].Hint != "") {
			t.Fatalf("raw keys answered a fresh grid: %+v", adv[0])
		}
		if abstract != "" && !answered {
			t.Fatalf("abstract keys: no answer on a fresh grid with the same situation: %+v (entries %+v)", adv[0], b.Entries("planner"))
		}
	}
}
