package atgrpo

import (
	"context"
	"strings"
	"testing"

	"troupe/algorithms/envs"
	"troupe/algorithms/rl"
)

// routeScript routes every turn to "h", which moves right or left; "v"
// would answer too, but is never asked.
func routeScript() *rl.Scripted {
	return &rl.Scripted{Script: func(p string) []string {
		switch p[:1] {
		case "m":
			return []string{"h"}
		case "h":
			return []string{"R", "L"}
		}
		return []string{"U"}
	}}
}

// Over a Router environment the tree sampler asks only the role the turn
// was routed to: the master's K routes form its own group (node), and a
// round holds one sub-agent's node.
func TestTreeRolloutsRouted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.K, cfg.Envs, cfg.MaxTurns = 2, 2, 4
	pols := map[string]*rl.Scripted{"master": routeScript(), "h": routeScript(), "v": routeScript()}
	per := map[string]rl.Policy{}
	for r, p := range pols {
		per[r] = p
	}
	es := make([]envs.Env, cfg.Envs)
	for i := range es {
		es[i], _ = envs.New("routepath", envs.Config{}, int64(i))
	}
	rolls, bufs, err := TreeRollouts(context.Background(), cfg, PerRole(per), es, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(bufs["v"]) != 0 || len(pols["v"].Calls()) != 0 {
		t.Fatalf("v sampled %d times though the master always routes to h", len(pols["v"].Calls()))
	}
	for _, r := range rolls {
		for i, n := range r.Nodes {
			want := []string{"master", "h"}[i%2]
			if n.Key.Role != want || n.Key.Turn != i/2 {
				t.Fatalf("env %d node %d: %s turn %d, want %s turn %d", r.Env, i, n.Key.Role, n.Key.Turn, want, i/2)
			}
			if want == "master" && (n.Candidates[0].Completion.Text != "h" || n.Candidates[0].Reward != n.Candidates[1].Reward) {
				t.Fatalf("master group %+v", n.Candidates)
			}
		}
	}
	for _, s := range bufs["h"] {
		if !strings.HasPrefix(s.Prompt, "h ") {
			t.Fatalf("h trained on %q", s.Prompt)
		}
	}
	// So does the independent sampler.
	for _, p := range pols {
		*p = *routeScript()
	}
	icfg := cfg
	icfg.Sampler = Independent
	for i := range es {
		es[i], _ = envs.New("routepath", envs.Config{}, int64(i))
	}
	irolls, _, err := TreeRollouts(context.Background(), icfg, PerRole(per), es, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(irolls) != cfg.Envs*cfg.K || len(pols["v"].Calls()) != 0 || len(pols["h"].Calls()) == 0 {
		t.Fatalf("independent: %d rollouts, v asked %d times, h %d", len(irolls), len(pols["v"].Calls()), len(pols["h"].Calls()))
	}
	// Evaluation asks the routed role only, too.
	for _, p := range pols {
		*p = *routeScript()
	}
	st, err := Evaluate(context.Background(), PerRole(per), func(i int, _ int64) (envs.Env, error) {
		return envs.New("routepath", envs.Config{}, int64(i))
	}, 4, 8, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pols["v"].Calls()) != 0 || st.Invalid == 1 {
		t.Fatalf("evaluation: v asked %d times, invalid share %v", len(pols["v"].Calls()), st.Invalid)
	}
}
