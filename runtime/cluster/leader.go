package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/vmihailenco/msgpack/v5"

	"troupe/scheduler"

	"troupe/runtime/api"

	"troupe/runtime/transport"
)

func sortServers(s []raft.Server) { sort.Slice(s, func(i, j int) bool { return s[i].ID < s[j].ID }) }

// leaderLoop runs the leader's duties while this server leads.
func (n *Node) leaderLoop() {
	stop := context.CancelFunc(func() {})
	defer func() { stop() }()
	for {
		select {
		case <-n.ctx.Done():
			return
		case leading := <-n.raft.LeaderCh():
			stop()
			stop = func() {}
			if leading {
				ctx, cancel := context.WithCancel(n.ctx)
				stop = cancel
				n.wg.Add(1)
				go func() { defer n.wg.Done(); n.lead(ctx) }()
			}
		}
	}
}

// lead is one term of leadership: a barrier first (so the FSM holds every
// committed entry before the leader decides anything), then the placer and
// the reconcile loop.
func (n *Node) lead(ctx context.Context) {
	for {
		err := n.await(n.raft.Barrier(5 * time.Second))
		if err == nil {
			break
		}
		n.log.Warn("leader barrier failed", "err", err)
		if !n.isLeader() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	n.log.Info("acting as raft leader", "term", n.raft.Stats()["term"])
	n.leaderReady.Store(true)
	n.caughtUp.Store(true)
	defer n.leaderReady.Store(false)
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.placer(ctx) }()
	tick := time.NewTicker(n.cfg.Timing.Reconcile)
	defer tick.Stop()
	for {
		n.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-n.trigger:
		}
	}
}

// goneGrace is how long a leader's own gossip view must have run before a
// registered node it has never heard of is declared dead.
func (n *Node) goneGrace() time.Duration {
	t := n.cfg.Timing
	return 10*t.ProbeInterval + 2*time.Second
}

// reconcile brings the committed state in line with gossip: servers that
// gossip are raft voters, nodes gossip says are gone are dead, nodes it
// says are alive (again) are alive, and whatever waits for placement is
// placed if it now fits.
func (n *Node) reconcile(ctx context.Context) {
	ms := n.members.snapshot()
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		in := map[raft.ServerID]raft.ServerAddress{}
		for _, s := range f.Configuration().Servers {
			in[s.ID] = s.Address
		}
		for id, m := range ms {
			if m.state != memberlist.StateAlive || !m.meta.Role.isServer() || m.meta.Raft == "" {
				continue
			}
			// A server missing from the configuration is added; one that
			// came back with a new address (a restarted container or pod
			// with a new IP) gets it updated: AddVoter on a known voter
			// changes only its address.
			have, known := in[raft.ServerID(id)]
			if known && (have == raft.ServerAddress(m.meta.Raft) || id == n.cfg.NodeID) {
				continue
			}
			err := n.await(n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(m.meta.Raft), 0, 5*time.Second))
			switch {
			case err != nil:
				n.log.Warn("add raft voter failed", "server", id, "err", err)
			case known:
				n.log.Info("updated raft voter address", "server", id, "old", have, "raft", m.meta.Raft)
			default:
				n.log.Info("added raft voter", "server", id, "raft", m.meta.Raft)
			}
		}
	}
	now := time.Now()
	var cmds []scheduler.Command
	n.fsm.Read(func(s *scheduler.State) {
		for _, nd := range s.Nodes() {
			m, ok := ms[string(nd.ID)]
			gone := (ok && m.state != memberlist.StateAlive) || (!ok && now.Sub(n.startedAt) > n.goneGrace())
			// A lost node is suspect first, dead after suspectGrace
			// (fence.go): epochs fence its actors off from then on.
			want, cause := nodeVerdict(nd, ok, m.state, gone, now, n.suspectGrace())
			if want == 0 {
				continue
			}
			cmds = append(cmds, &scheduler.UpdateNodeState{Node: nd.ID, State: want, Cause: cause, At: now.UnixNano()})
		}
	})
	for _, c := range cmds {
		u := c.(*scheduler.UpdateNodeState)
		if _, err := n.commitLocal(c); err != nil {
			n.log.Warn("commit node state failed", "node", u.Node, "state", u.State, "err", err)
			return
		}
		n.log.Info("node state committed", "node", u.Node, "state", u.State.String(), "cause", u.Cause)
	}
	// Place what waits (after node deaths, restarts need new places).
	var pend []scheduler.Command
	n.fsm.Read(func(s *scheduler.State) {
		if hasWaiting(s) {
			pend, _ = n.planner.PlanPending(s, now.UnixNano())
		}
	})
	if len(pend) > 0 {
		var batch scheduler.Batch
		for _, c := range pend {
			b, err := scheduler.EncodeCommand(c)
			if err != nil {
				n.log.Error("encode placement", "err", err)
				return
			}
			batch.Commands = append(batch.Commands, b)
		}
		if _, err := n.commitLocal(&batch); err != nil {
			n.log.Warn("commit pending placements failed", "err", err)
		}
	}
}

