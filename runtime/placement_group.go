package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"troupe/actors"
	"troupe/runtime/api"
	"troupe/scheduler"
)

// PlacementStrategy is how a placement group's bundles are spread over
// nodes.
type PlacementStrategy uint8

// Placement group strategies (Ray's names).
const (
	// Pack (the default) puts the bundles on as few nodes as possible,
	// choosing the node left with the least waste.
	Pack PlacementStrategy = PlacementStrategy(scheduler.Pack)
	// Spread puts each bundle on a different node when it can.
	Spread PlacementStrategy = PlacementStrategy(scheduler.Spread)
	// StrictPack puts every bundle on one node, or waits.
	StrictPack PlacementStrategy = PlacementStrategy(scheduler.StrictPack)
	// StrictSpread puts every bundle on a different node, or waits (and
	// fails at once with more bundles than live nodes).
	StrictSpread PlacementStrategy = PlacementStrategy(scheduler.StrictSpread)
)

// String returns the Ray-style name, e.g. "STRICT_PACK".
func (s PlacementStrategy) String() string { return scheduler.Strategy(s).String() }

// ErrPlacementGroupRemoved: the placement group was removed (by Remove, or
// with the job that created it).
var ErrPlacementGroupRemoved = api.ErrPlacementGroupRemoved

// BundleInfo is one bundle of a placement group: bundle i keeps index i,
// and once reserved a fixed node and fixed GPU indices, which the actors
// placed in it see through actors.Self.
type BundleInfo struct {
	Index     int                `json:"index"`
	Resources actors.ResourceSet `json:"resources"`
	Node      string             `json:"node,omitempty"` // "" while waiting to be reserved
	GPUs      []int              `json:"gpus,omitempty"` // GPU indices on Node
}

// PlacementGroupInfo is a placement group's committed state.
type PlacementGroupInfo struct {
	ID       string            `json:"id"`
	Name     string            `json:"name,omitempty"`
	Strategy PlacementStrategy `json:"strategy"`
	// State is PENDING (waiting for room), CREATED (every bundle
	// reserved) or RESCHEDULING (a node holding bundles died; they wait to
	// be reserved again).
	State string `json:"state"`
	// Pending says why bundles wait, for a person to read.
	Pending string       `json:"pending,omitempty"`
	Bundles []BundleInfo `json:"bundles"`
}

// PlacementGroup is a handle on a placement group: bundles of resources
// reserved all together (or not at all) on the cluster's nodes, for actors
// placed with actors.PlacementGroup(pg, i).
type PlacementGroup struct {
	id       string
	name     string
	strategy PlacementStrategy
	bundles  int
	b        groupBackend
}

// groupBackend is what the embedded cluster (runtime/local) and the driver
// (runtime/driver) implement for placement groups.
type groupBackend interface {
	// CreateGroup commits the group (reserved or pending); an infeasible
	// group fails at once with an error wrapping actors.ErrInfeasible.
	CreateGroup(ctx context.Context, spec scheduler.GroupSpec) error
	// Group returns a copy of the committed group, nil when it is gone.
	Group(ctx context.Context, id scheduler.GroupID) (*scheduler.PlacementGroup, error)
	// WaitGroup returns the group once it is created or gone (nil), or
	// ctx's error.
	WaitGroup(ctx context.Context, id scheduler.GroupID) (*scheduler.PlacementGroup, error)
	// RemoveGroup removes the group, killing its actors.
	RemoveGroup(ctx context.Context, id scheduler.GroupID) error
}

// CreatePlacementGroup reserves bundles of resources on rt's cluster as one
// group, all or nothing, with the given strategy; name is for display
// ("" for none). It returns as soon as the group is committed: Wait blocks
// until every bundle is reserved. A group that no cluster node set could
// ever hold (a bundle larger than every node, STRICT_SPREAD over more
// bundles than live nodes, STRICT_PACK beyond one node) fails at once with
// an error wrapping actors.ErrInfeasible; one that must wait for room is
// PENDING, with a reason Info reports.
func CreatePlacementGroup(ctx context.Context, rt Runtime, bundles []actors.ResourceSet, strategy PlacementStrategy, name string) (*PlacementGroup, error) {
	b, ok := rt.(groupBackend)
	if !ok {
		return nil, fmt.Errorf("create placement group: runtime %T does not support placement groups", rt)
	}
	label := "create placement group"
	if name != "" {
		label += " " + name
	}
	if strategy > StrictSpread {
		return nil, fmt.Errorf("%s: unknown strategy %v", label, strategy)
	}
	if len(bundles) == 0 {
		return nil, fmt.Errorf("%s: no bundles", label)
	}
	spec := scheduler.GroupSpec{ID: scheduler.GroupID("pg-" + api.NewID()), Name: name, Strategy: scheduler.Strategy(strategy)}
	for i, r := range bundles {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("%s: bundle %d: %w", label, i, err)
		}
		res := api.ToRequest(r).Resources
		if res.IsZero() {
			return nil, fmt.Errorf("%s: bundle %d is empty", label, i)
		}
		spec.Bundles = append(spec.Bundles, res)
	}
	if jb, ok := rt.(interface{ JobID() scheduler.JobID }); ok {
		spec.JobID = jb.JobID() // removed with the job
	}
	if err := b.CreateGroup(ctx, spec); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	return &PlacementGroup{id: string(spec.ID), name: name, strategy: strategy, bundles: len(bundles), b: b}, nil
}

