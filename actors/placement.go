package actors

import "fmt"

// AnyBundle as the bundle index of the PlacementGroup option lets the actor
// use any bundle of the group with room for it.
const AnyBundle = -1

// Placement says where an actor may run beyond its resources: inside a
// bundle of a placement group, or on one node (node affinity). The zero
// value leaves the choice to the scheduler's default (PACK: the node left
// with the least waste).
type Placement struct {
	// Group is the placement group's ID ("" when none); see the
	// PlacementGroup option.
	Group string `msgpack:"group,omitempty"`
	// Bundle is the bundle index within Group, or AnyBundle.
	Bundle int `msgpack:"bundle,omitempty"`
	// Node, when set, ties the actor to that node ID; see NodeAffinity.
	Node string `msgpack:"node,omitempty"`
	// Soft lets the actor run elsewhere when Node cannot take it.
	Soft bool `msgpack:"soft,omitempty"`
}

// Validate reports a malformed placement.
func (p Placement) Validate() error {
	switch {
	case p.Group == "" && p.Bundle != 0:
		return fmt.Errorf("PlacementGroup: bundle %d given without a placement group", p.Bundle)
	case p.Bundle < AnyBundle:
		return fmt.Errorf("PlacementGroup: bundle index %d: must be ≥ 0 (or AnyBundle)", p.Bundle)
	case p.Group != "" && p.Node != "":
		return fmt.Errorf("NodeAffinity(%s) with PlacementGroup(%s): an actor in a group runs where its bundle is", p.Node, p.Group)
	case p.Soft && p.Node == "":
		return fmt.Errorf("NodeAffinity: soft affinity without a node")
	}
	return nil
}

// PlacementGroupRef is a placement group created by a runtime (for example
// runtime.CreatePlacementGroup) that actors can be placed in.
type PlacementGroupRef interface {
	// ID is the group's unique ID within its cluster.
	ID() string
}

// PlacementGroup places the actor in bundle index of the group pg (or any
// bundle with room, with AnyBundle): it uses the resources the bundle
// reserved, on the bundle's node and GPUs, which Self reports. The actor
// waits while the bundle is not reserved yet or is full; a spawn asking
// for more than the bundle holds fails at once with ErrInfeasible. Removing
// the group kills its actors.
func PlacementGroup(pg PlacementGroupRef, bundle int) Option {
	return func(s *Spec) {
		s.Placement.Group, s.Placement.Bundle = "", bundle
		if pg != nil {
			s.Placement.Group = pg.ID()
		}
	}
}

// NodeAffinity ties the actor to the node with that ID. A hard affinity
// (soft false) waits while the node lacks room or is suspect or draining
// (the pending reason names it) and fails with ErrInfeasible when the node
// is dead or unknown; a soft one falls back to the default placement.
func NodeAffinity(node string, soft bool) Option {
	return func(s *Spec) { s.Placement.Node, s.Placement.Soft = node, soft }
}
