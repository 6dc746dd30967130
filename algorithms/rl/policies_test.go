package rl

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"troupe/algorithms/grpo"
)

// barrier's Update returns only once its peer's Update has started, so
// UpdateAll passes only if it runs the two concurrently.
type barrier struct {
	*Scripted
	started, peer chan struct{}
}

func (b barrier) Update(ctx context.Context, batch []Sample) (UpdateStats, error) {
	close(b.started)
	select {
	case <-b.peer:
		return UpdateStats{Samples: len(batch)}, nil
	case <-time.After(20 * time.Second): // a failure bound, not a measurement
		return UpdateStats{}, errors.New("updates ran one after the other")
	}
}

func TestUpdateAllConcurrentAndRouted(t *testing.T) {
	ca, cb := make(chan struct{}), make(chan struct{})
	a := barrier{NewScripted(nil, "x"), ca, cb}
	b := barrier{NewScripted(nil, "x"), cb, ca}
	pols := PerRole(map[string]Policy{"a": a, "b": b})
	st, err := UpdateAll(context.Background(), pols, map[string][]Sample{"a": {{Role: "a"}}, "b": {{Role: "b"}, {Role: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if st["a"].Samples != 1 || st["b"].Samples != 2 {
		t.Errorf("stats %+v", st)
	}
	if _, err := UpdateAll(context.Background(), pols, map[string][]Sample{"c": {{}}}); !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf("unknown policy: %v", err)
	}
}

func TestPoliciesRouting(t *testing.T) {
	s := NewScripted(nil, "x")
	sh := Shared(s)
	if n, p, err := sh.For("anything"); err != nil || n != SharedName || p != s {
		t.Errorf("shared For: %v %v %v", n, p, err)
	}
	if sh.ByName("other") != nil || sh.ByName(SharedName) != s || strings.Join(sh.Names(), ",") != SharedName {
		t.Error("shared names")
	}
	pr := PerRole(map[string]Policy{"b": s, "a": s})
	if strings.Join(pr.Names(), ",") != "a,b" {
		t.Errorf("names %v", pr.Names())
	}
	if _, _, err := pr.For("c"); !errors.Is(err, ErrPolicy) {
		t.Errorf("missing role: %v", err)
	}
	var nilp *Policies
	if _, _, err := nilp.For("a"); !errors.Is(err, ErrPolicy) {
		t.Errorf("nil policies: %v", err)
	}
}

func TestFillRefs(t *testing.T) {
	ref, _ := NewTabular([]string{"a", "b"}, 1, 1, defaultLoss())
	bufs := map[string][]Sample{"p": {{Prompt: "s", Completion: Completion{Tokens: []int{1}}}}}
	if err := FillRefs(context.Background(), map[string]Scorer{"p": ref}, bufs); err != nil {
		t.Fatal(err)
	}
	if r := bufs["p"][0].RefLogProbs; len(r) != 1 || r[0] > -0.69 || r[0] < -0.70 {
		t.Errorf("ref log-probs %v (want log ½)", r)
	}
}

func defaultLoss() grpo.Config { return grpo.DefaultConfig() }
