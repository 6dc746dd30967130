package runtime

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sort"
	"strconv"
	"sync"

	"troupe/actors"
)

// localNodeID names the one node of the embedded cluster.
const localNodeID = "local"

// local is the embedded single-process cluster: one node that is control
// plane and worker at once. Actors are actors.Instances in this process;
// spawns that do not fit the free resources wait in arrival order.
type local struct {
	simulated bool

	mu      sync.Mutex
	pool    *pool
	nextID  uint64
	actors  map[string]*localActor // by ID, live and dead
	named   map[string]*localActor // live named actors
	waiters []*waiter              // spawns waiting for resources, FIFO
	closed  bool
}

// localActor is one actor of the embedded cluster.
type localActor struct {
	l    *local
	id   string
	spec actors.Spec
	inst *actors.Instance
	gpus []int

	mu       sync.Mutex
	state    string
	restarts int
	death    string
}

// waiter is a spawn waiting for resources.
type waiter struct {
	res   actors.ResourceSet
	ready chan []int // receives the GPU indices once resources are taken
}

func newLocal(cfg config) (*local, error) {
	total := actors.ResourceSet{CPUs: float64(goruntime.NumCPU()), MemoryBytes: machineMemory()}
	if cfg.overrideCPUs {
		total.CPUs = cfg.cpus
	}
	if cfg.overrideMem {
		total.MemoryBytes = cfg.memoryBytes
	}
	l := &local{actors: map[string]*localActor{}, named: map[string]*localActor{}}
	if cfg.simulateGPUs != "" {
		n, err := simulatedGPUCount(cfg.simulateGPUs)
		if err != nil {
			return nil, fmt.Errorf("init: %w", err)
		}
		total.GPUs = float64(n)
		l.simulated = true
	}
	if len(cfg.customRes) > 0 {
		total.Custom = cfg.customRes
	}
	if err := total.Validate(); err != nil {
		return nil, fmt.Errorf("init: node resources: %w", err)
	}
	l.pool = newPool(total)
	return l, nil
}

// simulatedGPUCount reads TROUPE_SIMULATE_GPUS: a count, or a profile name.
func simulatedGPUCount(v string) (int, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 || n > 1024 {
			return 0, fmt.Errorf("TROUPE_SIMULATE_GPUS=%q: count must be 0..1024", v)
		}
		return n, nil
	}
	if n, ok := simulatedProfileSizes[v]; ok {
		return n, nil
	}
	names := make([]string, 0, len(simulatedProfileSizes))
	for k := range simulatedProfileSizes {
		names = append(names, k)
	}
	sort.Strings(names)
	return 0, fmt.Errorf("TROUPE_SIMULATE_GPUS=%q: not a count or a known profile (%v)", v, names)
}

// simulatedProfileSizes are the GPU counts of the simulated profiles.
var simulatedProfileSizes = map[string]int{"dgx-h100": 8, "dgx-a100": 8, "2x4-nvlink": 8, "pcie-4": 4}

// SpawnActor implements actors.Runtime.
func (l *local) SpawnActor(ctx context.Context, spec actors.Spec) (actors.Ref, error) {
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
	if err := l.pool.infeasible(spec.Resources); err != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("spawn %s: %w", label, err)
	}
	if spec.Name != "" {
		if _, dup := l.named[spec.Name]; dup {
			l.mu.Unlock()
			return nil, fmt.Errorf("spawn %s: %w: an actor named %q is alive", label, actors.ErrDuplicate, spec.Name)
		}
	}
	var gpus []int
	ok := false
	if len(l.waiters) == 0 { // nobody queued ahead of us
		gpus, ok = l.pool.allocate(spec.Resources)
	}
	var w *waiter
	if !ok {
		w = &waiter{res: spec.Resources, ready: make(chan []int, 1)}
		l.waiters = append(l.waiters, w)
	}
	l.nextID++
	id := fmt.Sprintf("%08x", l.nextID)
	l.mu.Unlock()

	if w != nil {
		select {
		case gpus = <-w.ready:
		case <-ctx.Done():
			l.mu.Lock()
			select {
			case gpus = <-w.ready: // granted just now: give it back
				l.pool.release(spec.Resources, gpus)
				l.admitLocked()
			default:
				l.removeWaiterLocked(w)
			}
			l.mu.Unlock()
			return nil, fmt.Errorf("spawn %s: waiting for resources (%s): %w", label, spec.Resources, ctx.Err())
		}
	}

	a := &localActor{l: l, id: id, spec: spec, gpus: gpus, state: "ALIVE"}
	info := actors.ActorInfo{ID: id, Name: spec.Name, Node: localNodeID, GPUs: gpus}
	inst, err := actors.NewInstance(ctx, spec, info, actors.InstanceHooks{
		Restarted: func(n int, cause string) { a.mu.Lock(); a.restarts = n; a.mu.Unlock() },
		Died:      a.died,
	})
	if err != nil {
		l.mu.Lock()
		l.pool.release(spec.Resources, gpus)
		l.admitLocked()
		l.mu.Unlock()
		return nil, err
	}
	a.inst = inst
	l.mu.Lock()
	if spec.Name != "" {
		if _, dup := l.named[spec.Name]; dup { // lost a race for the name
			l.mu.Unlock()
			inst.Kill("name taken")
			return nil, fmt.Errorf("spawn %s: %w: an actor named %q is alive", label, actors.ErrDuplicate, spec.Name)
		}
		l.named[spec.Name] = a
	}
	l.actors[id] = a
	closed := l.closed
	l.mu.Unlock()
	if closed {
		inst.Kill("cluster shut down")
		return nil, fmt.Errorf("spawn %s: %w", label, ErrShutdown)
	}
	return a, nil
}

