package local

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sort"
	"sync"
	"time"

	"troupe/actors"
	"troupe/actors/collective"
	"troupe/gpu"
	"troupe/runtime/api"
	"troupe/scheduler"
)

// localNodeID names the one node of the embedded cluster.
const localNodeID = "local"

// Cluster is the embedded single-process cluster: one node that is control
// plane and worker at once. Its control-plane state is the same
// scheduler.State a multi-node cluster replicates through raft, changed by
// the same commands (applied directly: there is nobody to replicate to), so
// placement, GPU topology scoring and queuing behave as on a cluster.
// Actors are actors.Instances in this process.
type Cluster struct {
	inv     *gpu.Inventory
	planner scheduler.Planner
	now     func() time.Time

	mu      sync.Mutex
	state   *scheduler.State
	nextID  uint64
	actors  map[scheduler.ActorID]*localActor // live actors
	waiting map[scheduler.ActorID]chan struct{}
	// restarts of dead actors: restarts happen in place here, so the
	// scheduler state (which counts re-placements) does not see them.
	deadRestarts map[scheduler.ActorID]int
	// groupCh is closed (and replaced) whenever a placement group changes,
	// waking Wait callers (groups.go).
	groupCh chan struct{}
	closed  bool
}

// localActor is one live actor of the embedded cluster.
type localActor struct {
	l    *Cluster
	id   scheduler.ActorID
	spec actors.Spec
	inst *actors.Instance
}

// Config describes the embedded cluster's one node.
type Config struct {
	// SimulateGPUs gives the node simulated GPUs: a count such as "4" or a
	// profile name ("" for the machine's real GPUs).
	SimulateGPUs string
	// CPUs and MemoryBytes override the machine's when OverrideCPUs and
	// OverrideMemory are set.
	CPUs           float64
	OverrideCPUs   bool
	MemoryBytes    int64
	OverrideMemory bool
	// Custom adds custom resources, e.g. {"tpu": 2}.
	Custom map[string]float64
}

// New starts the embedded cluster.
func New(cfg Config) (*Cluster, error) {
	inv, err := gpu.Open(gpu.Options{Simulate: cfg.SimulateGPUs})
	if err != nil {
		return nil, fmt.Errorf("init: GPUs: %w", err)
	}
	cpus := float64(goruntime.NumCPU())
	if cfg.OverrideCPUs {
		cpus = cfg.CPUs
	}
	mem := gpu.HostMemory()
	if cfg.OverrideMemory {
		mem = cfg.MemoryBytes
	}
	node := scheduler.NodeInfo{
		ID:        localNodeID,
		Address:   "in-process",
		Resources: scheduler.Resources{MilliCPU: int64(cpus * 1000), MemoryBytes: mem, Custom: scheduler.CustomResources(cfg.Custom)},
	}
	for _, d := range inv.Devices() {
		g := scheduler.GPUInfo{Index: d.Index, UUID: d.UUID, Model: d.Name}
		if d.MemoryTotal != nil {
			g.MemoryBytes = int64(*d.MemoryTotal)
		}
		node.GPUs = append(node.GPUs, g)
	}
	if t := inv.Topology(); t != nil && t.Len() == len(node.GPUs) && t.Len() > 0 {
		node.Topology = t.Scores
	}
	l := &Cluster{inv: inv, now: time.Now, state: scheduler.NewState(),
		actors: map[scheduler.ActorID]*localActor{}, waiting: map[scheduler.ActorID]chan struct{}{}, deadRestarts: map[scheduler.ActorID]int{},
		groupCh: make(chan struct{})}
	if err := l.state.Apply(&scheduler.RegisterNode{Node: node, At: l.now().UnixNano()}); err != nil {
		inv.Close()
		return nil, fmt.Errorf("init: node resources: %w", err)
	}
	return l, nil
}

