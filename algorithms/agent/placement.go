package agent

import (
	"context"
	"fmt"

	"troupe/actors"
)

// Placement reports where the policy actor runs: its node and the GPU
// indices the cluster assigned to it (actors.Self). Outside an actor (a
// Policy used in-process) the info is zero.
func (p *Policy) Placement(ctx context.Context, _ struct{}) (actors.ActorInfo, error) {
	info, _ := actors.Self(ctx)
	return info, nil
}

// Placements reports every policy actor's placement by policy name (and
// every data-parallel replica's, see Team.Timelines for the keys).
func (t *Team) Placements(ctx context.Context) (map[string]actors.ActorInfo, error) {
	out := map[string]actors.ActorInfo{}
	for _, name := range t.Names {
		for r, h := range t.replicasOf(t.Handles[name]) { // replica r > 0 under name-r<r>
			info, err := actors.Call(ctx, h, (*Policy).Placement, struct{}{}).Get(ctx)
			if err != nil {
				return out, fmt.Errorf("placement of %s: %w", replicaName(name, r), err)
			}
			out[replicaName(name, r)] = info
		}
	}
	return out, nil
}
