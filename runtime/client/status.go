package client

import "troupe/scheduler"

// ClusterStatus is a snapshot of a cluster for people and scripts, as seen
// by one server's copy of the committed state.
type ClusterStatus struct {
	// ReportedBy is the server whose state this is.
	ReportedBy string `msgpack:"by" json:"reported_by"`
	// Leader is the raft leader's node ID ("" while there is none).
	Leader string `msgpack:"leader" json:"leader"`
	// LeaderAddr is the leader's gRPC address.
	LeaderAddr string `msgpack:"leader_addr" json:"leader_address,omitempty"`
	// Term is the reporting server's raft term.
	Term uint64 `msgpack:"term" json:"term"`
	// AppliedIndex is the last raft index applied to the reported state.
	AppliedIndex uint64 `msgpack:"applied" json:"applied_index"`
	// GossipAlive is how many gossip members (this one included) the
	// reporting server sees alive.
	GossipAlive int `msgpack:"gossip" json:"gossip_alive"`
	// Servers is the raft configuration.
	Servers []RaftServer `msgpack:"servers" json:"servers"`
	// Nodes are the registered nodes, sorted by ID.
	Nodes []NodeView `msgpack:"nodes" json:"nodes"`
	// ActorsByState counts actors per state (PENDING, ALIVE, ...).
	ActorsByState map[string]int `msgpack:"by_state" json:"actors_by_state"`
	// Actors lists actors, sorted by ID: at most MaxStatusActors of them,
	// so a status always fits one message; ActorsOmitted counts the rest.
	Actors        []ActorView `msgpack:"actors" json:"actors"`
	ActorsOmitted int         `msgpack:"omitted,omitempty" json:"actors_omitted,omitempty"`
	// Groups lists placement groups, sorted by ID.
	Groups []GroupView `msgpack:"groups" json:"placement_groups"`
	// CatchingUp: the reporting server has not caught up with the leader
	// (a server restarted with its data dir replays the log), so what it
	// reports may be old or incomplete; KnownIndex is the index it is
	// catching up to (the leader's applied index, or with no leader known
	// the last index in its own log).
	CatchingUp bool   `msgpack:"catching_up,omitempty" json:"catching_up,omitempty"`
	KnownIndex uint64 `msgpack:"known,omitempty" json:"known_index,omitempty"`
}

// RaftServer is one member of the raft configuration.
type RaftServer struct {
	ID       string `msgpack:"id" json:"id"`
	Address  string `msgpack:"addr" json:"raft_address"`
	Suffrage string `msgpack:"suffrage" json:"suffrage"`
	Leader   bool   `msgpack:"leader" json:"leader"`
}

// NodeView is one node.
type NodeView struct {
	ID      string `msgpack:"id" json:"id"`
	Address string `msgpack:"addr" json:"address"`
	Role    string `msgpack:"role" json:"role"`
	// State is alive, suspect, draining, dead (lost) or drained (left
	// after troupe stop).
	State  string              `msgpack:"state" json:"state"`
	Total  scheduler.Resources `msgpack:"total" json:"total"`
	Used   scheduler.Resources `msgpack:"used" json:"used"`
	GPUs   []scheduler.GPU     `msgpack:"gpus,omitempty" json:"gpus,omitempty"`
	Labels map[string]string   `msgpack:"labels,omitempty" json:"labels,omitempty"`
	// Cause says why the node is not alive.
	Cause string `msgpack:"cause,omitempty" json:"cause,omitempty"`
	// UpdatedAt is when its state last changed (Unix nanoseconds).
	UpdatedAt int64 `msgpack:"updated,omitempty" json:"updated_at,omitempty"`
}

// NodeDrained is the NodeView state of a node that left after draining.
const NodeDrained = "drained"

// ActorView is one actor.
type ActorView struct {
	ID        string              `msgpack:"id" json:"id"`
	Namespace string              `msgpack:"ns,omitempty" json:"namespace,omitempty"`
	Name      string              `msgpack:"name,omitempty" json:"name,omitempty"`
	Class     string              `msgpack:"class,omitempty" json:"class,omitempty"`
	State     string              `msgpack:"state" json:"state"`
	Node      string              `msgpack:"node,omitempty" json:"node,omitempty"`
	GPUs      []int               `msgpack:"gpus,omitempty" json:"gpus,omitempty"`
	Resources scheduler.Resources `msgpack:"res" json:"resources"`
	Restarts  int                 `msgpack:"restarts" json:"restarts"`
	Death     string              `msgpack:"death,omitempty" json:"death,omitempty"`
	// Address is where the running actor's worker serves calls.
	Address string `msgpack:"addr,omitempty" json:"address,omitempty"`
	Pending string `msgpack:"pending,omitempty" json:"pending_reason,omitempty"`
	// Job is the job that created the actor.
	Job         string `msgpack:"job,omitempty" json:"job,omitempty"`
	MaxRestarts int    `msgpack:"maxrestarts,omitempty" json:"max_restarts,omitempty"`
	Detached    bool   `msgpack:"detached,omitempty" json:"detached,omitempty"`
	// Group and Bundle place the actor in a placement group's bundle.
	Group  string `msgpack:"group,omitempty" json:"placement_group,omitempty"`
	Bundle *int   `msgpack:"bundle,omitempty" json:"bundle,omitempty"`
	// CreatedAt and UpdatedAt are Unix nanoseconds of its creation and
	// last change (its death, for a dead actor).
	CreatedAt int64 `msgpack:"created,omitempty" json:"created_at,omitempty"`
	UpdatedAt int64 `msgpack:"updated,omitempty" json:"updated_at,omitempty"`
}

// GroupView is one placement group.
type GroupView struct {
	ID       string   `msgpack:"id" json:"id"`
	Name     string   `msgpack:"name,omitempty" json:"name,omitempty"`
	Strategy string   `msgpack:"strategy" json:"strategy"`
	State    string   `msgpack:"state" json:"state"`
	Bundles  []string `msgpack:"bundles" json:"bundles"` // "node-1 gpus=[0 1]" per bundle, "" while waiting
	Pending  string   `msgpack:"pending,omitempty" json:"pending_reason,omitempty"`
	// BundleResources is what each bundle reserves.
	BundleResources []scheduler.Resources `msgpack:"bres,omitempty" json:"bundle_resources,omitempty"`
	Job             string                `msgpack:"job,omitempty" json:"job,omitempty"`
	Detached        bool                  `msgpack:"detached,omitempty" json:"detached,omitempty"`
	CreatedAt       int64                 `msgpack:"created,omitempty" json:"created_at,omitempty"`
	UpdatedAt       int64                 `msgpack:"updated,omitempty" json:"updated_at,omitempty"`
}

// MaxStatusActors bounds the actors listed in a ClusterStatus.
const MaxStatusActors = 20000
