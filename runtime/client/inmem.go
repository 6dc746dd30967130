package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/api"
	"troupe/scheduler"
)

// Inmem is a cluster's control plane in memory, behind the calls a driver
// makes: one scheduler.State changed by the same commands, and placed by
// the same planner, as a cluster leader's (like hashicorp/raft's
// InmemTransport, it lets the driver be tested without a network). Every
// command crosses EncodeCommand and DecodeCommand, and every refusal
// crosses runtime/api's codec, as over gRPC; lookups of unknown actors
// fail with gRPC's NotFound code, as a node answers.
//
// Nothing starts actors: a test plays the nodes' part with Started and
// Kill. Fail injects failures of calls (a node unreachable, a leader
// lost), so retries and backoff can be tested in a testing/synctest
// bubble, where Inmem's waits run on the bubble's clock.
type Inmem struct {
	planner scheduler.Planner
	every   time.Duration // the keep-alive interval it answers

	mu      sync.Mutex // guards the following
	state   *scheduler.State
	index   uint64                        // commands applied
	changed chan struct{}                 // closed and replaced on every change
	fail    func(method string) error     // injected failures; nil: none
	calls   map[string]int                // calls per method
	renewed map[scheduler.JobID]time.Time // last keep-alive per job
	hashes  map[string]bool               // uploaded binaries
	closed  bool
}

// NewInmem returns a control plane whose cluster has the given nodes,
// alive, answering keep-alives with the interval every (at least 1 ms).
func NewInmem(every time.Duration, nodes ...scheduler.NodeInfo) (*Inmem, error) {
	m := &Inmem{every: max(every, time.Millisecond), state: scheduler.NewState(), changed: make(chan struct{}),
		calls: map[string]int{}, renewed: map[scheduler.JobID]time.Time{}, hashes: map[string]bool{}}
	for _, n := range nodes {
		if err := m.state.Apply(&scheduler.RegisterNode{Node: n, At: time.Now().UnixNano()}); err != nil {
			return nil, fmt.Errorf("inmem control plane: node %s: %w", n.ID, err)
		}
	}
	return m, nil
}

// Fail makes every later call first ask f with the call's method name
// ("ApplyCommand", "WaitActors", ...); a non-nil error fails the call
// with it. Nil removes the hook.
func (m *Inmem) Fail(f func(method string) error) {
	m.mu.Lock()
	m.fail = f
	m.mu.Unlock()
}

// Calls reports how many calls of method were made (failed ones too).
func (m *Inmem) Calls(method string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[method]
}

// Renewed reports when job's lease was last renewed (zero: never).
func (m *Inmem) Renewed(job string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.renewed[scheduler.JobID(job)]
}

// Read runs f on the state (f must not keep it or change it).
func (m *Inmem) Read(f func(*scheduler.State)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m.state)
}

// Started plays a node that started the placed actor id at addr.
func (m *Inmem) Started(id, addr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.state.Actor(scheduler.ActorID(id))
	if a == nil {
		return fmt.Errorf("inmem control plane: start %s: %w", id, scheduler.ErrNotFound)
	}
	return m.applyLocked(&scheduler.ActorStarted{Actor: a.Spec.ID, Incarnation: a.Restarts, Address: addr, At: time.Now().UnixNano()})
}

// Kill plays a node on which actor id died (restart: within its
// MaxRestarts).
func (m *Inmem) Kill(id, cause string, restart bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applyLocked(&scheduler.KillActor{Actor: scheduler.ActorID(id), Cause: cause, Restart: restart, At: time.Now().UnixNano()})
}

// call counts a call and returns its injected failure, if any.
func (m *Inmem) call(method string) error {
	m.mu.Lock()
	m.calls[method]++
	f, closed := m.fail, m.closed
	m.mu.Unlock()
	if closed {
		return status.Error(codes.Canceled, "inmem control plane: client closed")
	}
	if f != nil {
		return f(method)
	}
	return nil
}

// applyLocked applies c as a leader commits it (encoded, then decoded),
// then places the actors and groups that wait for room (m.mu held).
func (m *Inmem) applyLocked(c scheduler.Command) error {
	b, err := scheduler.EncodeCommand(c)
	if err != nil {
		return err
	}
	if c, err = scheduler.DecodeCommand(b); err != nil {
		return err
	}
	if err := m.state.Apply(c); err != nil {
		return api.Encode(err).AsError() // as the FSM's verdict crosses to a client
	}
	m.index++
	cmds, _ := m.planner.PlanPending(m.state, time.Now().UnixNano())
	for _, pc := range cmds {
		if err := m.state.Apply(pc); err != nil {
			return fmt.Errorf("inmem control plane: planned %T refused: %w", pc, err)
		}
		m.index++
	}
	close(m.changed)
	m.changed = make(chan struct{})
	return nil
}

