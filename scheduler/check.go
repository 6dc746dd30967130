package scheduler

import (
	"fmt"
	"math"
)

// Check verifies the state's internal consistency from first principles:
// node shapes (GPU list, topology matrix), every node's free resources equal
// to its total minus what its actors (outside groups) and reserved bundles
// hold, no GPU over-committed or given whole twice, every bundle's free
// pool equal to its reservation minus its actors' use, and references
// between actors, nodes and groups. Restore runs it, so a corrupt snapshot
// is refused instead of poisoning the state; tests run it after every step.
func (s *State) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: state check: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	for id, n := range s.d.Nodes {
		if n == nil || n.ID != id {
			return bad("node entry %q", id)
		}
		g := len(n.GPUs)
		if g > MaxGPUsPerNode {
			return bad("node %s has %d GPUs", id, g)
		}
		if n.Topology != nil && len(n.Topology) != g {
			return bad("node %s topology has %d rows for %d GPUs", id, len(n.Topology), g)
		}
		for i, row := range n.Topology {
			if len(row) != g {
				return bad("node %s topology row %d has %d entries", id, i, len(row))
			}
		}
		for i, x := range n.GPUs {
			if i > 0 && x.Index <= n.GPUs[i-1].Index || x.Index < 0 {
				return bad("node %s GPU indices not increasing", id)
			}
			if !(x.Free >= 0 && x.Free <= 1) {
				return bad("node %s GPU %d free %v", id, x.Index, x.Free)
			}
		}
		if n.State < NodeAlive || n.State > NodeDraining {
			return bad("node %s state %d", id, n.State)
		}
	}
	used := map[NodeID]Resources{}
	gpuUsed := map[NodeID]map[int]float64{}
	whole := map[NodeID]map[int]string{}
	take := func(node NodeID, r Resources, allocs []GPUAlloc, who string) error {
		n := s.d.Nodes[node]
		if n == nil {
			return bad("%s on unknown node %s", who, node)
		}
		if n.State == NodeDead {
			return bad("%s on dead node %s", who, node)
		}
		used[node] = used[node].Add(withoutGPUs(r))
		if gpuUsed[node] == nil {
			gpuUsed[node], whole[node] = map[int]float64{}, map[int]string{}
		}
		for _, a := range allocs {
			if n.slot(a.Index) < 0 {
				return bad("%s holds unknown GPU %d of %s", who, a.Index, node)
			}
			if !(a.Fraction > 0 && a.Fraction <= 1) {
				return bad("%s holds fraction %v of GPU %s/%d", who, a.Fraction, node, a.Index)
			}
			gpuUsed[node][a.Index] = q(gpuUsed[node][a.Index] + a.Fraction)
			if a.Fraction >= 1 {
				if prev, ok := whole[node][a.Index]; ok {
					return bad("GPU %s/%d given whole to %s and %s", node, a.Index, prev, who)
				}
				whole[node][a.Index] = who
			}
		}
		return nil
	}
	type bkey struct {
		g GroupID
		i int
	}
	bundleUse := map[bkey]Resources{}
	bundleGPU := map[bkey]map[int]float64{}
	for id, a := range s.d.Actors {
		if a == nil || a.Spec.ID != id {
			return bad("actor entry %q", id)
		}
		if a.State < ActorPending || a.State > ActorDead {
			return bad("actor %s state %d", id, a.State)
		}
		if a.Node == "" {
			if len(a.GPUs) > 0 {
				return bad("unplaced actor %s holds GPUs", id)
			}
			continue
		}
		if a.State == ActorDead {
			return bad("dead actor %s still on %s", id, a.Node)
		}
		if gid := a.Spec.Request.Group; gid != "" {
			g := s.d.Groups[gid]
			if g == nil || a.Bundle < 0 || a.Bundle >= len(g.Bundles) || g.Bundles[a.Bundle].Node != a.Node {
				return bad("actor %s in missing bundle %d of %s on %s", id, a.Bundle, gid, a.Node)
			}
			k := bkey{gid, a.Bundle}
			bundleUse[k] = bundleUse[k].Add(withoutGPUs(a.Spec.Request.Resources))
			if bundleGPU[k] == nil {
				bundleGPU[k] = map[int]float64{}
			}
			for _, x := range a.GPUs {
				bundleGPU[k][x.Index] = q(bundleGPU[k][x.Index] + x.Fraction)
			}
			continue
		}
		if err := take(a.Node, a.Spec.Request.Resources, a.GPUs, "actor "+string(id)); err != nil {
			return err
		}
	}
	for id, g := range s.d.Groups {
		if g == nil || g.Spec.ID != id || len(g.Bundles) != len(g.Spec.Bundles) {
			return bad("group entry %q", id)
		}
		for i, b := range g.Bundles {
			if b.Index != i {
				return bad("group %s bundle %d has index %d", id, i, b.Index)
			}
			if b.Node == "" {
				continue
			}
			if err := take(b.Node, b.Resources, b.GPUs, fmt.Sprintf("group %s bundle %d", id, i)); err != nil {
				return err
			}
			k := bkey{id, i}
			want := b.Resources.Sub(bundleUse[k])
			if b.Free.MilliCPU != want.MilliCPU || b.Free.MemoryBytes != want.MemoryBytes || b.Free.MilliCPU < 0 || b.Free.MemoryBytes < 0 {
				return bad("group %s bundle %d free %v, want %v", id, i, b.Free, want)
			}
			if len(b.GPUFree) != len(b.GPUs) {
				return bad("group %s bundle %d GPU pools differ", id, i)
			}
			for j, gf := range b.GPUFree {
				if gf.Index != b.GPUs[j].Index {
					return bad("group %s bundle %d GPU pools differ", id, i)
				}
				if w := q(b.GPUs[j].Fraction - bundleGPU[k][gf.Index]); gf.Fraction != w || gf.Fraction < 0 {
					return bad("group %s bundle %d GPU %d free %v, want %v", id, i, gf.Index, gf.Fraction, w)
				}
			}
		}
	}
	for id, n := range s.d.Nodes {
		u := used[id]
		if n.Free.MilliCPU != n.Total.MilliCPU-u.MilliCPU || n.Free.MemoryBytes != n.Total.MemoryBytes-u.MemoryBytes {
			return bad("node %s free %v, total %v, used %v", id, n.Free, n.Total, u)
		}
		if n.Free.MilliCPU < 0 || n.Free.MemoryBytes < 0 {
			return bad("node %s over-committed: %v", id, n.Free)
		}
		for k, v := range n.Total.Custom {
			if f := n.Free.Custom[k]; f != q(v-u.Custom[k]) || f < 0 {
				return bad("node %s custom %s free %v, want %v", id, k, f, q(v-u.Custom[k]))
			}
		}
		for k := range u.Custom {
			if _, ok := n.Total.Custom[k]; !ok && u.Custom[k] != 0 {
				return bad("node %s hands out custom %s it does not have", id, k)
			}
		}
		sum := 0.0
		for _, g := range n.GPUs {
			want := q(1 - gpuUsed[id][g.Index])
			if g.Free != want || g.Free < 0 {
				return bad("node %s GPU %d free %v, want %v", id, g.Index, g.Free, want)
			}
			sum = q(sum + g.Free)
		}
		if math.Abs(n.Free.GPUs-sum) > 1e-9 || n.Total.GPUs != float64(len(n.GPUs)) {
			return bad("node %s free GPUs %v, per-GPU sum %v", id, n.Free.GPUs, sum)
		}
	}
	for id, a := range s.d.Actors {
		if a.Spec.Name != "" && a.State != ActorDead && s.d.Names[nameKey(a.Spec.Namespace, a.Spec.Name)] != id {
			return bad("live actor %s does not own its name %q", id, a.Spec.Name)
		}
	}
	for k, id := range s.d.Names {
		a := s.d.Actors[id]
		if a == nil || a.State == ActorDead || nameKey(a.Spec.Namespace, a.Spec.Name) != k {
			return bad("name %q points to %q", k, id)
		}
	}
	return nil
}
