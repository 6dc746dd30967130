// Package scheduler is troupe's control-plane state machine and placement
// policy: pure, deterministic logic replicated through hashicorp/raft, with
// no networking (runtime wires raft, memberlist and gRPC on top).
//
// It holds three things:
//
//   - The resource model: Resources (milli-CPU, memory, whole or fractional
//     GPUs, custom resources with 1e-4 granularity) and nodes whose GPUs are
//     known by index and UUID, each with a free fraction, plus a pairwise
//     link-score matrix (ScoreNVLink per NVLink, PCIe scores down to
//     ScoreCrossCPU) supplied by the caller from NVML.
//   - State, the replicated cluster state (nodes, actors, placement groups,
//     named actors, jobs), changed only by Commands (a type byte plus a
//     msgpack body), and FSM, the state machine raft drives (through
//     runtime/cluster's adapter; this package imports no raft), with msgpack
//     snapshots.
//   - Planner, which the raft leader uses to decide placements BEFORE it
//     proposes a command: the decision (node, GPU indices, fractions, bundle)
//     travels inside the command and Apply only checks that it still fits,
//     so followers never re-decide and every server ends in the same state.
//
// Placement of an actor: PACK (default) puts it on the node left with the
// fewest whole free GPUs (best fit; fractions first share an already shared
// GPU) and, among those, on the one left with the least CPU and memory
// waste (free share after placement; up to 8 nodes compared, so a decision
// does not grow with the cluster), SPREAD on the node with the most free
// GPUs; node affinity (hard or soft) and a label selector narrow the
// choice. Hard affinity to a node that is dead or unknown fails at once;
// to one that is suspect or draining it waits, its reason naming the node,
// and fails (PlanPending kills it, naming the node) once the node is
// declared dead. A multi-GPU actor gets the GPU set
// with the best total pairwise link score (exhaustive for small sets such
// as 4 of 8, greedy with swap improvement beyond), ties going to the set
// that leaves the remaining GPUs best connected. Requests that cannot run
// now fail with ErrPending and a reason such as "no node has 4 free GPUs on
// one NVLink island; best: node-3 with 3"; requests that exceed every
// node fail at once with ErrInfeasible. Placement groups reserve bundles
// all-or-nothing with PACK, SPREAD, STRICT_PACK or STRICT_SPREAD; bundle i
// keeps a fixed node and fixed GPU indices recorded in the state, and
// actors placed in a bundle consume its reservation.
//
// Per-node indexes (nodes bucketed by whole free GPUs, in node-ID order)
// keep a decision from scanning every node; only the failure path, which
// names the closest node, is linear in the cluster size.
//
// # Use on the raft leader
//
//	fsm := scheduler.NewFSM()                  // cluster gives raftFSM{fsm} to raft.NewRaft
//	p := scheduler.Planner{}
//
//	// A node joins (from memberlist): commit its registration.
//	r.Apply(scheduler.MustEncode(&scheduler.RegisterNode{Node: info, At: now}), timeout)
//
//	// Spawn: decide under the read lock, then commit the decision.
//	var cmd *scheduler.CreateActor
//	var err error
//	fsm.Read(func(s *scheduler.State) { cmd, err = p.CreateActor(s, spec, now) })
//	if err != nil { return err }              // invalid or ErrInfeasible: fail at once
//	f := r.Apply(scheduler.MustEncode(cmd), timeout)
//	resp := f.Response().(*scheduler.Response) // resp.Err: refused (state moved on); re-plan
//	// cmd.Placement == nil: the actor is pending (cmd.PendingReason says why).
//
//	// A node is found dead: release it and re-place its actors and bundles.
//	fsm.Read(func(s *scheduler.State) { cmds, waiting, err = p.NodeDied(s, id, "gossip: dead", now) })
//	batch, _ := scheduler.NewBatch(cmds...)
//	r.Apply(scheduler.MustEncode(batch), timeout)
//
//	// Periodically, and whenever resources are released: place what waits.
//	fsm.Read(func(s *scheduler.State) { cmds, waiting = p.PlanPending(s, now) })
//
// Decisions and the commands built from them are pure functions of the
// state and the request (and Planner.Seed), so a new leader after failover
// decides from exactly the state the old one committed. Timestamps always
// come from commands; the state never reads a clock.
//
// Actor lifecycle: CreateActor (PENDING, placed or waiting) → ActorStarted
// (ALIVE) → ActorDied (RESTARTING while Restarts < MaxRestarts, resources
// released and re-placed by PlanPending; else DEAD). ActorStarted and
// ActorDied quote the incarnation (Actor.Restarts) so late reports about an
// earlier incarnation are refused. Draining a node (UpdateNodeState
// NodeDraining) stops new placements there; its actors leave as they die or
// are killed with KillActor{Restart: true} and are re-placed elsewhere.
//
// FSM applies entries one by one (ApplyEntry) or as committed together
// under one lock (ApplyEntries); its Response carries each command's error. The state
// remembers at most MaxDeadActors dead actors, forgetting the oldest.
// PlanPending and NodeDied plan on a deep copy of the state (milliseconds
// for a 1,000-node cluster), so call them from the leader loop, not per RPC.
// A leader that keeps its own planning copy brings it up to date with
// FSM.Journal (the commands applied since) instead of cloning again, and
// waits for state changes with FSM.Changed instead of polling.
//
// Benchmark helpers (SimCluster, SimNode, topology builders, ActorSpecN,
// GroupSpecN, PlanActorBatch) build realistic command streams for raft
// benchmarks in other packages.
package scheduler
