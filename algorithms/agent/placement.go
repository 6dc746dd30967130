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

// Placements reports every policy actor's placement by policy name.
func (t *Team) Placements(ctx context.Context) (map[string]actors.ActorInfo, error) {
	out := map[string]actors.ActorInfo{}
	for _, name := range t.Names {
		info, err := actors.Call(ctx, t.Handles[name], (*Policy).Placement, struct{}{}).Get(ctx)
		if err != nil {
			return out, fmt.Errorf("placement of %s: %w", name, err)
		}
		out[name] = info
	}
	return out, nil
}