// SpawnActor implements actors.Runtime.
func (l *Cluster) SpawnActor(ctx context.Context, spec actors.Spec) (actors.Ref, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	label := spec.Type
	if spec.Name != "" {
		label += "(" + spec.Name + ")"
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("spawn %s: %w", label, ErrShutdown)
	}
	if spec.Name != "" && l.state.ActorByName("", spec.Name) != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("spawn %s: %w: an actor named %q is alive", label, actors.ErrDuplicate, spec.Name)
	}
	l.nextID++
	id := scheduler.ActorID(fmt.Sprintf("%08x", l.nextID))
	aspec := scheduler.ActorSpec{ID: id, Name: spec.Name, Class: spec.Type, MaxRestarts: spec.MaxRestarts,
		Request: api.SpecRequest(spec), Args: spec.Config}
	cmd, err := l.planner.CreateActor(l.state, aspec, l.now().UnixNano())
	if err == nil {
		err = l.state.Apply(cmd)
	}
	if err != nil {
		l.mu.Unlock()
		if errors.Is(err, scheduler.ErrInfeasible) {
			return nil, fmt.Errorf("spawn %s: %w: %s", label, actors.ErrInfeasible, api.InfeasibleReason(err))
		}
		return nil, fmt.Errorf("spawn %s: %w", label, err)
	}
	var placed chan struct{}
	if cmd.Placement == nil { // queued until resources free up
		placed = make(chan struct{})
		l.waiting[id] = placed
	}
	l.mu.Unlock()

	if placed != nil {
		select {
		case <-placed:
		case <-ctx.Done():
			l.mu.Lock()
			delete(l.waiting, id)
			l.applyLocked(&scheduler.KillActor{Actor: id, Cause: "spawn cancelled while waiting for resources"})
			l.mu.Unlock()
			return nil, fmt.Errorf("spawn %s: waiting for resources (%s): %w", label, spec.Resources, ctx.Err())
		}
	}

	l.mu.Lock()
	a := l.state.Actor(id)
	if a == nil || a.Node == "" {
		// It will never be placed: its placement group was removed, or its
		// hard-affinity node is gone.
		cause := "forgotten by the cluster"
		if a != nil {
			cause = a.DeathCause
		}
		l.mu.Unlock()
		return nil, fmt.Errorf("spawn %s: %w", label, &actors.ActorDiedError{Actor: label, Cause: cause})
	}
	gpus := scheduler.GPUIndices(a.GPUs)
	info := actors.ActorInfo{ID: string(id), Name: spec.Name, Node: string(a.Node), GPUs: gpus,
		GPUUUIDs: gpuUUIDs(l.inv.Devices(), gpus), SimulatedGPUs: len(gpus) > 0 && l.inv.Simulated()}
	if g := a.Spec.Request.Group; g != "" {
		info.PlacementGroup, info.Bundle = string(g), a.Bundle
	}
	l.mu.Unlock()
	la := &localActor{l: l, id: id, spec: spec}
	inst, err := actors.NewInstance(ctx, spec, info, actors.InstanceHooks{Died: la.died})
	if err != nil {
		l.mu.Lock()
		l.applyLocked(&scheduler.KillActor{Actor: id, Cause: "constructor failed: " + err.Error()})
		l.mu.Unlock()
		return nil, err
	}
	la.inst = inst
	l.mu.Lock()
	if st := l.state.Actor(id); st == nil || st.State == scheduler.ActorDead {
		// Its placement group was removed while the constructor ran.
		cause := "forgotten by the cluster"
		if st != nil {
			cause = st.DeathCause
		}
		l.mu.Unlock()
		inst.Kill(cause)
		return nil, fmt.Errorf("spawn %s: %w", label, &actors.ActorDiedError{Actor: label, Cause: cause})
	}
	l.applyLocked(&scheduler.ActorStarted{Actor: id, Address: "in-process"})
	l.actors[id] = la
	closed := l.closed
	l.mu.Unlock()
	if closed {
		inst.Kill("cluster shut down")
		return nil, fmt.Errorf("spawn %s: %w", label, ErrShutdown)
	}
	return la, nil
}

// ErrShutdown: the runtime was shut down.
var ErrShutdown = api.ErrShutdown

// applyLocked applies a command and, when it freed resources, places the
// actors waiting for them. The embedded cluster's commands are built from
// its own state, so a refusal is a bug; it is reported, not hidden.
func (l *Cluster) applyLocked(c scheduler.Command) {
	at := l.now().UnixNano()
	switch c := c.(type) {
	case *scheduler.KillActor:
		c.At = at
	case *scheduler.ActorStarted:
		c.At = at
	case *scheduler.RemovePlacementGroup:
		c.At = at
	}
	if err := l.state.Apply(c); err != nil {
		panic(fmt.Sprintf("runtime: embedded cluster refused its own command %T: %v", c, err))
	}
	if _, ok := c.(*scheduler.RemovePlacementGroup); ok {
		l.groupsChanged() // wakes the Waits on the removed group
	}
	groups := false
	switch c.(type) {
	case *scheduler.KillActor, *scheduler.RemovePlacementGroup: // resources freed
		groups = l.groupWaits()
		if len(l.waiting) == 0 && !groups {
			return
		}
	default:
		return
	}
	cmds, _ := l.planner.PlanPending(l.state, at)
	for _, pc := range cmds {
		if err := l.state.Apply(pc); err != nil {
			panic(fmt.Sprintf("runtime: embedded cluster refused its own placement: %v", err))
		}
	}
	// Wake the spawns that were placed or will never be (dead: their group
	// was removed), and whoever waits for a group.
	for id, ch := range l.waiting {
		if a := l.state.Actor(id); a == nil || a.Node != "" || a.State == scheduler.ActorDead {
			delete(l.waiting, id)
			close(ch)
		}
	}
	if groups || len(cmds) > 0 {
		l.groupsChanged()
	}
}

