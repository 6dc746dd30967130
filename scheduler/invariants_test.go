package scheduler

import (
	"math"
	"testing"
)

// checkInvariants verifies the state's accounting from first principles:
// every node's free resources equal its total minus what its actors (outside
// groups) and bundles hold; no whole GPU is given twice; no GPU is
// over-committed; every bundle's free pool equals its reservation minus its
// actors' use.
func checkInvariants(t testing.TB, s *State) {
	t.Helper()
	type gpuUse map[int]float64
	used := map[NodeID]Resources{}
	gpu := map[NodeID]gpuUse{}
	whole := map[NodeID]map[int]string{}
	add := func(node NodeID, r Resources, allocs []GPUAlloc, who string) {
		used[node] = used[node].Add(withoutGPUs(r))
		if gpu[node] == nil {
			gpu[node] = gpuUse{}
			whole[node] = map[int]string{}
		}
		for _, a := range allocs {
			gpu[node][a.Index] = q(gpu[node][a.Index] + a.Fraction)
			if a.Fraction >= 1 {
				if prev, ok := whole[node][a.Index]; ok {
					t.Fatalf("GPU %s/%d given whole to %s and %s", node, a.Index, prev, who)
				}
				whole[node][a.Index] = who
			}
		}
	}
	bundleUse := map[GroupID]map[int]Resources{}
	bundleGPU := map[GroupID]map[int]gpuUse{}
	for _, a := range s.Actors() {
		if a.State == ActorDead && a.Node != "" {
			t.Fatalf("dead actor %s still on %s", a.Spec.ID, a.Node)
		}
		if a.Node == "" {
			if len(a.GPUs) > 0 {
				t.Fatalf("unplaced actor %s holds GPUs", a.Spec.ID)
			}
			continue
		}
		if n := s.Node(a.Node); n == nil || n.State == NodeDead {
			t.Fatalf("actor %s on missing or dead node %s", a.Spec.ID, a.Node)
		}
		if g := a.Spec.Request.Group; g != "" {
			if bundleUse[g] == nil {
				bundleUse[g], bundleGPU[g] = map[int]Resources{}, map[int]gpuUse{}
			}
			bundleUse[g][a.Bundle] = bundleUse[g][a.Bundle].Add(withoutGPUs(a.Spec.Request.Resources))
			if bundleGPU[g][a.Bundle] == nil {
				bundleGPU[g][a.Bundle] = gpuUse{}
			}
			for _, x := range a.GPUs {
				bundleGPU[g][a.Bundle][x.Index] = q(bundleGPU[g][a.Bundle][x.Index] + x.Fraction)
			}
			continue
		}
		add(a.Node, a.Spec.Request.Resources, a.GPUs, string(a.Spec.ID))
	}
	for _, g := range s.Groups() {
		for _, b := range g.Bundles {
			if b.Node == "" {
				continue
			}
			add(b.Node, b.Resources, b.GPUs, string(g.Spec.ID)+"#"+string(rune('0'+b.Index)))
			want := b.Resources.Sub(bundleUse[g.Spec.ID][b.Index])
			if b.Free.MilliCPU != want.MilliCPU || b.Free.MemoryBytes != want.MemoryBytes {
				t.Fatalf("group %s bundle %d free %v, want %v", g.Spec.ID, b.Index, b.Free, want)
			}
			for i, gf := range b.GPUFree {
				if w := q(b.GPUs[i].Fraction - bundleGPU[g.Spec.ID][b.Index][gf.Index]); gf.Fraction != w || gf.Fraction < 0 {
					t.Fatalf("group %s bundle %d GPU %d free %v, want %v", g.Spec.ID, b.Index, gf.Index, gf.Fraction, w)
				}
			}
		}
	}
	for _, n := range s.Nodes() {
		u := used[n.ID]
		if n.Free.MilliCPU != n.Total.MilliCPU-u.MilliCPU || n.Free.MemoryBytes != n.Total.MemoryBytes-u.MemoryBytes {
			t.Fatalf("node %s free %v, total %v, used %v", n.ID, n.Free, n.Total, u)
		}
		if n.Free.MilliCPU < 0 || n.Free.MemoryBytes < 0 {
			t.Fatalf("node %s over-committed: %v", n.ID, n.Free)
		}
		for k, v := range n.Total.Custom {
			if f := n.Free.Custom[k]; f != q(v-u.Custom[k]) || f < 0 {
				t.Fatalf("node %s custom %s free %v, want %v", n.ID, k, f, q(v-u.Custom[k]))
			}
		}
		sum := 0.0
		for _, g := range n.GPUs {
			want := q(1 - gpu[n.ID][g.Index])
			if g.Free != want || g.Free < 0 || g.Free > 1 {
				t.Fatalf("node %s GPU %d free %v, want %v", n.ID, g.Index, g.Free, want)
			}
			sum = q(sum + g.Free)
		}
		if math.Abs(n.Free.GPUs-sum) > 1e-9 {
			t.Fatalf("node %s free GPUs %v, per-GPU sum %v", n.ID, n.Free.GPUs, sum)
		}
	}
}
