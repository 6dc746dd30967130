package joyagents

import (
	"context"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/rl"
)

// Over a Router environment (routepath) node-wise sampling asks only the
// role each turn was routed to: the master's node groups its G routes,
// each played out to the end, so its route earns a grouped advantage.
func TestNodeSamplerRouted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.G, cfg.Envs, cfg.MaxTurns, cfg.UseMemory = 2, 2, 6, false
	script := func(p string) []string {
		switch p[:1] {
		case "m":
			return []string{"h", "v"} // the backbone takes alternative 0: h
		case "h":
			return []string{"R", "L"}
		}
		return []string{"D", "U"}
	}
	pols := map[string]*rl.Scripted{}
	per := map[string]rl.Policy{}
	for _, r := range []string{"master", "h", "v"} {
		pols[r] = &rl.Scripted{Script: script}
		per[r] = pols[r]
	}
	es := make([]envs.Env, cfg.Envs)
	for i := range es {
		es[i], _ = envs.New("routepath", envs.Config{}, int64(10+i))
	}
	s := &NodeSampler{Config: cfg, Policies: rl.PerRole(per)}
	trs, err := s.Rollouts(context.Background(), es, 0)
	if err != nil {
		t.Fatal(err)
	}
	masters := 0
	for _, tr := range trs {
		for i, g := range tr.Groups {
			if want := []string{"master", "h"}[i%2]; g.Role != want {
				t.Fatalf("env %d group %d is %s's, want %s's (the backbone routes to h)", tr.Env, i, g.Role, want)
			}
			if g.Role == "master" {
				masters++
				if g.Alts[0].Completion.Text != "h" || g.Alts[1].Completion.Text != "v" {
					t.Fatalf("master group %+v", g.Alts)
				}
			}
		}
	}
	if masters == 0 {
		t.Fatal("no master groups")
	}
	// v acted only in the playouts of the master's "v" alternatives: one
	// completion sample each, never a node of its own.
	for _, c := range pols["v"].Calls() {
		if c.K != 1 {
			t.Fatalf("v sampled a node (k = %d)", c.K)
		}
	}
	if len(pols["v"].Calls()) == 0 {
		t.Fatal("the v alternatives were not played out")
	}
}
