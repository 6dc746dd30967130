package scheduler

import "fmt"

// Strategy is how an actor or a placement group's bundles are spread over
// nodes.
type Strategy uint8

// Strategies. Actors accept Pack and Spread; placement groups accept all four.
const (
	// Pack (the default) fills the node that leaves the least waste: the
	// fewest free GPUs after placement, so whole nodes stay free for large
	// requests. For a group, bundles go on as few nodes as possible.
	Pack Strategy = 0
	// Spread puts the request on the node with the most free GPUs (an actor)
	// or each bundle on a different node when possible (a group).
	Spread Strategy = 1
	// StrictPack puts every bundle of a group on one node, or fails.
	StrictPack Strategy = 2
	// StrictSpread puts every bundle of a group on a different node, or fails.
	StrictSpread Strategy = 3
)

// String returns the Ray-style name of the strategy.
func (s Strategy) String() string {
	switch s {
	case Pack:
		return "PACK"
	case Spread:
		return "SPREAD"
	case StrictPack:
		return "STRICT_PACK"
	case StrictSpread:
		return "STRICT_SPREAD"
	}
	return fmt.Sprintf("strategy(%d)", uint8(s))
}

// Affinity ties a request to one node.
type Affinity struct {
	// Node is the node the request should run on.
	Node NodeID `msgpack:"node"`
	// Soft lets the request go elsewhere (by its strategy) when Node cannot
	// take it; a hard affinity waits for Node or fails if Node cannot ever
	// hold it.
	Soft bool `msgpack:"soft,omitempty"`
}

// AnyBundle in Request.Bundle lets an actor use any bundle of its group.
const AnyBundle = -1

// Request is what placement needs to know about one actor.
type Request struct {
	// Resources is what the actor consumes while it is placed.
	Resources Resources `msgpack:"res"`
	// Strategy is Pack (default) or Spread.
	Strategy Strategy `msgpack:"strategy,omitempty"`
	// Affinity, when set, ties the actor to one node.
	Affinity *Affinity `msgpack:"affinity,omitempty"`
	// Labels is a hard selector: the node must carry every key with the same
	// value.
	Labels map[string]string `msgpack:"labels,omitempty"`
	// MinLinkScore, when positive, requires every pair of the actor's GPUs
	// to be linked at least this well (ScoreNVLink: NVLink only, for
	// example one NVLink island).
	MinLinkScore int `msgpack:"minlink,omitempty"`
	// Group, when set, places the actor inside a bundle of that placement
	// group, consuming the bundle's reservation instead of the node's.
	Group GroupID `msgpack:"group,omitempty"`
	// Bundle is the bundle index within Group, or AnyBundle to take any
	// bundle with room. Note the zero value means bundle 0.
	Bundle int `msgpack:"bundle,omitempty"`
}

// Validate checks the request's shape.
func (r Request) Validate() error {
	if err := r.Resources.Validate(); err != nil {
		return err
	}
	if r.Strategy != Pack && r.Strategy != Spread {
		return fmt.Errorf("%w: actor strategy must be PACK or SPREAD, got %v", ErrInvalid, r.Strategy)
	}
	if r.Affinity != nil && r.Affinity.Node == "" {
		return fmt.Errorf("%w: affinity with empty node", ErrInvalid)
	}
	if r.Group == "" && r.Bundle != 0 && r.Bundle != AnyBundle {
		return fmt.Errorf("%w: bundle %d given without a placement group", ErrInvalid, r.Bundle)
	}
	if r.Bundle < AnyBundle {
		return fmt.Errorf("%w: bundle index %d", ErrInvalid, r.Bundle)
	}
	if r.MinLinkScore < 0 {
		return fmt.Errorf("%w: negative MinLinkScore", ErrInvalid)
	}
	return nil
}

