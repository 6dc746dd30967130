package toyenv

import (
	"testing"

	"troupe/algorithms/envs"
)

var _ envs.Env = (*Table)(nil)
var _ envs.Env = (*Relay)(nil)
var _ envs.Expert = (*Relay)(nil)

func TestRelayExpertSucceeds(t *testing.T) {
	for seed := int64(0); seed < 8; seed++ {
		r := NewRelay(seed)
		p := r.Step("planner", r.ExpertAction("planner"))
		e := r.Step("executor", r.ExpertAction("executor"))
		if !p.Valid || p.Local != 1 || !e.Valid || e.Team != 1 || e.Local != 0.5 || !r.Done() || !r.Success() || r.Turn() != 1 {
			t.Fatalf("seed %d: %+v %+v", seed, p, e)
		}
	}
}

func TestRelayInvalidAndClone(t *testing.T) {
	r := NewRelay(3)
	if st := r.Step("executor", "m0"); st.Valid || st.Local != -1 {
		t.Errorf("out of turn: %+v", st)
	}
	c := r.Clone().(*Relay)
	if st := c.Step("planner", "nonsense"); st.Valid || st.Local != -1 {
		t.Errorf("bad plan: %+v", st)
	}
	if r.Observe("executor") != "executor: plan none" {
		t.Error("clone shares state with original")
	}
	wrong := ExecutorActions[(r.Goal()+1)%4]
	r.Step("planner", "p0")
	r.Step("executor", wrong)
	r.Step("planner", "p0")
	r.Step("executor", wrong)
	if !r.Done() || r.Success() {
		t.Errorf("two wrong rounds: done %v success %v", r.Done(), r.Success())
	}
}

func TestTable(t *testing.T) {
	e := NewTable([]string{"a", "b"}, 1, map[string]envs.Step{"x": {Team: 1}}, "x")
	c := e.Clone()
	if st := e.Step("a", "x"); !st.Valid || st.Team != 1 || !st.Done || !e.Success() {
		t.Errorf("win: %+v", st)
	}
	if st := c.Step("a", "y"); st.Valid || st.Local != -1 || c.Done() {
		t.Errorf("clone: %+v", st)
	}
	if c.Observe("b") != "b:y" {
		t.Errorf("observe %q", c.Observe("b"))
	}
}