// died releases a dead actor's resources and name.
func (a *localActor) died(d *actors.ActorDiedError) {
	collective.Forget(string(a.id)) // its collective groups' peers see it lost at once
	l := a.l
	l.mu.Lock()
	delete(l.actors, a.id)
	if d.Restarts > 0 {
		l.deadRestarts[a.id] = d.Restarts
	}
	if st := l.state.Actor(a.id); st != nil && st.State != scheduler.ActorDead {
		l.applyLocked(&scheduler.KillActor{Actor: a.id, Cause: d.Cause})
	}
	l.mu.Unlock()
}

// GetActor implements actors.Runtime.
func (l *Cluster) GetActor(ctx context.Context, name string) (actors.Ref, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.state.ActorByName("", name); st != nil {
		if a := l.actors[st.Spec.ID]; a != nil {
			return a, nil
		}
	}
	return nil, fmt.Errorf("get actor %q: %w", name, actors.ErrNotFound)
}

// PutObject implements actors.ObjectPutter. Every actor of the embedded
// cluster runs in this process, so the value stays where it is: the
// promise holds the bytes (no copy) and is freed by the garbage collector.
func (l *Cluster) PutObject(ctx context.Context, data []byte) (*actors.Promise, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrShutdown
	}
	p := actors.NewPromise()
	p.Resolve(data, nil)
	return p, nil
}

// Status implements runtime.Runtime.
func (l *Cluster) Status(ctx context.Context) (api.Status, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var st api.Status
	for _, n := range l.state.Nodes() {
		ns := api.NodeStatus{ID: string(n.ID), Address: n.Address, Role: "embedded", State: "alive",
			Total: api.FromResources(n.Total), Used: api.FromResources(n.Total.Sub(n.Free)), Simulated: l.inv.Simulated()}
		for _, g := range n.GPUs {
			ns.GPUs = append(ns.GPUs, api.GPUStatus{Index: g.Index, Used: 1 - g.Free})
		}
		st.Nodes = append(st.Nodes, ns)
	}
	for _, a := range l.state.Actors() {
		as := api.ActorStatus{ID: string(a.Spec.ID), Name: a.Spec.Name, Type: a.Spec.Class, State: a.State.String(),
			Node: string(a.Node), GPUs: scheduler.GPUIndices(a.GPUs), Resources: api.FromResources(a.Spec.Request.Resources),
			Restarts: a.Restarts, Death: a.DeathCause}
		if a.State == scheduler.ActorPending {
			as.Death = a.PendingReason
		}
		if la := l.actors[a.Spec.ID]; la != nil && la.inst != nil {
			as.Restarts = la.inst.Info().Restarts // restarts happen in place here
		} else if n, ok := l.deadRestarts[a.Spec.ID]; ok {
			as.Restarts = n
		}
		st.Actors = append(st.Actors, as)
	}
	sort.Slice(st.Actors, func(i, j int) bool { return st.Actors[i].ID < st.Actors[j].ID })
	return st, nil
}

// Shutdown implements runtime.Runtime: every actor is killed.
func (l *Cluster) Shutdown(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	list := make([]*localActor, 0, len(l.actors))
	for _, a := range l.actors {
		list = append(list, a)
	}
	l.mu.Unlock()
	for _, a := range list {
		a.inst.Kill("cluster shut down")
	}
	return l.inv.Close()
}

// ID implements actors.Ref.
func (a *localActor) ID() string { return string(a.id) }

// Name implements actors.Ref.
func (a *localActor) Name() string { return a.spec.Name }

// TypeName implements actors.Ref.
func (a *localActor) TypeName() string { return a.spec.Type }

// Invoke implements actors.Ref. Calls forming collective groups go to
// package collective rather than to the actor.
func (a *localActor) Invoke(inv *actors.Invocation) {
	if !collective.Control(inv, a.inst) {
		a.inst.Invoke(inv)
	}
}

// Kill implements actors.Ref.
func (a *localActor) Kill(ctx context.Context, reason string) error {
	a.inst.Kill(reason)
	return nil
}

// gpuUUIDs returns the UUIDs of the devices with the given indices (nil if
// any is unknown).
func gpuUUIDs(devs []gpu.DeviceInfo, idx []int) []string {
	if len(idx) == 0 {
		return nil
	}
	out := make([]string, len(idx))
	for i, x := range idx {
		for _, d := range devs {
			if d.Index == x {
				out[i] = d.UUID
			}
		}
		if out[i] == "" {
			return nil
		}
	}
	return out
}
