package client

import (
	"context"
	"fmt"
	"time"

	"troupe/scheduler"
)

// GroupServiceName is the gRPC service name of placement groups.
const GroupServiceName = "troupe.PlacementGroups"

// GroupsRequest creates and removes placement groups in one commit.
type GroupsRequest struct {
	Create []scheduler.GroupSpec `msgpack:"create,omitempty"`
	Remove []scheduler.GroupID   `msgpack:"remove,omitempty"`
	Hops   int                   `msgpack:"hops,omitempty"`
	// Retry marks a request forwarded again after an attempt whose outcome
	// is unknown (leadership changed during the commit): removing a group
	// that is already gone then succeeds, as the earlier attempt may have
	// removed it.
	Retry bool `msgpack:"retry,omitempty"`
}

// GroupsResponse has one result per created group, then one per removed
// group, in request order. A created group's result has Bundles (reserved)
// or Pending (why it waits), or Err (infeasible or refused: not created).
type GroupsResponse struct {
	Results []CreateResult `msgpack:"results"`
}

// GetGroupRequest asks for a group's committed state; with Timeout > 0
// the answer waits (up to Timeout, at most a minute) until every bundle is
// reserved or the group is gone.
type GetGroupRequest struct {
	ID      scheduler.GroupID `msgpack:"id"`
	Timeout time.Duration     `msgpack:"timeout,omitempty"`
	Hops    int               `msgpack:"hops,omitempty"`
}

// GetGroupResponse is the group's committed state; Group is nil when there
// is no such group (never created, or removed).
type GetGroupResponse struct {
	Group *scheduler.PlacementGroup `msgpack:"group,omitempty"`
}

// CommitPlacementGroups creates and removes placement groups through the
// leader in one commit; results are the creates' then the removes', in
// order. A result's Err is the FSM's or planner's verdict on that item
// (errors.Is works with the scheduler sentinels); the returned error is a
// transport or leadership failure.
func (c *Client) CommitPlacementGroups(ctx context.Context, create []scheduler.GroupSpec, remove []scheduler.GroupID) ([]CreateResult, error) {
	resp := new(GroupsResponse)
	if err := c.InvokeService(ctx, GroupServiceName, "Commit", &GroupsRequest{Create: create, Remove: remove}, resp); err != nil {
		return nil, err
	}
	if want := len(create) + len(remove); len(resp.Results) != want {
		return nil, fmt.Errorf("placement groups: %d results for %d requests", len(resp.Results), want)
	}
	return resp.Results, nil
}

// PlacementGroup returns the committed state of a group (nil when there is
// no such group). With wait > 0 it waits on the cluster side, up to wait,
// until every bundle is reserved or the group is gone.
func (c *Client) PlacementGroup(ctx context.Context, id scheduler.GroupID, wait time.Duration) (*scheduler.PlacementGroup, error) {
	resp := new(GetGroupResponse)
	if err := c.InvokeService(ctx, GroupServiceName, "Get", &GetGroupRequest{ID: id, Timeout: wait}, resp); err != nil {
		return nil, fmt.Errorf("placement group %s: %w", id, err)
	}
	return resp.Group, nil
}