// wait calls done on the state until it reports finished, the timeout
// passes or ctx ends (then it calls done once more with final set).
func (m *Inmem) wait(ctx context.Context, timeout time.Duration, done func(s *scheduler.State, final bool) bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		m.mu.Lock()
		if done(m.state, false) {
			m.mu.Unlock()
			return
		}
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ch:
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		m.mu.Lock()
		done(m.state, true)
		m.mu.Unlock()
		return
	}
}

// Info implements the driver's control plane.
func (m *Inmem) Info(ctx context.Context) (*InfoResponse, error) {
	if err := m.call("Info"); err != nil {
		return nil, err
	}
	return &InfoResponse{NodeID: "inmem", Role: "head", GRPCAddr: "inmem"}, nil
}

// ApplyCommand commits cmd; the state machine's refusal is the error.
func (m *Inmem) ApplyCommand(ctx context.Context, cmd scheduler.Command) (uint64, error) {
	if err := m.call("ApplyCommand"); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.applyLocked(cmd); err != nil {
		return 0, err
	}
	return m.index, nil
}

// CreateActors places and commits actors, one result per spec.
func (m *Inmem) CreateActors(ctx context.Context, specs []scheduler.ActorSpec) ([]CreateResult, error) {
	if err := m.call("CreateActors"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]CreateResult, len(specs))
	for i, spec := range specs {
		cmd, err := m.planner.CreateActor(m.state, spec, time.Now().UnixNano())
		if err == nil {
			err = m.applyLocked(cmd)
		}
		if err != nil {
			out[i].Err = api.Encode(err)
			continue
		}
		out[i] = CreateResult{Placement: cmd.Placement, Pending: cmd.PendingReason, Index: m.index}
	}
	return out, nil
}

