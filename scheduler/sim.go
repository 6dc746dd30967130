package scheduler

import "fmt"

// This file builds synthetic topologies, nodes and command streams: for
// tests, benchmarks (here and in runtime's raft benchmarks) and simulated
// clusters.

// NVSwitchTopology returns the matrix of n GPUs all connected through
// NVSwitch (DGX style): every pair has links NVLinks.
func NVSwitchTopology(n, links int) [][]int {
	return buildTopology(n, func(i, j int) int { return links * ScoreNVLink })
}

// IslandsTopology returns the matrix of islands × perIsland GPUs where the
// GPUs of an island are all pairwise NVLinked (links each) and GPUs of
// different islands meet at cross (for example ScoreCrossCPU).
func IslandsTopology(islands, perIsland, links, cross int) [][]int {
	return buildTopology(islands*perIsland, func(i, j int) int {
		if i/perIsland == j/perIsland {
			return links * ScoreNVLink
		}
		return cross
	})
}

// PCIeTopology returns the matrix of a PCIe-only machine: sockets CPU
// sockets, each with switches PCIe switches of perSwitch GPUs. Pairs behind
// one switch score ScorePCIeSingleSwitch, pairs on one socket ScoreSameCPU,
// pairs across sockets ScoreCrossCPU.
func PCIeTopology(sockets, switches, perSwitch int) [][]int {
	perSocket := switches * perSwitch
	return buildTopology(sockets*perSocket, func(i, j int) int {
		switch {
		case i/perSwitch == j/perSwitch:
			return ScorePCIeSingleSwitch
		case i/perSocket == j/perSocket:
			return ScoreSameCPU
		}
		return ScoreCrossCPU
	})
}

func buildTopology(n int, score func(i, j int) int) [][]int {
	m := make([][]int, n)
	for i := range m {
		m[i] = make([]int, n)
		for j := range m[i] {
			if i != j {
				m[i][j] = score(i, j)
			}
		}
	}
	return m
}

// SimNode returns the registration of a simulated node with the given CPU
// cores, memory and GPU topology (one GPU per matrix row, indices 0..n-1,
// UUIDs derived from the node ID).
func SimNode(id NodeID, cpus int, memBytes int64, topo [][]int) NodeInfo {
	ni := NodeInfo{
		ID:        id,
		Address:   fmt.Sprintf("%s:7000", id),
		Labels:    map[string]string{"simulated": "true"},
		Resources: Resources{MilliCPU: int64(cpus) * 1000, MemoryBytes: memBytes},
		Topology:  topo,
	}
	for i := range topo {
		ni.GPUs = append(ni.GPUs, GPUInfo{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", id, i), Model: "simulated", MemoryBytes: 80 << 30})
	}
	return ni
}

// SimCluster returns RegisterNode commands for n simulated 8-GPU nodes
// (two NVLink islands of four GPUs each, 128 cores, 1 TiB), named
// node-00000, node-00001, ...
func SimCluster(n int, at int64) []Command {
	topo := IslandsTopology(2, 4, 2, ScoreCrossCPU)
	cmds := make([]Command, n)
	for i := range cmds {
		cmds[i] = &RegisterNode{Node: SimNode(NodeID(fmt.Sprintf("node-%05d", i)), 128, 1<<40, topo), At: at}
	}
	return cmds
}

// ActorSpecN returns a simple actor spec numbered i asking for gpus GPUs
// and one core, for benchmarks and tests.
func ActorSpecN(i int, gpus float64) ActorSpec {
	return ActorSpec{
		ID:          ActorID(fmt.Sprintf("actor-%08d", i)),
		Class:       "Bench",
		MaxRestarts: 1,
		Request:     Request{Resources: Resources{MilliCPU: 1000, MemoryBytes: 1 << 30, GPUs: gpus}},
	}
}

// PlanActorBatch plans count new actors (numbered from first, gpus GPUs
// each) against s, applying each decision to s so the next one sees it, and
// returns them encoded as one Batch. It is the command builder behind the
// FSM throughput benchmarks; a raft benchmark commits the batch on a fresh
// state that holds the same nodes.
func PlanActorBatch(p Planner, s *State, first, count int, gpus float64, at int64) (*Batch, error) {
	cmds := make([]Command, 0, count)
	for i := first; i < first+count; i++ {
		c, err := p.CreateActor(s, ActorSpecN(i, gpus), at)
		if err != nil {
			return nil, err
		}
		if err := s.Apply(c); err != nil {
			return nil, fmt.Errorf("plan actor batch: %w", err)
		}
		cmds = append(cmds, c)
	}
	return NewBatch(cmds...)
}

// GroupSpecN returns a placement group spec numbered i with bundles bundles
// of gpus GPUs and one core each, for benchmarks and tests.
func GroupSpecN(i, bundles int, gpus float64, strategy Strategy) GroupSpec {
	g := GroupSpec{ID: GroupID(fmt.Sprintf("pg-%08d", i)), Strategy: strategy}
	for j := 0; j < bundles; j++ {
		g.Bundles = append(g.Bundles, Resources{MilliCPU: 1000, GPUs: gpus})
	}
	return g
}
