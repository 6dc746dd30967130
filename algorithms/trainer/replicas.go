package trainer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"troupe/algorithms/agent"
)

// checkReplicas records a step of a team of data-parallel replicas: the
// share of the step spent in collectives, from the actors' own clocks (the
// step's timeline), and every policy's weights hash, which must be the
// same on all its replicas (they check it themselves in every update;
// this checks it again from the driver and fails the run loudly).
func (t *Trainer) checkReplicas(ctx context.Context, r *StepRecord) error {
	if t.team.Replicas() < 2 {
		return nil
	}
	var frac float64
	n := 0
	for key, p := range r.Timeline {
		if (strings.HasSuffix(key, "/policy") || strings.HasSuffix(key, "/learner")) && p.Wall > 0 {
			frac += p.Collective / p.Wall
			n++
		}
	}
	if n > 0 {
		r.CollectiveFrac = frac / float64(n)
	}
	hs, err := t.team.ReplicaHashes(ctx)
	if err != nil {
		return err
	}
	r.ReplicaHash = map[string]string{}
	for _, key := range slices.Sorted(maps.Keys(hs)) {
		for i, h := range hs[key] {
			if h != hs[key][0] {
				return fmt.Errorf("%w: policy %s: weights hash %016x on replica %d, %016x on replica 0", agent.ErrReplicasDiverged, key, h, i, hs[key][0])
			}
		}
		r.ReplicaHash[key] = fmt.Sprintf("%016x", hs[key][0])
	}
	return nil
}

// replicaPlacements is one line saying where every replica runs, e.g.
// "replicas: 2 per policy (data-parallel); planner-r1 on node n1 GPU [1]; ...".
func replicaPlacements(ctx context.Context, team *agent.Team, n int) string {
	where, _ := team.Placements(ctx)
	parts := []string{fmt.Sprintf("replicas: %d per policy actor (data-parallel: a shard of every mini-batch each, gradients summed by allreduce)", n)}
	for _, key := range slices.Sorted(maps.Keys(where)) {
		info := where[key]
		p := key + " on node " + info.Node
		if len(info.GPUs) > 0 {
			p += fmt.Sprintf(" GPU %v", info.GPUs)
		}
		if info.PlacementGroup != "" {
			p += fmt.Sprintf(" (placement group %s bundle %d)", info.PlacementGroup, info.Bundle)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}