// Status returns the nodes and actors.
func (m *Inmem) Status(ctx context.Context) (*ClusterStatus, error) {
	if err := m.call("Status"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &ClusterStatus{ReportedBy: "inmem", Leader: "inmem", AppliedIndex: m.index, ActorsByState: map[string]int{}}
	for _, n := range m.state.Nodes() {
		out.Nodes = append(out.Nodes, NodeView{ID: string(n.ID), Address: n.Address, State: n.State.String(),
			Total: n.Total.Clone(), Used: n.Total.Sub(n.Free), GPUs: append([]scheduler.GPU(nil), n.GPUs...)})
	}
	for _, a := range m.state.Actors() {
		out.ActorsByState[a.State.String()]++
		out.Actors = append(out.Actors, inmemView(a))
	}
	return out, nil
}

// inmemView is an actor's view, as a node reports it.
func inmemView(a *scheduler.Actor) ActorView {
	v := ActorView{ID: string(a.Spec.ID), Namespace: a.Spec.Namespace, Name: a.Spec.Name, Class: a.Spec.Class, State: a.State.String(),
		Node: string(a.Node), GPUs: scheduler.GPUIndices(a.GPUs), Resources: a.Spec.Request.Resources.Clone(), Restarts: a.Restarts,
		Death: a.DeathCause, Address: a.Address, Pending: a.PendingReason, Job: string(a.Spec.JobID), MaxRestarts: a.Spec.MaxRestarts,
		Group: string(a.Spec.Request.Group), CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
	if a.Spec.Request.Group != "" {
		b := a.Bundle
		v.Bundle = &b
	}
	return v
}

// GetActor returns a live named actor.
func (m *Inmem) GetActor(ctx context.Context, namespace, name string) (*ActorView, error) {
	if err := m.call("GetActor"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.state.ActorByName(namespace, name); a != nil && a.State != scheduler.ActorDead {
		v := inmemView(a)
		return &v, nil
	}
	return nil, status.Errorf(codes.NotFound, "no live actor named %q in namespace %q", name, namespace)
}

// GetActorByID returns the actor with that ID, dead or alive.
func (m *Inmem) GetActorByID(ctx context.Context, id string) (*ActorView, error) {
	if err := m.call("GetActorByID"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := m.state.Actor(scheduler.ActorID(id)); a != nil {
		v := inmemView(a)
		return &v, nil
	}
	return nil, status.Errorf(codes.NotFound, "no actor with ID %q", id)
}

// WaitActor waits up to timeout until the actor is dead, or alive with an
// address and at least minRestarts restarts.
func (m *Inmem) WaitActor(ctx context.Context, id string, minRestarts int, timeout time.Duration) (*ActorView, error) {
	if err := m.call("WaitActor"); err != nil {
		return nil, err
	}
	var v *ActorView
	m.wait(ctx, timeout, func(s *scheduler.State, final bool) bool {
		a := s.Actor(scheduler.ActorID(id))
		if a == nil {
			v = nil
			return true
		}
		av := inmemView(a)
		v = &av
		return a.State == scheduler.ActorDead || a.State == scheduler.ActorAlive && a.Address != "" && a.Restarts >= minRestarts
	})
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "no actor with ID %q", id)
	}
	return v, nil
}

// WaitActors waits up to timeout until one of the actors is dead or alive
// with an address, or unknown.
func (m *Inmem) WaitActors(ctx context.Context, ids []string, timeout time.Duration) (*WaitActorsResponse, error) {
	if err := m.call("WaitActors"); err != nil {
		return nil, err
	}
	out := new(WaitActorsResponse)
	m.wait(ctx, timeout, func(s *scheduler.State, final bool) bool {
		*out = WaitActorsResponse{}
		for _, id := range ids {
			switch a := s.Actor(scheduler.ActorID(id)); {
			case a == nil:
				out.NotFound = append(out.NotFound, id)
			case a.State == scheduler.ActorDead || a.State == scheduler.ActorAlive && a.Address != "":
				out.Done = append(out.Done, inmemView(a))
			}
		}
		return len(out.Done) > 0 || len(out.NotFound) > 0
	})
	return out, nil
}

// KeepAlive renews the jobs' leases and reports those that ended.
func (m *Inmem) KeepAlive(ctx context.Context, jobs ...string) (*KeepAliveResponse, error) {
	if err := m.call("KeepAlive"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &KeepAliveResponse{Every: m.every}
	for _, id := range jobs {
		why := ""
		switch j := m.state.Job(scheduler.JobID(id)); {
		case j == nil:
			why = "UNKNOWN: no such job"
		case j.State != scheduler.JobRunning:
			why = j.State.String() + ": " + j.Message
		default:
			m.renewed[j.Spec.ID] = time.Now()
			continue
		}
		if out.Ended == nil {
			out.Ended = map[string]string{}
		}
		out.Ended[id] = why
	}
	return out, nil
}

// CommitPlacementGroups creates and removes placement groups.
func (m *Inmem) CommitPlacementGroups(ctx context.Context, create []scheduler.GroupSpec, remove []scheduler.GroupID) ([]CreateResult, error) {
	if err := m.call("CommitPlacementGroups"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []CreateResult
	for _, spec := range create {
		cmd, err := m.planner.CreateGroup(m.state, spec, time.Now().UnixNano())
		if err == nil {
			err = m.applyLocked(cmd)
		}
		if err != nil {
			out = append(out, CreateResult{Err: api.Encode(err)})
			continue
		}
		out = append(out, CreateResult{Bundles: cmd.Bundles, Pending: cmd.PendingReason, Index: m.index})
	}
	for _, id := range remove {
		var r CreateResult
		if err := m.applyLocked(&scheduler.RemovePlacementGroup{Group: id, At: time.Now().UnixNano()}); err != nil {
			r.Err = api.Encode(err)
		}
		out = append(out, r)
	}
	return out, nil
}

// PlacementGroup returns a copy of the group (nil when there is none),
// waiting up to wait until it is created or gone.
func (m *Inmem) PlacementGroup(ctx context.Context, id scheduler.GroupID, wait time.Duration) (*scheduler.PlacementGroup, error) {
	if err := m.call("PlacementGroup"); err != nil {
		return nil, err
	}
	var g *scheduler.PlacementGroup
	m.wait(ctx, wait, func(s *scheduler.State, final bool) bool {
		g = nil
		sg := s.Group(id)
		if sg == nil {
			return true
		}
		c := *sg
		c.Bundles = append([]scheduler.Bundle(nil), sg.Bundles...)
		g = &c
		return wait <= 0 || sg.State == scheduler.GroupCreated
	})
	return g, nil
}

// UploadBinary records the binary; sent says it was not there yet.
func (m *Inmem) UploadBinary(ctx context.Context, path, hash string) (bool, error) {
	if err := m.call("UploadBinary"); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sent := !m.hashes[hash]
	m.hashes[hash] = true
	return sent, nil
}

// Close makes later calls fail.
func (m *Inmem) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}
