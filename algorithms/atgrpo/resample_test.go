package atgrpo

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/rl"
)

// flatFirst is a policy whose first `same` Sample calls give K equal
// candidates (a1 / b1: every group's rewards equal) and later calls the
// varied script (a1 a2 a3 / b1 b2 b3).
func flatFirst(same int) *rl.Scripted {
	p := &rl.Scripted{}
	p.Script = func(pr string) []string {
		role := pr[:1]
		if len(p.Calls()) <= same {
			return []string{role + "1"}
		}
		if role == "a" {
			return []string{"a1", "a2", "a3"}
		}
		return []string{"b1", "b2", "b3"}
	}
	return p
}

type envCall struct {
	i    int
	seed int64
}

func recordingEnvs(calls *[]envCall) EnvFactory {
	return func(i int, seed int64) (envs.Env, error) {
		*calls = append(*calls, envCall{i, seed})
		return tableEnv(i, seed)
	}
}

func resampleCfg(budget int) Config {
	cfg := DefaultConfig()
	cfg.K, cfg.Envs, cfg.Seed, cfg.Resample = 3, 2, 7, budget
	cfg.Filter = rl.GroupFilter{Method: rl.FilterDAPO}
	return cfg
}

func firstRound(t *testing.T, cfg Config, pols *Policies) ([]Rollout, map[string][]rl.Sample) {
	t.Helper()
	es := make([]envs.Env, cfg.Envs)
	for i := range es {
		es[i], _ = tableEnv(i, 0)
	}
	rolls, bufs, err := TreeRollouts(context.Background(), cfg, pols, es, 3)
	if err != nil {
		t.Fatal(err)
	}
	return rolls, bufs
}

// Resampling stops once the step holds as many groups with reward variance
// as it first sampled groups: here after one round of Envs more grids.
func TestResampleStopsAtTarget(t *testing.T) {
	cfg := resampleCfg(10)
	pols := Shared(flatFirst(4)) // the first round's 4 (round, role) calls are flat
	rolls, bufs := firstRound(t, cfg, pols)
	if g, u := groupVariance(bufs); g != 8 || u != 0 {
		t.Fatalf("first round: %d groups, %d with variance; want 8, 0", g, u)
	}
	var calls []envCall
	r2, b2, err := Resample(context.Background(), cfg, pols, recordingEnvs(&calls), 3, rolls, bufs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rolls) != 2 || len(bufs[SharedName]) != 24 {
		t.Fatalf("inputs modified: %d rollouts, %d samples", len(rolls), len(bufs[SharedName]))
	}
	if len(r2) != 4 || len(calls) != 2 {
		t.Fatalf("%d rollouts from %d new grids, want 4 from 2", len(r2), len(calls))
	}
	for j, c := range calls {
		if i := cfg.Envs + j; c.i != i || c.seed != rl.DeriveSeed(cfg.Seed, 3, int64(i), 1) {
			t.Errorf("new grid %d: factory(%d, %d), want (%d, step seed)", j, c.i, c.seed, i)
		}
	}
	keys := map[string]bool{}
	for i, r := range r2 {
		if r.Env != i {
			t.Errorf("rollout %d numbered env %d", i, r.Env)
		}
		for _, n := range r.Nodes {
			if keys[n.Key.String()] {
				t.Errorf("group %s twice", n.Key)
			}
			keys[n.Key.String()] = true
		}
	}
	for _, s := range b2[SharedName][24:] {
		if !strings.HasPrefix(s.Group, s.UID+"/") || (s.UID != "env2" && s.UID != "env3") {
			t.Errorf("resampled sample in group %s, uid %s", s.Group, s.UID)
		}
	}
	st, kept, err := Prepare(cfg, 3, r2, b2)
	if err != nil {
		t.Fatal(err)
	}
	if st.Resampled != 2 || st.Groups != 16 || st.Filter.GroupsKept != 8 || len(kept[SharedName]) != 24 {
		t.Errorf("resampled %d, groups %d, kept %d groups / %d samples; want 2, 16, 8 / 24", st.Resampled, st.Groups, st.Filter.GroupsKept, len(kept[SharedName]))
	}
	for _, s := range kept[SharedName] {
		if s.UID != "env2" && s.UID != "env3" {
			t.Errorf("a zero-variance group of %s was kept", s.UID)
		}
	}
}

// Without groups with variance the budget ends the resampling; the same
// seed gives the same grids, draws and buffers.
func TestResampleBudgetDeterministic(t *testing.T) {
	cfg := resampleCfg(3)
	run := func() ([]Rollout, map[string][]rl.Sample, []envCall, []rl.SampleCall) {
		pol := flatFirst(1 << 30)
		pols := Shared(pol)
		rolls, bufs := firstRound(t, cfg, pols)
		var calls []envCall
		r2, b2, err := Resample(context.Background(), cfg, pols, recordingEnvs(&calls), 3, rolls, bufs)
		if err != nil {
			t.Fatal(err)
		}
		return r2, b2, calls, pol.Calls()
	}
	r2, b2, calls, sampled := run()
	if len(calls) != 3 || countInstances(r2) != 5 {
		t.Fatalf("%d new grids, %d instances; want 3 (the budget: 2 then 1), 5", len(calls), countInstances(r2))
	}
	first := map[int64]bool{}
	for _, c := range sampled[:4] {
		first[c.Seed] = true
	}
	for _, c := range sampled[4:] {
		if first[c.Seed] {
			t.Errorf("a resampling call reuses the first round's seed %d", c.Seed)
		}
	}
	r3, b3, calls3, sampled3 := run()
	if !reflect.DeepEqual(r2, r3) || !reflect.DeepEqual(b2, b3) || !reflect.DeepEqual(calls, calls3) || !reflect.DeepEqual(sampled, sampled3) {
		t.Error("two resampling runs with one seed differ")
	}
}

func TestResampleConfig(t *testing.T) {
	cfg := resampleCfg(4)
	cfg.Filter = rl.GroupFilter{}
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("resampling without the dapo filter: %v, want ErrConfig", err)
	}
	cfg = resampleCfg(-1)
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Errorf("negative budget: %v, want ErrConfig", err)
	}
	if _, _, err := Resample(context.Background(), resampleCfg(2), Shared(flatFirst(0)), nil, 0, nil, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no factory: %v, want ErrConfig", err)
	}
}

// Trainer.Step resamples and reports it; the update sees only groups with
// variance.
func TestTrainerResamples(t *testing.T) {
	pol := flatFirst(4)
	tr := &Trainer{Config: resampleCfg(6), Policies: Shared(pol), NewEnv: tableEnv}
	st, err := tr.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Resampled != 2 {
		t.Errorf("resampled %d grids, want 2", st.Resampled)
	}
	ups := pol.Updates()
	if len(ups) != 1 || len(ups[0]) != 24 {
		t.Fatalf("updates %d, want one of 24 samples", len(ups))
	}
}