// ErrShutdown: the runtime was shut down.
var ErrShutdown = fmt.Errorf("runtime is shut down")

// admitLocked grants resources to waiting spawns, in arrival order, each
// that fits now.
func (l *local) admitLocked() {
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if gpus, ok := l.pool.allocate(w.res); ok {
			w.ready <- gpus
			continue
		}
		kept = append(kept, w)
	}
	clear(l.waiters[len(kept):])
	l.waiters = kept
}

func (l *local) removeWaiterLocked(w *waiter) {
	for i, x := range l.waiters {
		if x == w {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			return
		}
	}
}

// died releases a dead actor's resources and name.
func (a *localActor) died(d *actors.ActorDiedError) {
	a.mu.Lock()
	a.state, a.death = "DEAD", d.Cause
	a.mu.Unlock()
	l := a.l
	l.mu.Lock()
	if a.spec.Name != "" && l.named[a.spec.Name] == a {
		delete(l.named, a.spec.Name)
	}
	l.pool.release(a.spec.Resources, a.gpus)
	l.admitLocked()
	l.mu.Unlock()
}

// GetActor implements actors.Runtime.
func (l *local) GetActor(ctx context.Context, name string) (actors.Ref, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.named[name]
	if a == nil {
		return nil, fmt.Errorf("get actor %q: %w", name, actors.ErrNotFound)
	}
	return a, nil
}

// Status implements Runtime.
func (l *local) Status(ctx context.Context) (Status, error) {
	l.mu.Lock()
	node := NodeStatus{ID: localNodeID, Role: "embedded", State: "alive", Total: l.pool.total, Used: l.pool.used(), Simulated: l.simulated}
	for i, f := range l.pool.freeGPU {
		node.GPUs = append(node.GPUs, GPUStatus{Index: i, Used: 1 - f})
	}
	list := make([]*localActor, 0, len(l.actors))
	for _, a := range l.actors {
		list = append(list, a)
	}
	pending := len(l.waiters)
	l.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].id < list[j].id })
	st := Status{Nodes: []NodeStatus{node}}
	for _, a := range list {
		a.mu.Lock()
		st.Actors = append(st.Actors, ActorStatus{ID: a.id, Name: a.spec.Name, Type: a.spec.Type, State: a.state,
			Node: localNodeID, GPUs: a.gpus, Resources: a.spec.Resources, Restarts: a.restarts, Death: a.death})
		a.mu.Unlock()
	}
	for i := 0; i < pending; i++ {
		st.Actors = append(st.Actors, ActorStatus{State: "PENDING"})
	}
	return st, nil
}

// Shutdown implements Runtime: every actor is killed.
func (l *local) Shutdown(ctx context.Context) error {
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
	return nil
}

// ID implements actors.Ref.
func (a *localActor) ID() string { return a.id }

// Name implements actors.Ref.
func (a *localActor) Name() string { return a.spec.Name }

// TypeName implements actors.Ref.
func (a *localActor) TypeName() string { return a.spec.Type }

// Invoke implements actors.Ref.
func (a *localActor) Invoke(inv *actors.Invocation) { a.inst.Invoke(inv) }

// Kill implements actors.Ref.
func (a *localActor) Kill(ctx context.Context, reason string) error {
	a.inst.Kill(reason)
	return nil
}