// Placement is the leader's decision for one actor: a node, the GPUs with
// the share of each, and the bundle when the actor is in a placement group.
type Placement struct {
	// Node is the chosen node.
	Node NodeID `msgpack:"node"`
	// GPUs are the devices given to the actor (empty for a CPU-only actor).
	GPUs []GPUAlloc `msgpack:"gpus,omitempty"`
	// Bundle is the bundle index used, or AnyBundle when not in a group.
	Bundle int `msgpack:"bundle"`
}

// String formats p as "node-3 gpus=[0 1]".
func (p Placement) String() string {
	s := string(p.Node)
	if len(p.GPUs) > 0 {
		s += fmt.Sprintf(" gpus=%v", GPUIndices(p.GPUs))
		if len(p.GPUs) == 1 && p.GPUs[0].Fraction < 1 {
			s += fmt.Sprintf("×%g", p.GPUs[0].Fraction)
		}
	}
	if p.Bundle != AnyBundle {
		s += fmt.Sprintf(" bundle=%d", p.Bundle)
	}
	return s
}

// ActorID names an actor uniquely in the cluster.
type ActorID string

// ActorState is an actor's lifecycle state.
type ActorState uint8

// Actor states.
const (
	// ActorPending: created, not yet running (placed or waiting for room).
	ActorPending ActorState = 1
	// ActorAlive: running.
	ActorAlive ActorState = 2
	// ActorRestarting: died with restarts left; being placed or started again.
	ActorRestarting ActorState = 3
	// ActorDead: gone for good; DeathCause says why.
	ActorDead ActorState = 4
)

