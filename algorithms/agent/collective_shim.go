package agent

import (
	"context"
	"fmt"

	"troupe/actors"
)

// Until package collective lands: the op type and the lookup of an
// actor's group.
type collectiveOp uint8

const opSum collectiveOp = 0

func groupOf(ctx context.Context, name string) (replicaGroup, error) {
	return nil, fmt.Errorf("%w: replica group %q: no collective groups yet", ErrConfig, name)
}

func formGroup(ctx context.Context, rt actors.Runtime, name string, hs []actors.Handle[Policy]) error {
	return fmt.Errorf("%w: replica group %q: no collective groups yet", ErrConfig, name)
}
