package scheduler

import (
	"fmt"
	"testing"
)

// load places a CPU/memory-only actor on a node, as an earlier request
// would, so the node has less left.
func load(t testing.TB, s *State, id NodeID, milliCPU, mem int64) {
	t.Helper()
	spec := ActorSpec{ID: ActorID(fmt.Sprintf("load-%s-%d", id, len(s.ActorsOn(id)))), Request: Request{Resources: Resources{MilliCPU: milliCPU, MemoryBytes: mem}}}
	mustApply(t, s, &CreateActor{Spec: spec, Placement: &Placement{Node: id, Bundle: AnyBundle}})
}

// TestPackLeastWaste: PACK first keeps the most whole GPUs free (the node
// left with the fewest whole free GPUs wins), then, among nodes equal by
// that count, fills the node left with the least free CPU and memory.
func TestPackLeastWaste(t *testing.T) {
	const gib = 1 << 30
	two := NVSwitchTopology(2, 12)
	type used struct {
		node     NodeID
		milliCPU int64
		mem      int64
		gpus     []int
	}
	cases := []struct {
		name     string
		nodes    []NodeInfo
		used     []used
		req      Request
		want     NodeID
		wantGPUs []int
	}{
		{"cpu-fullest-node", []NodeInfo{SimNode("a", 8, 64*gib, nil), SimNode("b", 8, 64*gib, nil), SimNode("c", 8, 64*gib, nil)},
			[]used{{node: "a", milliCPU: 2000}, {node: "c", milliCPU: 6000}}, Request{Resources: Resources{MilliCPU: 1000}}, "c", nil},
		{"cpu-does-not-fit-fullest", []NodeInfo{SimNode("a", 8, 64*gib, nil), SimNode("b", 8, 64*gib, nil)},
			[]used{{node: "a", milliCPU: 4000}, {node: "b", milliCPU: 7500}}, Request{Resources: Resources{MilliCPU: 1000}}, "a", nil},
		{"memory-fullest-node", []NodeInfo{SimNode("a", 8, 64*gib, nil), SimNode("b", 8, 64*gib, nil)},
			[]used{{node: "b", mem: 48 * gib}}, Request{Resources: Resources{MemoryBytes: 8 * gib}}, "b", nil},
		{"cpu-and-memory-summed", []NodeInfo{SimNode("a", 8, 64*gib, nil), SimNode("b", 8, 64*gib, nil)},
			// a: 1/8 CPU + 7/8 memory free after = 1.0; b: 4/8 + 1/8 = 0.625.
			[]used{{node: "a", milliCPU: 6000, mem: 8 * gib}, {node: "b", milliCPU: 3000, mem: 56 * gib}}, Request{Resources: Resources{MilliCPU: 1000}}, "b", nil},
		{"smaller-node-is-fuller", []NodeInfo{SimNode("big", 64, 512*gib, nil), SimNode("small", 4, 16*gib, nil)},
			nil, Request{Resources: Resources{MilliCPU: 2000, MemoryBytes: 8 * gib}}, "small", nil},
		{"gpus-decide-before-cpu", []NodeInfo{SimNode("a", 8, 64*gib, two), SimNode("b", 8, 64*gib, two)},
			// a keeps 1 whole GPU free and lots of CPU; b keeps 2 GPUs and little CPU.
			[]used{{node: "a", gpus: []int{0}}, {node: "b", milliCPU: 7000}}, Request{Resources: Resources{MilliCPU: 1000, GPUs: 1}}, "a", []int{1}},
		{"equal-gpus-then-cpu", []NodeInfo{SimNode("a", 8, 64*gib, two), SimNode("b", 8, 64*gib, two)},
			[]used{{node: "a", gpus: []int{0}}, {node: "b", gpus: []int{1}, milliCPU: 6000}}, Request{Resources: Resources{MilliCPU: 1000, GPUs: 1}}, "b", []int{0}},
		{"cpu-only-avoids-gpu-nodes", []NodeInfo{SimNode("gpu", 8, 64*gib, two), SimNode("cpu", 8, 64*gib, nil)},
			[]used{{node: "gpu", milliCPU: 7000}}, Request{Resources: Resources{MilliCPU: 1000}}, "cpu", nil},
		{"identical-nodes-first-by-id", []NodeInfo{SimNode("a", 8, 64*gib, nil), SimNode("b", 8, 64*gib, nil)},
			nil, Request{Resources: Resources{MilliCPU: 1000}}, "a", nil},
		{"spread-ignores-waste", []NodeInfo{SimNode("a", 8, 64*gib, nil), SimNode("b", 8, 64*gib, nil)},
			[]used{{node: "a", milliCPU: 6000}}, Request{Resources: Resources{MilliCPU: 1000}, Strategy: Spread}, "b", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStateWith(t, tc.nodes...)
			for _, u := range tc.used {
				if len(u.gpus) > 0 {
					occupy(t, s, u.node, u.gpus...)
				}
				if u.milliCPU > 0 || u.mem > 0 {
					load(t, s, u.node, u.milliCPU, u.mem)
				}
			}
			pl, err := Planner{}.Place(s, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if pl.Node != tc.want || fmt.Sprint(GPUIndices(pl.GPUs)) != fmt.Sprint(tc.wantGPUs) {
				t.Fatalf("placed on %v, want %s %v", pl, tc.want, tc.wantGPUs)
			}
		})
	}
}

// TestGroupPackLeastWaste: a PACK or STRICT_PACK group that fits on one
// node goes to the node the group leaves with the least CPU and memory
// free, among nodes equal by whole free GPUs.
func TestGroupPackLeastWaste(t *testing.T) {
	const gib = 1 << 30
	for _, strategy := range []Strategy{Pack, StrictPack} {
		t.Run(strategy.String(), func(t *testing.T) {
			s := newStateWith(t, SimNode("a", 16, 64*gib, nil), SimNode("b", 16, 64*gib, nil), SimNode("c", 16, 64*gib, nil))
			load(t, s, "b", 12000, 0)
			load(t, s, "c", 8000, 0)
			spec := GroupSpec{ID: "pg", Strategy: strategy, Bundles: []Resources{{MilliCPU: 2000}, {MilliCPU: 2000}}}
			c, err := Planner{}.CreateGroup(s, spec, 1)
			if err != nil || len(c.Bundles) != 2 {
				t.Fatalf("create group: %v %+v", err, c)
			}
			for _, bp := range c.Bundles {
				if bp.Node != "b" {
					t.Fatalf("bundle %d on %s, want b (4 CPUs free: no waste)", bp.Index, bp.Node)
				}
			}
		})
	}
}
