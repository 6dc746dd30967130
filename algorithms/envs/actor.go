package envs

import (
	"context"
	"errors"
	"fmt"

	"troupe/actors"
)

// HostTypeName is the actor type name the environment host is registered
// under.
const HostTypeName = "EnvHost"

func init() { actors.MustRegister(HostTypeName, NewHost) }

// ErrInstance reports a request on an environment instance that does not
// exist (never created, dropped, or swept away by a Reset) or a malformed
// batch request (mismatched lengths).
var ErrInstance = errors.New("envs: bad instance request")

// Ref names one environment instance of a Batch: the host (actor) holding
// it and its ID there. A LocalBatch has one host, 0.
type Ref struct {
	Host int `msgpack:"h"`
	ID   int `msgpack:"i"`
}

// State is what a sampler needs to know of an instance between calls.
type State struct {
	Turn    int  `msgpack:"t"`
	Done    bool `msgpack:"d"`
	Success bool `msgpack:"s"`
	// Next is the role that acts now in a Router environment ("" in one
	// whose roles all act in turn order).
	Next string `msgpack:"n,omitempty"`
}

// StateOf reads e's State.
func StateOf(e Env) State {
	st := State{Turn: e.Turn(), Done: e.Done(), Success: e.Success()}
	if r, ok := e.(Router); ok {
		st.Next = r.Next()
	}
	return st
}

// Acts reports whether role acts now in the instance of st: it is not
// done, and it is the role a Router routed the turn to (any role of a
// plain environment, whose roles act in turn order).
func (st State) Acts(role string) bool { return !st.Done && (st.Next == "" || st.Next == role) }

// Result is the outcome of one Step on an instance and the state after it.
type Result struct {
	Step  Step  `msgpack:"step"`
	State State `msgpack:"state"`
}

// Episodes describes the instances a Reset created, in seed order.
type Episodes struct {
	Refs   []Ref
	States []State
	Roles  []string // the common cast, in turn order
}

// Batch is a set of environment instances addressed by Ref and driven in
// batches: the shape the samplers (AT-GRPO tree sampling, JoyAgents-R1
// node-wise sampling) need, so that one call serves a whole turn of every
// episode. LocalBatch holds the instances in this process; Pool spreads
// them over environment host actors. Both give the same results for the
// same seeds and calls.
type Batch interface {
	// Reset drops every instance and creates one per seed.
	Reset(ctx context.Context, seeds []int64) (Episodes, error)
	// Observe returns role's observation of each instance.
	Observe(ctx context.Context, refs []Ref, role string) ([]string, error)
	// Step applies actions[i] for role to refs[i], in place.
	Step(ctx context.Context, refs []Ref, role string, actions []string) ([]Result, error)
	// Branch clones refs[i] once per action of actions[i] and steps each
	// clone with its action (tree branches); refs[i] itself is unchanged.
	// The clones live on the same host as their parent.
	Branch(ctx context.Context, refs []Ref, role string, actions [][]string) ([][]Ref, [][]Result, error)
	// Drop frees instances (abandoned branches). Unknown refs are ignored.
	Drop(ctx context.Context, refs []Ref) error
}

// instances is the store behind LocalBatch and Host: instances by ID.
type instances struct {
	newEnv func(i int, seed int64) (Env, error)
	byID   map[int]Env
	next   int
}

func (s *instances) get(id int) (Env, error) {
	e, ok := s.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: instance %d does not exist (never created, dropped, or reset)", ErrInstance, id)
	}
	return e, nil
}

func (s *instances) add(e Env) int {
	if s.byID == nil {
		s.byID = map[int]Env{}
	}
	id := s.next
	s.next++
	s.byID[id] = e
	return id
}

// reset replaces every instance with fresh ones; instance i gets seeds[i]
// and the factory's instance index first+i.
func (s *instances) reset(seeds []int64, first int) ([]int, []State, []string, error) {
	if s.newEnv == nil {
		return nil, nil, nil, fmt.Errorf("%w: this batch has no environment factory to reset with", ErrInstance)
	}
	if len(seeds) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: reset without seeds", ErrInstance)
	}
	es := make([]Env, len(seeds))
	for i, seed := range seeds {
		e, err := s.newEnv(first+i, seed)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("make instance %d (seed %d): %w", first+i, seed, err)
		}
		es[i] = e
	}
	roles, err := CommonRoles(es)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %v", ErrInstance, err)
	}
	s.byID, s.next = map[int]Env{}, 0
	ids := make([]int, len(es))
	states := make([]State, len(es))
	for i, e := range es {
		ids[i] = s.add(e)
		states[i] = StateOf(e)
	}
	return ids, states, roles, nil
}

