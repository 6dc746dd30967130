package driver

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/api"
	"troupe/scheduler"
)

// Placement groups of a remote cluster: created and removed through the
// leader (runtime/cluster's placement group service), which decides and
// commits every bundle's node and GPUs through raft.

func (r *Driver) JobID() scheduler.JobID { return r.job }

func (r *Driver) CreateGroup(ctx context.Context, spec scheduler.GroupSpec) error {
	res, err := r.client.CommitPlacementGroups(ctx, []scheduler.GroupSpec{spec}, nil)
	if err != nil {
		return err
	}
	return api.Infeasible(res[0].Err.AsError())
}

func (r *Driver) Group(ctx context.Context, id scheduler.GroupID) (*scheduler.PlacementGroup, error) {
	return r.client.PlacementGroup(ctx, id, 0)
}

// groupWaitSlice is how long one cluster-side wait lasts before the driver
// asks again (so a cancelled ctx is noticed and a lost leader retried).
const groupWaitSlice = 10 * time.Second

func (r *Driver) WaitGroup(ctx context.Context, id scheduler.GroupID) (*scheduler.PlacementGroup, error) {
	for {
		wait := groupWaitSlice
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, dl.Sub(r.clock.Now()))
		}
		if wait <= 0 {
			return nil, context.DeadlineExceeded
		}
		g, err := r.client.PlacementGroup(ctx, id, wait)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if status.Code(err) == codes.DeadlineExceeded {
				return nil, context.DeadlineExceeded // the deadline passed on the cluster's side first
			}
			return nil, err
		}
		if g == nil || g.State == scheduler.GroupCreated {
			return g, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func (r *Driver) RemoveGroup(ctx context.Context, id scheduler.GroupID) error {
	res, err := r.client.CommitPlacementGroups(ctx, nil, []scheduler.GroupID{id})
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	return res[0].Err.AsError()
}