// hasWaiting reports whether any actor or group waits for placement (in
// O(nodes + groups): it runs at every reconcile under the FSM's read lock).
func hasWaiting(s *scheduler.State) bool { return s.HasWaiting() }

// commitLocal commits c on this node, which must be the leader.
func (n *Node) commitLocal(c scheduler.Command) (*ApplyResponse, error) {
	b, err := scheduler.EncodeCommand(c)
	if err != nil {
		return nil, err
	}
	resp, err := n.applyLocal(b)
	if err != nil {
		return nil, err
	}
	return resp, resp.Err.AsError()
}

// placeReq is a CreateActors call waiting for the placer, or placement
// group work (groups.go), decided by the same placer so actor and group
// decisions see each other.
type placeReq struct {
	specs  []scheduler.ActorSpec
	groups *groupWork // results follow the actors' in placeResult.results
	reply  chan placeResult
}

// size is how many results r gets.
func (r *placeReq) size() int { return len(r.specs) + r.groups.size() }

type placeResult struct {
	results []CreateResult
	err     error
}

// hasGroupWork reports whether any request of the batch carries group work.
func hasGroupWork(batch []*placeReq) bool {
	for _, r := range batch {
		if r.groups.size() > 0 {
			return true
		}
	}
	return false
}

// placeAttempts bounds how often a refused batch is planned again.
const placeAttempts = 3

// maxPlaceBatch bounds how many actors one raft entry creates.
const maxPlaceBatch = 1024

