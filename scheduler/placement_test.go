package scheduler

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func mustApply(t testing.TB, s *State, cmds ...Command) {
	t.Helper()
	for _, c := range cmds {
		if err := s.Apply(c); err != nil {
			t.Fatalf("apply %T: %v", c, err)
		}
	}
}

func newStateWith(t testing.TB, nodes ...NodeInfo) *State {
	t.Helper()
	s := NewState()
	for _, n := range nodes {
		mustApply(t, s, &RegisterNode{Node: n, At: 1})
	}
	return s
}

// occupy takes whole GPUs (by index) on a node with a placed actor, as some
// earlier request would.
func occupy(t testing.TB, s *State, id NodeID, idx ...int) {
	t.Helper()
	var allocs []GPUAlloc
	for _, i := range idx {
		allocs = append(allocs, GPUAlloc{Index: i, Fraction: 1})
	}
	spec := ActorSpec{ID: ActorID(fmt.Sprintf("occupy-%s-%v", id, idx)), Request: Request{Resources: Resources{GPUs: float64(len(idx))}}}
	mustApply(t, s, &CreateActor{Spec: spec, Placement: &Placement{Node: id, GPUs: allocs, Bundle: AnyBundle}})
}

func TestGPUSetsOnTopologies(t *testing.T) {
	dgx := NVSwitchTopology(8, 12)
	islands := IslandsTopology(2, 4, 2, ScoreCrossCPU)
	pcie := PCIeTopology(2, 2, 2)
	cases := []struct {
		name    string
		topo    [][]int
		used    []int
		gpus    float64
		minLink int
		want    []int
	}{
		{"dgx/1", dgx, nil, 1, 0, []int{0}},
		{"dgx/2", dgx, nil, 2, 0, []int{0, 1}},
		{"dgx/4", dgx, nil, 4, 0, []int{0, 1, 2, 3}},
		{"dgx/8", dgx, nil, 8, 0, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"dgx/4-with-0,2,4-used", dgx, []int{0, 2, 4}, 4, 0, []int{1, 3, 5, 6}},
		{"islands/2", islands, nil, 2, 0, []int{0, 1}},
		{"islands/4-one-island", islands, nil, 4, 0, []int{0, 1, 2, 3}},
		{"islands/2-fills-broken-island", islands, []int{1}, 2, 0, []int{0, 2}},
		{"islands/1-fills-broken-island", islands, []int{5}, 1, 0, []int{4}},
		{"islands/4-takes-whole-island", islands, []int{1}, 4, 0, []int{4, 5, 6, 7}},
		{"islands/4-split-3+1", islands, []int{1, 5}, 4, 0, []int{0, 2, 3, 4}},
		{"islands/3-nvlink-only", islands, []int{1, 5}, 3, ScoreNVLink, []int{0, 2, 3}},
		{"islands/6", islands, nil, 6, 0, []int{0, 1, 2, 3, 4, 5}},
		{"pcie/2-same-switch", pcie, nil, 2, 0, []int{0, 1}},
		{"pcie/4-same-socket", pcie, nil, 4, 0, []int{0, 1, 2, 3}},
		{"pcie/1-next-to-used", pcie, []int{0}, 1, 0, []int{1}},
		{"pcie/2-keeps-socket-1-whole", pcie, []int{0}, 2, 0, []int{2, 3}},
		{"pcie/4-other-socket", pcie, []int{0}, 4, 0, []int{4, 5, 6, 7}},
		{"pcie/2-when-switches-broken", pcie, []int{0, 2, 4, 6}, 2, 0, []int{1, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStateWith(t, SimNode("n1", 64, 1<<40, tc.topo))
			if len(tc.used) > 0 {
				occupy(t, s, "n1", tc.used...)
			}
			pl, err := Planner{}.Place(s, Request{Resources: Resources{GPUs: tc.gpus}, MinLinkScore: tc.minLink})
			if err != nil {
				t.Fatalf("place: %v", err)
			}
			if got := GPUIndices(pl.GPUs); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("GPUs = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNVLinkIslandPendingReason(t *testing.T) {
	s := newStateWith(t,
		SimNode("node-1", 64, 1<<40, IslandsTopology(2, 4, 2, ScoreCrossCPU)),
		SimNode("node-2", 64, 1<<40, IslandsTopology(2, 4, 2, ScoreCrossCPU)),
		SimNode("node-3", 64, 1<<40, IslandsTopology(2, 4, 2, ScoreCrossCPU)))
	occupy(t, s, "node-1", 0, 1, 4, 5)
	occupy(t, s, "node-2", 0, 1, 2, 4, 5, 6)
	occupy(t, s, "node-3", 0, 4)
	_, err := Planner{}.Place(s, Request{Resources: Resources{GPUs: 4}, MinLinkScore: ScoreNVLink})
	if !errors.Is(err, ErrPending) {
		t.Fatalf("err = %v, want ErrPending", err)
	}
	want := "no node has 4 free GPUs on one NVLink island; best: node-3 with 3"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("reason %q does not contain %q", err, want)
	}
	// Without the NVLink constraint, PACK takes the node left with the
	// least waste (node-1, exactly 4 free: two pairs of an island each)...
	pl, err := Planner{}.Place(s, Request{Resources: Resources{GPUs: 4}})
	if err != nil || pl.Node != "node-1" || !reflect.DeepEqual(GPUIndices(pl.GPUs), []int{2, 3, 6, 7}) {
		t.Fatalf("pack = %v, %v; want node-1 [2 3 6 7]", pl, err)
	}
	// ...and SPREAD the node with the most free GPUs (node-3, 6 free), three
	// from one island and one from the other.
	pl, err = Planner{}.Place(s, Request{Resources: Resources{GPUs: 4}, Strategy: Spread})
	if err != nil || pl.Node != "node-3" || !reflect.DeepEqual(GPUIndices(pl.GPUs), []int{1, 2, 3, 5}) {
		t.Fatalf("spread = %v, %v; want node-3 [1 2 3 5]", pl, err)
	}
}

func TestInfeasibleVersusPending(t *testing.T) {
	s := newStateWith(t, SimNode("a", 8, 64<<30, NVSwitchTopology(8, 12)), SimNode("b", 8, 64<<30, NVSwitchTopology(4, 12)))
	cases := []struct {
		req  Request
		want error
		text string
	}{
		{Request{Resources: Resources{GPUs: 16}}, ErrInfeasible, "exceeds every node's total"},
		{Request{Resources: Resources{MilliCPU: 9000}}, ErrInfeasible, "CPU (needs 9, has 8)"},
		{Request{Resources: Resources{Custom: map[string]float64{"tpu": 1}}}, ErrInfeasible, "tpu (needs 1, has 0)"},
		{Request{Resources: Resources{GPUs: 1}, Affinity: &Affinity{Node: "zz"}}, ErrInfeasible, "not in the cluster"},
		{Request{Resources: Resources{GPUs: 8}, Affinity: &Affinity{Node: "b"}}, ErrInfeasible, "can never hold"},
		{Request{Resources: Resources{GPUs: 1}, Labels: map[string]string{"zone": "x"}}, ErrInfeasible, "matching labels"},
		{Request{Resources: Resources{GPUs: 1.5}}, ErrInvalid, "whole number"},
		{Request{Resources: Resources{GPUs: -1}}, ErrInvalid, "bad GPU count"},
	}
	for _, tc := range cases {
		_, err := Planner{}.Place(s, tc.req)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("place %+v: err = %v, want %v containing %q", tc.req.Resources, err, tc.want, tc.text)
		}
	}
	occupy(t, s, "a", 0)
	_, err := Planner{}.Place(s, Request{Resources: Resources{GPUs: 8}})
	if !errors.Is(err, ErrPending) || !strings.Contains(err.Error(), "no node has 8 free GPUs; best: a with 7") {
		t.Fatalf("err = %v, want pending with best a with 7", err)
	}
}

func TestStrategiesAcrossNodes(t *testing.T) {
	topo := NVSwitchTopology(8, 12)
	s := newStateWith(t, SimNode("a", 64, 1<<40, topo), SimNode("b", 64, 1<<40, topo), SimNode("c", 64, 1<<40, topo))
	occupy(t, s, "b", 0, 1, 2, 3)
	occupy(t, s, "c", 0, 1)
	p := Planner{}
	check := func(req Request, wantNode NodeID, wantGPUs []int) {
		t.Helper()
		pl, err := p.Place(s, req)
		if err != nil {
			t.Fatalf("place %+v: %v", req, err)
		}
		if pl.Node != wantNode || !reflect.DeepEqual(GPUIndices(pl.GPUs), wantGPUs) {
			t.Fatalf("place %+v = %v, want %s %v", req, pl, wantNode, wantGPUs)
		}
	}
	one := Resources{GPUs: 1}
	check(Request{Resources: one}, "b", []int{4})                                                                           // pack: fewest free
	check(Request{Resources: Resources{GPUs: 5}}, "c", []int{2, 3, 4, 5, 6})                                                // pack: smallest that fits
	check(Request{Resources: one, Strategy: Spread}, "a", []int{0})                                                         // spread: most free
	check(Request{Resources: one, Affinity: &Affinity{Node: "c"}}, "c", []int{2})                                           // hard affinity
	check(Request{Resources: Resources{GPUs: 6}, Affinity: &Affinity{Node: "b", Soft: true}}, "c", []int{2, 3, 4, 5, 6, 7}) // soft falls back
	_, err := p.Place(s, Request{Resources: Resources{GPUs: 6}, Affinity: &Affinity{Node: "b"}})
	if !errors.Is(err, ErrPending) {
		t.Fatalf("hard affinity to busy node: %v, want ErrPending", err)
	}
	// Fractions share a GPU until it is full, on the node that already shares.
	mustApply(t, s, &CreateActor{Spec: ActorSpec{ID: "f1", Request: Request{Resources: Resources{GPUs: 0.5}}}, Placement: &Placement{Node: "a", GPUs: []GPUAlloc{{Index: 7, Fraction: 0.5}}, Bundle: AnyBundle}})
	check(Request{Resources: Resources{GPUs: 0.3}}, "a", []int{7})
	check(Request{Resources: Resources{GPUs: 0.5}}, "a", []int{7})
	mustApply(t, s, &CreateActor{Spec: ActorSpec{ID: "f2", Request: Request{Resources: Resources{GPUs: 0.5}}}, Placement: &Placement{Node: "a", GPUs: []GPUAlloc{{Index: 7, Fraction: 0.5}}, Bundle: AnyBundle}})
	if f := s.Node("a").GPUs[7].Free; f != 0 {
		t.Fatalf("GPU 7 free = %v after two halves", f)
	}
	// GPU 7 is full: a third half goes to a whole GPU on the fullest node.
	check(Request{Resources: Resources{GPUs: 0.5}}, "b", []int{4})
	// A fraction that would overfill the shared GPU is refused by Apply.
	err = s.Apply(&CreateActor{Spec: ActorSpec{ID: "f3", Request: Request{Resources: Resources{GPUs: 0.25}}}, Placement: &Placement{Node: "a", GPUs: []GPUAlloc{{Index: 7, Fraction: 0.25}}, Bundle: AnyBundle}})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("overfilling GPU 7: %v, want ErrConflict", err)
	}
}

func TestCPUOnlyPlacement(t *testing.T) {
	s := newStateWith(t, SimNode("gpu", 16, 64<<30, NVSwitchTopology(8, 12)), SimNode("cpu", 16, 64<<30, nil))
	pl, err := Planner{}.Place(s, Request{Resources: Resources{MilliCPU: 4000}})
	if err != nil || pl.Node != "cpu" {
		t.Fatalf("CPU-only pack = %v, %v; want the node without GPUs", pl, err)
	}
	mustApply(t, s, &CreateActor{Spec: ActorSpec{ID: "c1", Request: Request{Resources: Resources{MilliCPU: 4000}}}, Placement: &pl})
	pl, err = Planner{}.Place(s, Request{Resources: Resources{MilliCPU: 4000}, Strategy: Spread})
	if err != nil || pl.Node != "gpu" {
		t.Fatalf("CPU-only spread = %v, %v; want the idle node", pl, err)
	}
}

func ExamplePlanner_Place() {
	s := NewState()
	_ = s.Apply(&RegisterNode{Node: SimNode("node-1", 64, 512<<30, IslandsTopology(2, 4, 2, ScoreCrossCPU))})
	pl, err := Planner{}.Place(s, Request{Resources: Resources{MilliCPU: 8000, GPUs: 4}})
	fmt.Println(pl, err)
	// Output: node-1 gpus=[0 1 2 3] <nil>
}

func TestPackPrefersBetterConnectedNodeAmongEquals(t *testing.T) {
	topo := IslandsTopology(2, 4, 2, ScoreCrossCPU)
	s := newStateWith(t, SimNode("a", 64, 1<<40, topo), SimNode("b", 64, 1<<40, topo), SimNode("c", 64, 1<<40, topo))
	occupy(t, s, "a", 0, 1, 4, 5) // free 2,3,6,7: two halves of islands
	occupy(t, s, "b", 0, 1, 2, 3) // free 4,5,6,7: one whole island
	// c is empty: PACK prefers the 4-free nodes, and among those the one
	// whose free GPUs form an NVLink island.
	pl, err := Planner{}.Place(s, Request{Resources: Resources{GPUs: 4}})
	if err != nil || pl.Node != "b" || !reflect.DeepEqual(GPUIndices(pl.GPUs), []int{4, 5, 6, 7}) {
		t.Fatalf("place = %v, %v; want b [4 5 6 7]", pl, err)
	}
	// For two GPUs both a and b offer an NVLinked pair: the first (a) wins.
	pl, err = Planner{}.Place(s, Request{Resources: Resources{GPUs: 2}})
	if err != nil || pl.Node != "a" || !reflect.DeepEqual(GPUIndices(pl.GPUs), []int{2, 3}) {
		t.Fatalf("place = %v, %v; want a [2 3]", pl, err)
	}
}

func TestFractionsPreferSharedGPUs(t *testing.T) {
	topo := NVSwitchTopology(2, 1)
	s := newStateWith(t, SimNode("a", 8, 1<<30, topo), SimNode("b", 8, 1<<30, topo))
	frac := func(id ActorID, node NodeID, f float64) {
		mustApply(t, s, &CreateActor{Spec: ActorSpec{ID: id, Request: Request{Resources: Resources{GPUs: f}}},
			Placement: &Placement{Node: node, GPUs: []GPUAlloc{{Index: 0, Fraction: f}}, Bundle: AnyBundle}})
	}
	frac("x", "a", 0.8) // a: GPU 0 has 0.2 left
	frac("y", "b", 0.4) // b: GPU 0 has 0.6 left
	pl, err := Planner{}.Place(s, Request{Resources: Resources{GPUs: 0.5}})
	if err != nil || pl.Node != "b" || pl.GPUs[0].Index != 0 {
		t.Fatalf("place = %v, %v; want b GPU 0 (shared) rather than a whole GPU on a", pl, err)
	}
	pl, err = Planner{}.Place(s, Request{Resources: Resources{GPUs: 0.2}})
	if err != nil || pl.Node != "a" || pl.GPUs[0].Index != 0 {
		t.Fatalf("place = %v, %v; want a GPU 0 (exact fit)", pl, err)
	}
}

// An infeasible request names the node that comes closest: of nodes short
// of the same resources, the one short of the least (8 GPUs of 1000, not
// none), and the message says "infeasible" once.
func TestInfeasibleNamesClosestNode(t *testing.T) {
	s := newStateWith(t, SimNode("a-cpu", 16, 64<<30, nil), SimNode("b-gpu", 16, 64<<30, NVSwitchTopology(8, 12)), SimNode("c-gpu2", 16, 64<<30, NVSwitchTopology(2, 12)))
	spec := ActorSpec{ID: "huge", Request: Request{Resources: Resources{MilliCPU: 1000, GPUs: 1000}}}
	_, err := Planner{}.CreateActor(s, spec, 1)
	if !errors.Is(err, ErrInfeasible) {
		t.Fatalf("1000 GPUs: %v, want ErrInfeasible", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "closest: b-gpu, short of GPUs (needs 1000 GPUs, has 8)") {
		t.Errorf("message %q does not name b-gpu with its 8 GPUs", msg)
	}
	if n := strings.Count(strings.ToLower(msg), "infeasible"); n != 1 {
		t.Errorf("message %q says infeasible %d times", msg, n)
	}
	// Short of CPU and GPUs on every node: the one with more of both.
	spec.Request.Resources.MilliCPU = 64000
	_, err = Planner{}.CreateActor(s, spec, 1)
	if !strings.Contains(err.Error(), "closest: b-gpu") {
		t.Errorf("64 CPUs and 1000 GPUs: %v, want closest b-gpu", err)
	}
}
