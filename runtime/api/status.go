package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"troupe/actors"
	"troupe/scheduler"
)

// Status is a snapshot of a cluster for people and scripts.
type Status struct {
	Nodes  []NodeStatus  `json:"nodes"`
	Actors []ActorStatus `json:"actors"`
}

// NodeStatus describes one node.
type NodeStatus struct {
	ID        string             `json:"id"`
	Address   string             `json:"address,omitempty"`
	Role      string             `json:"role"`  // "head", "server", "worker", "embedded"
	State     string             `json:"state"` // "alive", "suspect", "draining", "dead" (lost) or "drained" (left after troupe stop)
	Total     actors.ResourceSet `json:"total"`
	Used      actors.ResourceSet `json:"used"`
	GPUs      []GPUStatus        `json:"gpus,omitempty"`
	Simulated bool               `json:"simulated_gpus,omitempty"`
	Labels    map[string]string  `json:"labels,omitempty"`
}

// GPUStatus is one GPU of a node and how much of it is held.
type GPUStatus struct {
	Index int     `json:"index"`
	Used  float64 `json:"used"` // fraction held by actors, 0..1
}

// ActorStatus describes one actor.
type ActorStatus struct {
	ID        string             `json:"id"`
	Name      string             `json:"name,omitempty"`
	Type      string             `json:"type"`
	State     string             `json:"state"` // PENDING, ALIVE, DEAD
	Node      string             `json:"node,omitempty"`
	GPUs      []int              `json:"gpus,omitempty"`
	Resources actors.ResourceSet `json:"resources"`
	Restarts  int                `json:"restarts"`
	Death     string             `json:"death,omitempty"`
}

// NewID returns a random 128-bit hex ID (of an actor, a job, a placement
// group).
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("runtime: crypto/rand failed: %v", err)) // the OS has no randomness: nothing can work
	}
	return hex.EncodeToString(b[:])
}

// ToRequest converts an actors resource request to the scheduler's.
func ToRequest(r actors.ResourceSet) scheduler.Request {
	return scheduler.Request{Resources: scheduler.Resources{
		MilliCPU: int64(r.CPUs*1000 + 0.5), MemoryBytes: r.MemoryBytes, GPUs: r.GPUs, Custom: scheduler.CustomResources(r.Custom),
	}}
}

// SpecRequest converts an actor spec's resources and placement to the
// scheduler's request: what a driver sends the leader, and what the
// embedded cluster plans with.
func SpecRequest(spec actors.Spec) scheduler.Request {
	req := ToRequest(spec.Resources)
	p := spec.Placement
	if p.Group != "" {
		req.Group, req.Bundle = scheduler.GroupID(p.Group), p.Bundle
	}
	if p.Node != "" {
		req.Affinity = &scheduler.Affinity{Node: scheduler.NodeID(p.Node), Soft: p.Soft}
	}
	return req
}

// FromResources converts scheduler resources to an actors.ResourceSet.
func FromResources(r scheduler.Resources) actors.ResourceSet {
	return actors.ResourceSet{CPUs: r.CPUs(), GPUs: r.GPUs, MemoryBytes: r.MemoryBytes, Custom: map[string]float64(r.Custom)}
}

// Infeasible converts a scheduler infeasibility to actors.ErrInfeasible,
// keeping the reason.
func Infeasible(err error) error {
	if errors.Is(err, scheduler.ErrInfeasible) {
		return fmt.Errorf("%w: %s", actors.ErrInfeasible, InfeasibleReason(err))
	}
	return err
}

// InfeasibleReason is the scheduler's explanation of an infeasible request
// without the words before it ("create actor x: infeasible: "), so the
// message says "infeasible" once, through actors.ErrInfeasible.
func InfeasibleReason(err error) string {
	var ie *scheduler.InfeasibleError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}