// placer decides and commits actor creations in batches: every request
// waiting when a batch starts goes into it, each decision seeing the ones
// before it, and the batch is one raft entry. It plans on a scratch copy of
// the state that it keeps between batches, applying what others committed
// in between from the FSM's journal (catchup.go), so the copy stays equal
// to the FSM's state without cloning it after every commit.
func (n *Node) placer(ctx context.Context) {
	var scratch *scheduler.State
	var scratchIdx uint64
	for {
		var batch []*placeReq
		select {
		case <-ctx.Done():
			return
		case r := <-n.placeCh:
			batch = append(batch, r)
		}
		count := batch[0].size()
	more:
		for count < maxPlaceBatch {
			select {
			case r := <-n.placeCh:
				batch = append(batch, r)
				count += r.size()
			default:
				break more
			}
		}
		// A batch the FSM refuses because something else committed between
		// the plan and the batch (a node turned suspect under the plan) is
		// planned again on the newer state, at most placeAttempts times.
		var results [][]CreateResult
		var err error
		for attempt := 1; ; attempt++ {
			var applied uint64
			n.fsm.Read(func(s *scheduler.State) { applied = s.AppliedIndex() })
			if scratch != nil && applied != scratchIdx && !catchUp(n.fsm, scratch, scratchIdx, applied, false) {
				scratch = nil
			}
			if scratch == nil {
				n.fsm.Read(func(s *scheduler.State) {
					applied = s.AppliedIndex()
					scratch = s.Clone()
				})
			}
			base := applied // scratch equals the FSM's state at base
			retryPlan := false
			at := time.Now().UnixNano()
			type slot struct{ req, i int }
			var cmds [][]byte
			var slots []slot
			results = make([][]CreateResult, len(batch))
			for ri, r := range batch {
				results[ri] = make([]CreateResult, r.size())
				for i, spec := range r.specs {
					res := &results[ri][i]
					if a := scratch.Actor(spec.ID); a != nil && sameSpec(&a.Spec, &spec) {
						// A retry of a create whose first attempt committed (its
						// outcome was lost with a leader change or a dropped
						// reply): report the committed actor, commit nothing.
						if a.Node != "" {
							res.Placement = &scheduler.Placement{Node: a.Node, GPUs: a.GPUs, Bundle: a.Bundle}
						} else {
							res.Pending = a.PendingReason
						}
						continue
					}
					c, err := n.planner.CreateActor(scratch, spec, at)
					if err == nil {
						err = scratch.Apply(c)
					}
					var b []byte
					if err == nil {
						b, err = scheduler.EncodeCommand(c)
					}
					if err != nil {
						res.Err = api.Encode(err)
						continue
					}
					res.Placement, res.Pending = c.Placement, c.PendingReason
					cmds = append(cmds, b)
					slots = append(slots, slot{ri, i})
				}
				for i := 0; i < r.groups.size(); i++ {
					if b := r.groups.plan(n, scratch, i, at, &results[ri][len(r.specs)+i]); b != nil {
						cmds = append(cmds, b)
						slots = append(slots, slot{ri, len(r.specs) + i})
					}
				}
			}
			err = nil
			if len(cmds) > 0 {
				var resp *ApplyResponse
				resp, err = n.applyLocal(mustEncode(&scheduler.Batch{Commands: cmds}))
				switch {
				case err != nil:
					scratch = nil
				case resp.Err != nil:
					scratch = nil // the FSM refused some: the scratch copy diverged
					// Creates are idempotent (sameSpec above); group work is
					// not retried.
					retryPlan = resp.Index > base+1 && !hasGroupWork(batch)
					for k, s := range slots {
						res := &results[s.req][s.i]
						res.Index = resp.Index
						if k < len(resp.BatchErrs) && resp.BatchErrs[k] != nil {
							*res = CreateResult{Index: resp.Index, Err: resp.BatchErrs[k]}
						} else if len(resp.BatchErrs) == 0 {
							*res = CreateResult{Index: resp.Index, Err: resp.Err}
						}
					}
				default:
					scratchIdx = resp.Index
					if !catchUp(n.fsm, scratch, base, resp.Index-1, true) {
						scratch = nil
					}
					for _, s := range slots {
						results[s.req][s.i].Index = resp.Index
					}
				}
			}
			if !retryPlan || attempt == placeAttempts {
				break
			}
		}
		for ri, r := range batch {
			r.reply <- placeResult{results: results[ri], err: err}
		}
	}
}

// sameSpec reports whether two actor specs are identical (by their
// encoding with sorted map keys).
func sameSpec(a, b *scheduler.ActorSpec) bool {
	enc := func(s *scheduler.ActorSpec) ([]byte, error) {
		var buf bytes.Buffer
		e := msgpack.NewEncoder(&buf)
		e.SetSortMapKeys(true)
		err := e.Encode(s)
		return buf.Bytes(), err
	}
	ea, err1 := enc(a)
	eb, err2 := enc(b)
	return err1 == nil && err2 == nil && bytes.Equal(ea, eb)
}

func mustEncode(c scheduler.Command) []byte {
	b, err := scheduler.EncodeCommand(c)
	if err != nil {
		panic(fmt.Sprintf("cluster: encoding a %T built here failed: %v", c, err)) // cannot happen: the command was built from decodable parts
	}
	return b
}

// createLocal hands specs to the placer (this node must lead).
func (n *Node) createLocal(ctx context.Context, specs []scheduler.ActorSpec) ([]CreateResult, error) {
	return n.toPlacer(ctx, &placeReq{specs: specs, reply: make(chan placeResult, 1)})
}

// toPlacer hands r to the leader's placer and waits for its verdict. It
// waits for the placer while this node leads (the placer may be busy
// committing the previous batch, or still running the leader's barrier).
func (n *Node) toPlacer(ctx context.Context, r *placeReq) ([]CreateResult, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
send:
	for {
		select {
		case n.placeCh <- r:
			break send
		case <-tick.C:
			if !n.isLeader() {
				return nil, raft.ErrNotLeader // onLeader forwards to the new leader
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	select {
	case res := <-r.reply:
		return res.results, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CreateActors places and commits actors through the leader.
func (n *Node) CreateActors(ctx context.Context, specs []scheduler.ActorSpec) ([]CreateResult, error) {
	resp, err := n.control.createActors(ctx, &CreateActorsRequest{Specs: specs})
	if err != nil {
		return nil, transport.FromStatus(err)
	}
	return resp.Results, nil
}

var errEmpty = errors.New("no actor specs")
