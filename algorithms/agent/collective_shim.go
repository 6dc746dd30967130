package agent

import (
	"context"
	"fmt"

	"troupe/actors"
)

// formGroup makes the replicas hs, in rank order, the members of the
// collective group name. Until package collective can form groups of
// actors, it cannot.
func formGroup(ctx context.Context, rt actors.Runtime, name string, hs []actors.Handle[Policy]) error {
	return fmt.Errorf("%w: replica group %q: no collective groups yet", ErrConfig, name)
}
