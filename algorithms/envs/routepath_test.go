package envs

import (
	"context"
	"testing"
)

func TestRoutePathRouting(t *testing.T) {
	e, err := New("routepath", Config{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	r := e.(Router)
	if r.Next() != "master" || !ActsNow(e, "master") || ActsNow(e, "h") {
		t.Fatalf("first turn routed to %q", r.Next())
	}
	if st := e.Step("h", "L"); st.Valid || r.Next() != "master" {
		t.Fatalf("an unrouted sub-agent acted: %+v", st)
	}
	// An invalid route loses the round.
	if st := e.Step("master", "x"); st.Valid || st.Team != InvalidPenalty || e.Turn() != 1 || r.Next() != "master" {
		t.Fatalf("invalid route: %+v, turn %d, next %q", st, e.Turn(), r.Next())
	}
	// Route to the expert's axis, then a move off the axis is refused.
	ex := e.(Expert)
	route := ex.ExpertAction("master")
	if st := e.Step("master", route); !st.Valid || st.Local != PathLocalGood || r.Next() != route || e.Turn() != 1 {
		t.Fatalf("expert route %q: %+v, next %q", route, st, r.Next())
	}
	other := map[string]string{"h": "v", "v": "h"}[route]
	if st := e.Step(other, ex.ExpertAction(other)); st.Valid {
		t.Fatalf("%s acted on a turn routed to %s", other, route)
	}
	off := map[string]string{"h": "U", "v": "L"}[route]
	clone := e.Clone()
	if st := clone.Step(route, off); st.Valid || st.Local != LocalBad || clone.Turn() != 2 || clone.(Router).Next() != "master" {
		t.Fatalf("%s played %q off its axis: %+v", route, off, st)
	}
	if st := e.Step(route, ex.ExpertAction(route)); !st.Valid || st.Local != PathLocalGood || e.Turn() != 2 || r.Next() != "master" {
		t.Fatalf("expert move: %+v, turn %d", st, e.Turn())
	}
	if st := StateOf(e); st.Next != "master" || !st.Acts("master") || st.Acts("h") {
		t.Fatalf("state %+v", st)
	}
}

// Routing matters: the expert sub-agents routed at random solve far fewer
// grids than with the expert master, and the random routes are the same
// for a seed, in clones too.
func TestRoutePathRandomRoute(t *testing.T) {
	solved := map[bool]int{}
	for _, random := range []bool{false, true} {
		for seed := int64(0); seed < 200; seed++ {
			e, err := New("routepath", Config{RandomRoute: random}, seed)
			if err != nil {
				t.Fatal(err)
			}
			if random && (len(e.Roles()) != 2 || e.Roles()[0] != "h") {
				t.Fatalf("random-route roles %v", e.Roles())
			}
			var c Env
			for !e.Done() {
				if e.Turn() == 2 {
					c = e.Clone()
				}
				for _, role := range e.Roles() {
					if ActsNow(e, role) {
						e.Step(role, e.(Expert).ExpertAction(role))
					}
				}
			}
			if c != nil && random {
				for !c.Done() {
					for _, role := range c.Roles() {
						if ActsNow(c, role) {
							c.Step(role, c.(Expert).ExpertAction(role))
						}
					}
				}
				if c.Success() != e.Success() || c.Turn() != e.Turn() {
					t.Fatalf("seed %d: a clone routed differently", seed)
				}
			}
			if e.Success() {
				solved[random]++
			}
		}
	}
	if solved[false] != 200 || solved[true] > 150 {
		t.Fatalf("experts solved %d of 200 routed by the master, %d routed at random; want 200 and at most 150", solved[false], solved[true])
	}
	t.Logf("experts solve %d of 200 grids routed at random", solved[true])
}

func TestRoutePathBatchState(t *testing.T) {
	es := make([]Env, 2)
	for i := range es {
		es[i], _ = New("routepath", Config{}, int64(i))
	}
	b, ep, err := LocalOf(es)
	if err != nil {
		t.Fatal(err)
	}
	if ep.States[0].Next != "master" {
		t.Fatalf("state %+v", ep.States[0])
	}
	res, err := b.Step(context.Background(), ep.Refs, "master", []string{"h", "v"})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].State.Next != "h" || res[1].State.Next != "v" {
		t.Fatalf("routed to %q, %q", res[0].State.Next, res[1].State.Next)
	}
}