// ID implements actors.PlacementGroupRef.
func (pg *PlacementGroup) ID() string { return pg.id }

// Name is the display name given at creation.
func (pg *PlacementGroup) Name() string { return pg.name }

// Strategy is the group's strategy.
func (pg *PlacementGroup) Strategy() PlacementStrategy { return pg.strategy }

// BundleCount is the number of bundles.
func (pg *PlacementGroup) BundleCount() int { return pg.bundles }

func (pg *PlacementGroup) label() string {
	if pg.name != "" {
		return fmt.Sprintf("placement group %s (%s)", pg.name, pg.id)
	}
	return "placement group " + pg.id
}

// Ready reports, without waiting, whether every bundle is reserved.
func (pg *PlacementGroup) Ready(ctx context.Context) (bool, error) {
	g, err := pg.b.Group(ctx, scheduler.GroupID(pg.id))
	if err != nil {
		return false, fmt.Errorf("%s: %w", pg.label(), err)
	}
	if g == nil {
		return false, fmt.Errorf("%s: %w", pg.label(), ErrPlacementGroupRemoved)
	}
	return g.State == scheduler.GroupCreated, nil
}

// Wait blocks until every bundle is reserved (the group is CREATED), the
// group is removed (ErrPlacementGroupRemoved) or ctx ends (its error,
// with the reason the group still waits).
func (pg *PlacementGroup) Wait(ctx context.Context) error {
	g, err := pg.b.WaitGroup(ctx, scheduler.GroupID(pg.id))
	switch {
	case err != nil && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		why := ""
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if g, gerr := pg.b.Group(qctx, scheduler.GroupID(pg.id)); gerr == nil && g != nil && g.PendingReason != "" {
			why = " (" + g.PendingReason + ")"
		}
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		return fmt.Errorf("%s: waiting for its bundles%s: %w", pg.label(), why, err)
	case err != nil:
		return fmt.Errorf("%s: %w", pg.label(), err)
	case g == nil:
		return fmt.Errorf("%s: %w", pg.label(), ErrPlacementGroupRemoved)
	}
	return nil
}

// Info returns the group's committed state: its bundles' nodes and GPU
// indices, or why it waits.
func (pg *PlacementGroup) Info(ctx context.Context) (PlacementGroupInfo, error) {
	g, err := pg.b.Group(ctx, scheduler.GroupID(pg.id))
	if err != nil {
		return PlacementGroupInfo{}, fmt.Errorf("%s: %w", pg.label(), err)
	}
	if g == nil {
		return PlacementGroupInfo{}, fmt.Errorf("%s: %w", pg.label(), ErrPlacementGroupRemoved)
	}
	return groupInfo(g), nil
}

// Bundles reports bundle i → its node and GPU indices (Node "" for a
// bundle still waiting to be reserved).
func (pg *PlacementGroup) Bundles(ctx context.Context) ([]BundleInfo, error) {
	info, err := pg.Info(ctx)
	return info.Bundles, err
}

// Remove removes the group: its actors are killed and every reservation is
// freed. Removing a removed group is an error wrapping
// ErrPlacementGroupRemoved.
func (pg *PlacementGroup) Remove(ctx context.Context) error {
	if err := pg.b.RemoveGroup(ctx, scheduler.GroupID(pg.id)); err != nil {
		if errors.Is(err, scheduler.ErrNotFound) {
			return fmt.Errorf("remove %s: %w", pg.label(), ErrPlacementGroupRemoved)
		}
		return fmt.Errorf("remove %s: %w", pg.label(), err)
	}
	return nil
}

func groupInfo(g *scheduler.PlacementGroup) PlacementGroupInfo {
	info := PlacementGroupInfo{ID: string(g.Spec.ID), Name: g.Spec.Name, Strategy: PlacementStrategy(g.Spec.Strategy),
		State: g.State.String(), Pending: g.PendingReason}
	for _, b := range g.Bundles {
		info.Bundles = append(info.Bundles, BundleInfo{Index: b.Index, Resources: api.FromResources(b.Resources), Node: string(b.Node), GPUs: scheduler.GPUIndices(b.GPUs)})
	}
	return info
}