func (s *instances) observe(ids []int, role string) ([]string, error) {
	out := make([]string, len(ids))
	for i, id := range ids {
		e, err := s.get(id)
		if err != nil {
			return nil, err
		}
		out[i] = e.Observe(role)
	}
	return out, nil
}

func (s *instances) step(ids []int, role string, actions []string) ([]Result, error) {
	if len(ids) != len(actions) {
		return nil, fmt.Errorf("%w: %d instances but %d actions", ErrInstance, len(ids), len(actions))
	}
	es := make([]Env, len(ids))
	for i, id := range ids {
		e, err := s.get(id)
		if err != nil {
			return nil, err
		}
		es[i] = e
	}
	out := make([]Result, len(ids))
	for i, e := range es {
		st := e.Step(role, actions[i])
		out[i] = Result{Step: st, State: StateOf(e)}
	}
	return out, nil
}

func (s *instances) branch(ids []int, role string, actions [][]string) ([][]int, [][]Result, error) {
	if len(ids) != len(actions) {
		return nil, nil, fmt.Errorf("%w: %d instances but %d action lists", ErrInstance, len(ids), len(actions))
	}
	es := make([]Env, len(ids))
	for i, id := range ids {
		e, err := s.get(id)
		if err != nil {
			return nil, nil, err
		}
		es[i] = e
	}
	outIDs := make([][]int, len(ids))
	outRes := make([][]Result, len(ids))
	for i, e := range es {
		outIDs[i] = make([]int, len(actions[i]))
		outRes[i] = make([]Result, len(actions[i]))
		for j, a := range actions[i] {
			c := e.Clone()
			st := c.Step(role, a)
			outIDs[i][j] = s.add(c)
			outRes[i][j] = Result{Step: st, State: StateOf(c)}
		}
	}
	return outIDs, outRes, nil
}

func (s *instances) drop(ids []int) int {
	n := 0
	for _, id := range ids {
		if _, ok := s.byID[id]; ok {
			delete(s.byID, id)
			n++
		}
	}
	return n
}

// LocalBatch is a Batch over instances in this process (the in-driver
// path). It is not safe for concurrent use.
type LocalBatch struct {
	s instances
}

var _ Batch = (*LocalBatch)(nil)

// NewLocalBatch returns an empty batch whose Reset makes instance i with
// newEnv(i, seed).
func NewLocalBatch(newEnv func(i int, seed int64) (Env, error)) *LocalBatch {
	return &LocalBatch{s: instances{newEnv: newEnv}}
}

// LocalOf wraps existing instances: es[i] becomes Ref{ID: i}, and is
// stepped in place. It returns the batch and the instances' Episodes; the
// batch cannot Reset.
func LocalOf(es []Env) (*LocalBatch, Episodes, error) {
	roles, err := CommonRoles(es)
	if err != nil {
		return nil, Episodes{}, fmt.Errorf("%w: %v", ErrInstance, err)
	}
	b := &LocalBatch{}
	ep := Episodes{Roles: roles}
	for _, e := range es {
		ep.Refs = append(ep.Refs, Ref{ID: b.s.add(e)})
		ep.States = append(ep.States, StateOf(e))
	}
	return b, ep, nil
}

// Env returns the instance behind ref (nil if there is none).
func (b *LocalBatch) Env(ref Ref) Env { return b.s.byID[ref.ID] }

// Len is the number of live instances.
func (b *LocalBatch) Len() int { return len(b.s.byID) }

// Reset implements Batch.
func (b *LocalBatch) Reset(_ context.Context, seeds []int64) (Episodes, error) {
	ids, states, roles, err := b.s.reset(seeds, 0)
	if err != nil {
		return Episodes{}, err
	}
	return Episodes{Refs: localRefs(ids), States: states, Roles: roles}, nil
}

// Observe implements Batch.
func (b *LocalBatch) Observe(_ context.Context, refs []Ref, role string) ([]string, error) {
	return b.s.observe(localIDs(refs), role)
}