// String returns the Ray-style name of the state.
func (s ActorState) String() string {
	switch s {
	case ActorPending:
		return "PENDING"
	case ActorAlive:
		return "ALIVE"
	case ActorRestarting:
		return "RESTARTING"
	case ActorDead:
		return "DEAD"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ActorSpec is everything the control plane knows about an actor to create.
type ActorSpec struct {
	// ID is the unique actor ID (chosen by the caller, for example a UUID).
	ID ActorID `msgpack:"id"`
	// Namespace and Name, when Name is set, register the actor under a
	// unique name within the namespace while it is not dead.
	Namespace string `msgpack:"ns,omitempty"`
	// Name is the actor's optional unique name in its namespace.
	Name string `msgpack:"name,omitempty"`
	// Class is the registered actor type name, for display and for the
	// worker that starts it.
	Class string `msgpack:"class,omitempty"`
	// JobID is the job that created the actor; non-detached actors die
	// with their job.
	JobID JobID `msgpack:"job,omitempty"`
	// Detached actors outlive their job.
	Detached bool `msgpack:"detached,omitempty"`
	// MaxRestarts is how many times the actor is restarted after dying
	// (-1: without limit).
	MaxRestarts int `msgpack:"maxrestarts,omitempty"`
	// Request is what placement needs.
	Request Request `msgpack:"req"`
	// Args is the opaque encoded constructor argument, kept so a restart
	// can rebuild the actor.
	Args []byte `msgpack:"args,omitempty"`
}

// Validate checks the spec's shape.
func (s ActorSpec) Validate() error {
	if s.ID == "" {
		return fmt.Errorf("%w: actor with empty ID", ErrInvalid)
	}
	if s.MaxRestarts < -1 {
		return fmt.Errorf("%w: actor %s MaxRestarts %d (use -1 for unlimited)", ErrInvalid, s.ID, s.MaxRestarts)
	}
	if err := s.Request.Validate(); err != nil {
		return fmt.Errorf("actor %s: %w", s.ID, err)
	}
	return nil
}

// Actor is an actor's committed state.
type Actor struct {
	// Spec is the actor as created.
	Spec ActorSpec `msgpack:"spec"`
	// State is the lifecycle state.
	State ActorState `msgpack:"state"`
	// Node is where the actor is placed ("" while waiting for placement).
	Node NodeID `msgpack:"node,omitempty"`
	// GPUs are the devices given to the actor on Node.
	GPUs []GPUAlloc `msgpack:"gpus,omitempty"`
	// Bundle is the bundle index used within Spec.Request.Group, or AnyBundle.
	Bundle int `msgpack:"bundle"`
	// Address is where the running actor's worker listens (from ActorStarted).
	Address string `msgpack:"addr,omitempty"`
	// Restarts is how many restarts have been used; it is also the
	// incarnation number that ActorStarted and ActorDied must quote, and
	// the incarnation's epoch (fencing token): committed before the
	// incarnation starts, larger with every restart, never reused
	// (actors.ActorInfo.Epoch; the wire, the object stores and the
	// drivers refuse an older one).
	Restarts int `msgpack:"restarts"`
	// DeathCause says why the actor died (last death when restarting).
	DeathCause string `msgpack:"cause,omitempty"`
	// PendingReason says why the actor is waiting for placement.
	PendingReason string `msgpack:"pending,omitempty"`
	// DeathSeq orders dead actors by death (0 while not dead); the oldest
	// beyond MaxDeadActors are forgotten.
	DeathSeq uint64 `msgpack:"deathseq,omitempty"`
	// CreatedAt and UpdatedAt are command timestamps (Unix nanoseconds).
	CreatedAt int64 `msgpack:"created"`
	// UpdatedAt is the timestamp of the last change.
	UpdatedAt int64 `msgpack:"updated"`
}

// placed reports whether the actor holds resources on a node.
func (a *Actor) placed() bool { return a.Node != "" }

// needsPlacement reports whether the leader should find a place for a.
func (a *Actor) needsPlacement() bool {
	return a.Node == "" && (a.State == ActorPending || a.State == ActorRestarting)
}

// GroupID names a placement group uniquely in the cluster.
type GroupID string

// GroupState is a placement group's lifecycle state.
type GroupState uint8

// Placement group states.
const (
	// GroupPending: created but not yet reserved (no room yet).
	GroupPending GroupState = 1
	// GroupCreated: every bundle is reserved on a node.
	GroupCreated GroupState = 2
	// GroupRescheduling: a node holding some bundles died; those bundles
	// wait to be reserved again.
	GroupRescheduling GroupState = 3
)

// String returns the Ray-style name of the state.
func (s GroupState) String() string {
	switch s {
	case GroupPending:
		return "PENDING"
	case GroupCreated:
		return "CREATED"
	case GroupRescheduling:
		return "RESCHEDULING"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// GroupSpec describes a placement group to create.
type GroupSpec struct {
	// ID is the unique group ID.
	ID GroupID `msgpack:"id"`
	// Name is an optional display name.
	Name string `msgpack:"name,omitempty"`
	// JobID is the job that created the group; non-detached groups are
	// removed with their job.
	JobID JobID `msgpack:"job,omitempty"`
	// Detached groups outlive their job.
	Detached bool `msgpack:"detached,omitempty"`
	// Strategy is PACK, SPREAD, STRICT_PACK or STRICT_SPREAD.
	Strategy Strategy `msgpack:"strategy"`
	// Bundles are the resource sets to reserve; bundle i keeps index i.
	Bundles []Resources `msgpack:"bundles"`
	// MinLinkScore, when positive, requires every pair of GPUs within one
	// bundle to be linked at least this well.
	MinLinkScore int `msgpack:"minlink,omitempty"`
}

// Validate checks the spec's shape.
func (g GroupSpec) Validate() error {
	if g.ID == "" {
		return fmt.Errorf("%w: placement group with empty ID", ErrInvalid)
	}
	if len(g.Bundles) == 0 {
		return fmt.Errorf("%w: placement group %s has no bundles", ErrInvalid, g.ID)
	}
	if len(g.Bundles) > 1<<16 {
		return fmt.Errorf("%w: placement group %s has %d bundles", ErrInvalid, g.ID, len(g.Bundles))
	}
	if g.Strategy > StrictSpread {
		return fmt.Errorf("%w: placement group %s strategy %v", ErrInvalid, g.ID, g.Strategy)
	}
	if g.MinLinkScore < 0 {
		return fmt.Errorf("%w: placement group %s negative MinLinkScore", ErrInvalid, g.ID)
	}
	for i, b := range g.Bundles {
		if err := b.Validate(); err != nil {
			return fmt.Errorf("placement group %s bundle %d: %w", g.ID, i, err)
		}
		if b.IsZero() {
			return fmt.Errorf("%w: placement group %s bundle %d is empty", ErrInvalid, g.ID, i)
		}
	}
	return nil
}

// BundlePlacement is the leader's decision for one bundle.
type BundlePlacement struct {
	// Index is the bundle's index in the group.
	Index int `msgpack:"i"`
	// Node is the node the bundle is reserved on.
	Node NodeID `msgpack:"node"`
	// GPUs are the devices (and shares) reserved for the bundle.
	GPUs []GPUAlloc `msgpack:"gpus,omitempty"`
}

// Bundle is one reserved (or waiting) bundle of a placement group.
type Bundle struct {
	// Index is the bundle's fixed index in its group.
	Index int `msgpack:"i"`
	// Resources is what the bundle reserves.
	Resources Resources `msgpack:"res"`
	// Node is where it is reserved ("" while waiting).
	Node NodeID `msgpack:"node,omitempty"`
	// GPUs are the devices reserved, fixed for the bundle's life on Node.
	GPUs []GPUAlloc `msgpack:"gpus,omitempty"`
	// Free is what the bundle has not given to actors yet (GPUs = total
	// free share).
	Free Resources `msgpack:"free"`
	// GPUFree is the unallocated share of each reserved device.
	GPUFree []GPUAlloc `msgpack:"gpufree,omitempty"`
}

// PlacementGroup is a placement group's committed state.
type PlacementGroup struct {
	// Spec is the group as created.
	Spec GroupSpec `msgpack:"spec"`
	// State is the lifecycle state.
	State GroupState `msgpack:"state"`
	// Bundles holds bundle i at index i.
	Bundles []Bundle `msgpack:"bundles"`
	// PendingReason says why some bundles wait.
	PendingReason string `msgpack:"pending,omitempty"`
	// CreatedAt and UpdatedAt are command timestamps (Unix nanoseconds).
	CreatedAt int64 `msgpack:"created"`
	// UpdatedAt is the timestamp of the last change.
	UpdatedAt int64 `msgpack:"updated"`
}

// JobID names a job (one driver program's run).
type JobID string

// JobState is a job's lifecycle state.
type JobState uint8

// Job states.
const (
	// JobRunning: submitted and not finished.
	JobRunning JobState = 1
	// JobSucceeded: finished successfully.
	JobSucceeded JobState = 2
	// JobFailed: finished with an error.
	JobFailed JobState = 3
	// JobStopped: stopped by a user.
	JobStopped JobState = 4
)

// String returns the Ray-style name of the state.
func (s JobState) String() string {
	switch s {
	case JobRunning:
		return "RUNNING"
	case JobSucceeded:
		return "SUCCEEDED"
	case JobFailed:
		return "FAILED"
	case JobStopped:
		return "STOPPED"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// JobSpec describes a submitted job.
type JobSpec struct {
	// ID is the unique job ID.
	ID JobID `msgpack:"id"`
	// Namespace is the default namespace for the job's named actors.
	Namespace string `msgpack:"ns,omitempty"`
	// Entrypoint is the command or program that runs the driver.
	Entrypoint string `msgpack:"entry,omitempty"`
	// Metadata holds arbitrary key/values for display.
	Metadata map[string]string `msgpack:"meta,omitempty"`
}

// Job is a job's committed state.
type Job struct {
	// Spec is the job as submitted.
	Spec JobSpec `msgpack:"spec"`
	// State is the lifecycle state.
	State JobState `msgpack:"state"`
	// Message is the final status message.
	Message string `msgpack:"msg,omitempty"`
	// SubmittedAt and FinishedAt are command timestamps (Unix nanoseconds).
	SubmittedAt int64 `msgpack:"submitted"`
	// FinishedAt is when the job finished (0 while running).
	FinishedAt int64 `msgpack:"finished,omitempty"`
}