// Step implements Batch.
func (b *LocalBatch) Step(_ context.Context, refs []Ref, role string, actions []string) ([]Result, error) {
	return b.s.step(localIDs(refs), role, actions)
}

// Branch implements Batch.
func (b *LocalBatch) Branch(_ context.Context, refs []Ref, role string, actions [][]string) ([][]Ref, [][]Result, error) {
	ids, res, err := b.s.branch(localIDs(refs), role, actions)
	if err != nil {
		return nil, nil, err
	}
	out := make([][]Ref, len(ids))
	for i := range ids {
		out[i] = localRefs(ids[i])
	}
	return out, res, nil
}

// Drop implements Batch.
func (b *LocalBatch) Drop(_ context.Context, refs []Ref) error {
	b.s.drop(localIDs(refs))
	return nil
}

func localIDs(refs []Ref) []int {
	ids := make([]int, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	return ids
}

func localRefs(ids []int) []Ref {
	refs := make([]Ref, len(ids))
	for i, id := range ids {
		refs[i] = Ref{ID: id}
	}
	return refs
}

// HostConfig builds an environment host actor: which environment (a name
// or preset, as for New) and its configuration.
type HostConfig struct {
	Env    string
	Config Config
}

// Host is the environment actor: it hosts a batch of instances of one
// environment, created by seed, and serves observations, steps, branch
// clones and drops as actor methods (the Batch operations, on host-local
// IDs). Pool drives several hosts as one Batch. Calls are serialised by the
// actor runtime.
type Host struct {
	cfg HostConfig
	s   instances
}

// NewHost builds a host (the actor constructor); it checks the environment
// name and configuration once.
func NewHost(_ context.Context, cfg HostConfig) (*Host, error) {
	name, ecfg, err := Resolve(cfg.Env, cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("environment host: %w", err)
	}
	h := &Host{cfg: cfg}
	h.s.newEnv = func(_ int, seed int64) (Env, error) { return New(name, ecfg, seed) }
	return h, nil
}

// ResetRequest asks a host for fresh instances, one per seed.
type ResetRequest struct {
	Seeds []int64
}

// ResetReply lists the new instances' IDs and states and the cast.
type ResetReply struct {
	IDs    []int
	States []State
	Roles  []string
}

// Reset drops every instance and creates one per seed.
func (h *Host) Reset(_ context.Context, req ResetRequest) (ResetReply, error) {
	ids, states, roles, err := h.s.reset(req.Seeds, 0)
	if err != nil {
		return ResetReply{}, err
	}
	return ResetReply{IDs: ids, States: states, Roles: roles}, nil
}

// ObserveRequest asks for role's observation of instances.
type ObserveRequest struct {
	IDs  []int
	Role string
}

// Observe returns role's observation of every instance.
func (h *Host) Observe(_ context.Context, req ObserveRequest) ([]string, error) {
	return h.s.observe(req.IDs, req.Role)
}

// StepRequest steps instances in place, IDs[i] with Actions[i].
type StepRequest struct {
	IDs     []int
	Role    string
	Actions []string
}

// Step applies one action per instance.
func (h *Host) Step(_ context.Context, req StepRequest) ([]Result, error) {
	return h.s.step(req.IDs, req.Role, req.Actions)
}

// BranchRequest clones IDs[i] once per action of Actions[i] and steps each
// clone with its action.
type BranchRequest struct {
	IDs     []int
	Role    string
	Actions [][]string
}

// BranchReply holds, per parent, the clones' IDs and step results.
type BranchReply struct {
	IDs     [][]int
	Results [][]Result
}

// Branch makes and steps the clones (the parents are unchanged).
func (h *Host) Branch(_ context.Context, req BranchRequest) (BranchReply, error) {
	ids, res, err := h.s.branch(req.IDs, req.Role, req.Actions)
	if err != nil {
		return BranchReply{}, err
	}
	return BranchReply{IDs: ids, Results: res}, nil
}

// Drop frees instances and returns how many existed.
func (h *Host) Drop(_ context.Context, ids []int) (int, error) { return h.s.drop(ids), nil }

// Len returns the number of live instances.
func (h *Host) Len(context.Context, struct{}) (int, error) { return len(h.s.byID), nil }
