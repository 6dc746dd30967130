package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"troupe/actors"
	"troupe/runtime/worker"
	"troupe/scheduler"

	"troupe/runtime/api"
)

// hosted is an actor incarnation running in one of this node's workers.
type hosted struct {
	inc      int
	job      scheduler.JobID
	proc     *worker.Proc
	reported time.Time // when its start was last reported
}

// workerSet is the node's worker processes (one per job) and the actor
// incarnations they host.
type workerSet struct {
	n *Node

	// startProc starts a job's worker process (worker.Start; tests put
	// in a slow or failing one).
	startProc func(context.Context, worker.StartOptions, worker.Events) (*worker.Proc, error)

	mu    sync.Mutex
	procs map[scheduler.JobID]*worker.Proc
	// launching holds the worker process start in progress per job: it
	// runs without mu (it may take up to ReadyTimeout), and the job's
	// other starts wait for it instead of starting a second process.
	launching map[scheduler.JobID]*launch
	actors    map[scheduler.ActorID]hosted
	seen      map[string]bool // "id/inc" incarnations begun here and not yet ended
	// starting counts starts in progress per job; idleSince is when a
	// job's worker last had nothing to do (it exits after idleExit).
	starting  map[scheduler.JobID]int
	idleSince map[scheduler.JobID]time.Time
	closing   bool

	// The call counts each live worker reported last, and the sum of
	// those of workers that exited (worker_stats.go).
	statsMu      sync.Mutex
	lastCalls    map[*worker.Proc][]worker.CallStats
	retiredCalls []worker.CallStats

	// Start reports waiting to be committed, and whether a goroutine is
	// committing them (reportStarted).
	rmu       sync.Mutex
	reports   []*scheduler.ActorStarted
	reporting bool

	// fence is the self-fencing state (fence.go), guarded by mu.
	fence fenceState
}

// anonymousJob hosts actors created without a job ID.
const anonymousJob scheduler.JobID = "anonymous"

// idleExit is how long a job's worker process lingers with no actors (a
// restart soon after a death reuses it).
const idleExit = 2 * time.Second

func newWorkerSet(n *Node) *workerSet {
	return &workerSet{n: n, startProc: worker.Start, procs: map[scheduler.JobID]*worker.Proc{}, launching: map[scheduler.JobID]*launch{},
		actors: map[scheduler.ActorID]hosted{}, seen: map[string]bool{},
		starting: map[scheduler.JobID]int{}, idleSince: map[scheduler.JobID]time.Time{}, lastCalls: map[*worker.Proc][]worker.CallStats{},
		fence: fenceState{clock: contactClock{lease: n.fenceLease(), last: time.Now()}}}
}

// workerLoop starts what the committed state places on this node and ends
// what it no longer wants here. It wakes when the state changes: a server
// waits on its own state machine; a worker node long-polls a server
// (NodeActors with the last state index it saw), so a start does not wait
// for a polling tick. The scan for ended incarnations and idle workers
// (linear in the actors hosted here) runs at most every fullEvery.
func (n *Node) workerLoop() {
	fullEvery := 100 * time.Millisecond
	if n.raft == nil {
		fullEvery = 400 * time.Millisecond
	}
	var seen uint64 // state index of the last sync
	var lastFull time.Time
	for {
		if n.ctx.Err() != nil {
			return
		}
		full := time.Since(lastFull) >= fullEvery
		if full {
			lastFull = time.Now()
		}
		wait := time.Until(lastFull.Add(fullEvery))
		if n.fsm != nil && !full {
			changed := n.fsm.Changed() // before reading: no apply is missed
			var applied uint64
			n.fsm.Read(func(s *scheduler.State) { applied = s.AppliedIndex() })
			if applied == seen {
				t := time.NewTimer(wait)
				select {
				case <-n.ctx.Done():
					t.Stop()
					return
				case <-changed:
				case <-t.C:
				}
				t.Stop()
				continue
			}
		}
		polled := time.Now()
		idx, waited := n.workers.sync(full, seen, wait)
		if idx != 0 {
			seen = idx
		}
		// At most one sync per millisecond; a server that does not wait
		// (an older one) is polled every 20 ms as before.
		gap := time.Millisecond
		if n.raft == nil && !waited {
			gap = 20 * time.Millisecond
		}
		if d := gap - time.Since(polled); d > 0 {
			select {
			case <-n.ctx.Done():
				return
			case <-time.After(d):
			}
		}
	}
}

func key(id scheduler.ActorID, inc int) string { return fmt.Sprintf("%s/%d", id, inc) }

// sync applies one answer of NodeActors: ends what the state no longer
// runs here and starts what waits. On a worker node the call waits (up to
// wait) until the state has moved past index seen. It returns the state
// index answered for (0 if unknown) and whether the server waited.
func (w *workerSet) sync(full bool, seen uint64, wait time.Duration) (uint64, bool) {
	n := w.n
	var hostedNow map[scheduler.ActorID]int
	if full {
		w.mu.Lock()
		hostedNow = make(map[scheduler.ActorID]int, len(w.actors))
		for id, h := range w.actors {
			hostedNow[id] = h.inc
		}
		w.mu.Unlock()
	}
	req := &NodeActorsRequest{Node: n.cfg.NodeID, Hosted: hostedNow}
	if n.raft == nil && !full && wait > 0 {
		req.After, req.Wait = seen, wait
	}
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second+wait)
	asked := time.Now()
	resp, err := n.control.nodeActors(ctx, req)
	cancel()
	if err == nil {
		w.contact(resp, asked)
	}
	if err != nil {
		select { // no server reachable now; try again soon
		case <-n.ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
		return 0, false
	}
	waited := resp.Waits
	// End incarnations the state no longer runs here (killed, or replaced).
	// The kill messages are sent without w.mu: a write to a worker blocks
	// while the worker is not reading, and the worker may itself be
	// blocked reporting deaths to the Proc reader, whose Died event takes
	// w.mu (a full socket each way and a deadlock, seen when a finished
	// job's thousands of actors were ended at once).
	type kill struct {
		proc  *worker.Proc
		id    scheduler.ActorID
		inc   int
		cause string
	}
	var kills []kill
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return resp.Index, waited
	}
	for id, cause := range resp.End {
		h, ok := w.actors[id]
		if !ok || h.inc != hostedNow[id] {
			continue
		}
		delete(w.actors, id)
		delete(w.seen, key(id, h.inc))
		kills = append(kills, kill{h.proc, id, h.inc, cause})
	}
	w.mu.Unlock()
	for _, k := range kills { // before this sync's starts, as the worker expects
		k.proc.KillActor(string(k.id), k.inc, k.cause)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing || w.fencedLocked() { // fenced: nothing starts until contact is back
		return resp.Index, waited
	}
	// Starts the committed state still shows as in progress although this
	// node hosts them: their report was lost (a commit that failed for
	// longer than its retries), or is still on its way.
	now := time.Now()
	for _, id := range resp.Unreported {
		h, ok := w.actors[id]
		if !ok || h.inc != hostedNow[id] || now.Sub(h.reported) < reReport {
			continue
		}
		h.reported = now
		w.actors[id] = h
		w.reportStarted(&scheduler.ActorStarted{Actor: id, Incarnation: h.inc, Address: h.proc.Addr(), At: now.UnixNano()})
	}
	for i := range resp.Start {
		a := &resp.Start[i]
		if len(a.Spec.Args) == 0 {
			continue // a placement record with nothing to run (no Launch): not ours to start
		}
		k := key(a.Spec.ID, a.Restarts)
		if w.seen[k] {
			continue
		}
		w.seen[k] = true
		cp := *a
		if cp.Spec.JobID == "" {
			cp.Spec.JobID = anonymousJob // created outside any job: still one worker for all such
		}
		w.starting[cp.Spec.JobID]++
		w.idleSince[cp.Spec.JobID] = time.Time{} // busy again
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			w.start(&cp)
			w.mu.Lock()
			w.starting[cp.Spec.JobID]--
			w.mu.Unlock()
		}()
	}
	if full {
		w.reapIdle()
	}
	return resp.Index, waited
}

// reapIdle stops job worker processes that have hosted nothing for
// idleExit (w.mu held).
func (w *workerSet) reapIdle() {
	busy := map[scheduler.JobID]bool{}
	for _, h := range w.actors {
		busy[h.job] = true
	}
	now := time.Now()
	for job, p := range w.procs {
		if busy[job] || w.starting[job] > 0 {
			delete(w.idleSince, job)
			continue
		}
		since, ok := w.idleSince[job]
		if !ok || since.IsZero() {
			w.idleSince[job] = now
			continue
		}
		if now.Sub(since) >= idleExit {
			delete(w.procs, job)
			delete(w.idleSince, job)
			delete(w.starting, job)
			w.n.log.Info("stopping idle worker process", "job", job, "pid", p.PID())
			go p.Stop(2 * time.Second)
		}
	}
}

// start runs one actor incarnation in its job's worker and commits the
// outcome.
func (w *workerSet) start(a *scheduler.Actor) {
	n := w.n
	id, inc := a.Spec.ID, a.Restarts
	ok := false
	defer func() {
		if !ok { // its death is committed: the incarnation will not come back
			w.mu.Lock()
			delete(w.seen, key(id, inc))
			w.mu.Unlock()
		}
	}()
	l, err := DecodeLaunch(a.Spec.Args)
	if err != nil {
		w.commit(&scheduler.KillActor{Actor: id, Cause: fmt.Sprintf("cannot start on node %s: %v", n.cfg.NodeID, err), At: time.Now().UnixNano()})
		return
	}
	proc, err := w.proc(a.Spec.JobID, l)
	if err != nil {
		w.commit(&scheduler.KillActor{Actor: id, Cause: fmt.Sprintf("node %s: %v", n.cfg.NodeID, err), At: time.Now().UnixNano()})
		return
	}
	info := actors.ActorInfo{ID: string(id), Name: a.Spec.Name, Node: n.cfg.NodeID, GPUs: scheduler.GPUIndices(a.GPUs), Restarts: inc}
	info.GPUUUIDs, info.SimulatedGPUs = n.gpuIdentity(info.GPUs)
	if g := a.Spec.Request.Group; g != "" {
		info.PlacementGroup, info.Bundle = string(g), a.Bundle
	}
	ctx, cancel := context.WithTimeout(n.ctx, 5*time.Minute)
	err = proc.StartActor(ctx, l.Spec, info)
	cancel()
	if errors.Is(err, worker.ErrExited) {
		w.commit(&scheduler.ActorDied{Actor: id, Incarnation: inc, Cause: fmt.Sprintf("%v (node %s)", err, n.cfg.NodeID), At: time.Now().UnixNano()})
		return
	}
	if err != nil {
		// A failing constructor is not retried: the actor is dead.
		w.commit(&scheduler.KillActor{Actor: id, Cause: fmt.Sprintf("constructor failed: %v", err), At: time.Now().UnixNano()})
		return
	}
	now := time.Now()
	w.mu.Lock()
	if w.fencedLocked() { // fenced while it started: it must not run
		w.fence.lost = append(w.fence.lost, &scheduler.ActorDied{Actor: id, Incarnation: inc, Cause: fmt.Sprintf("node %s fenced itself while the actor started", n.cfg.NodeID), At: now.UnixNano()})
		w.mu.Unlock()
		proc.KillActor(string(id), inc, "node fenced")
		return
	}
	w.actors[id] = hosted{inc: inc, job: a.Spec.JobID, proc: proc, reported: now}
	w.mu.Unlock()
	ok = true
	w.reportStarted(&scheduler.ActorStarted{Actor: id, Incarnation: inc, Address: proc.Addr(), At: now.UnixNano()})
}

// reReport is how long a start report may stay uncommitted before the
// node sends it again.
const reReport = 2 * time.Second

// reportStarted commits c with the other start reports of this node that
// are waiting: while one batch is being committed the next accumulates,
// so a burst of starts costs a few raft entries (and, on a worker node, a
// few Apply calls) instead of one each.
func (w *workerSet) reportStarted(c *scheduler.ActorStarted) {
	w.rmu.Lock()
	w.reports = append(w.reports, c)
	if w.reporting {
		w.rmu.Unlock()
		return
	}
	w.reporting = true
	w.rmu.Unlock()
	w.n.wg.Add(1)
	go func() {
		defer w.n.wg.Done()
		for {
			w.rmu.Lock()
			q := w.reports
			w.reports = nil
			if len(q) == 0 {
				w.reporting = false
				w.rmu.Unlock()
				return
			}
			w.rmu.Unlock()
			w.commitStarted(q)
		}
	}()
}

// commitStarted commits start reports as one batch, retrying while no
// leader answers until the node shuts down. An entry the state machine
// refuses (the incarnation was killed or replaced meanwhile) is dropped:
// the node ends that incarnation at its next sync.
func (w *workerSet) commitStarted(q []*scheduler.ActorStarted) {
	var cmd []byte
	if len(q) == 1 {
		cmd = mustEncode(q[0])
	} else {
		bt := &scheduler.Batch{Commands: make([][]byte, len(q))}
		for i, c := range q {
			bt.Commands[i] = mustEncode(c)
		}
		cmd = mustEncode(bt)
	}
	for {
		w.mu.Lock()
		closing := w.closing
		w.mu.Unlock()
		if closing || w.n.ctx.Err() != nil {
			return // the node is going away: its death, not ours, is reported
		}
		resp, err := w.n.Apply(w.n.ctx, cmd)
		if err == nil {
			if resp.Err != nil {
				w.n.log.Debug("start reports refused", "reports", len(q), "err", resp.Err)
			}
			return
		}
		w.n.log.Debug("start reports not committed; retrying", "reports", len(q), "err", err)
		select {
		case <-w.n.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// launch is a job's worker process start in progress; done is closed
// once p or err is set.
type launch struct {
	done    chan struct{}
	p       *worker.Proc
	err     error
	waiters int // other starts of the job waiting for this one
}

// proc returns the job's worker process on this node, starting it. The
// process starts without w.mu held (syncs and death reports of other jobs
// go on meanwhile); concurrent callers for the same job wait for that one
// start, so a job has one process per node.
func (w *workerSet) proc(job scheduler.JobID, l *Launch) (*worker.Proc, error) {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return nil, errors.New("node is shutting down")
	}
	if p := w.procs[job]; p != nil {
		select {
		case <-p.Done():
		default:
			w.mu.Unlock()
			return p, nil
		}
	}
	if st := w.launching[job]; st != nil {
		st.waiters++
		w.mu.Unlock()
		<-st.done
		return st.p, st.err
	}
	st := &launch{done: make(chan struct{})}
	w.launching[job] = st
	w.mu.Unlock()
	st.p, st.err = w.launchProc(job, l)
	w.mu.Lock()
	delete(w.launching, job)
	if st.waiters > 0 {
		w.n.log.Debug("worker process start shared", "job", job, "starts", st.waiters+1, "err", st.err)
	}
	w.mu.Unlock()
	close(st.done)
	return st.p, st.err
}

// launchProc starts the job's worker process and installs it in w.procs
// (called without w.mu; one at a time per job, see proc).
func (w *workerSet) launchProc(job scheduler.JobID, l *Launch) (*worker.Proc, error) {
	// p is set under w.mu once the process runs; the events (which may
	// fire before that) read it under w.mu too.
	var p *worker.Proc
	ev := worker.Events{
		Died: func(id string, inc int, cause string) {
			w.mu.Lock()
			h, ok := w.actors[scheduler.ActorID(id)]
			if ok && h.inc == inc && h.proc == p {
				delete(w.actors, scheduler.ActorID(id))
				delete(w.seen, key(scheduler.ActorID(id), inc))
			}
			w.mu.Unlock()
			if ok && h.inc == inc {
				go w.commit(&scheduler.ActorDied{Actor: scheduler.ActorID(id), Incarnation: inc, Cause: cause, At: time.Now().UnixNano()})
			}
		},
		Exited: func(cause string) {
			cause = fmt.Sprintf("%s (job %s, node %s)", cause, job, w.n.cfg.NodeID)
			w.mu.Lock()
			var lost []scheduler.Command
			for id, h := range w.actors {
				if h.proc == p {
					delete(w.actors, id)
					delete(w.seen, key(id, h.inc))
					lost = append(lost, &scheduler.ActorDied{Actor: id, Incarnation: h.inc, Cause: cause, At: time.Now().UnixNano()})
				}
			}
			if p != nil && w.procs[job] == p {
				delete(w.procs, job)
			}
			closing := w.closing
			w.mu.Unlock()
			if p != nil {
				w.retire(p)
			}
			w.n.log.Warn("worker process ended", "job", job, "cause", cause, "actors", len(lost))
			if !closing {
				go func() {
					for _, c := range lost {
						w.commit(c)
					}
				}()
			}
		},
	}
	bin := l.Binary
	if l.Hash != "" {
		path, err := w.n.BinaryPath(l.Hash)
		if err != nil {
			return nil, err
		}
		if _, serr := os.Stat(path); serr == nil {
			bin = path
		} else if bin == "" {
			return nil, fmt.Errorf("job %s binary %.12s was not uploaded to this node: %w", job, l.Hash, serr)
		}
	}
	started, err := w.startProc(w.n.ctx, worker.StartOptions{Binary: bin, Args: l.Args, Job: string(job), Host: w.n.r.host,
		Security: w.n.security(),
		Stdout:   os.Stdout, Stderr: os.Stderr}, ev)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	p = started
	if w.closing { // stopAll ran meanwhile and did not see this process
		w.mu.Unlock()
		p.Stop(2 * time.Second)
		return nil, errors.New("node is shutting down")
	}
	select {
	case <-p.Done():
		// Exited already (and found nothing of it to clear): not installed;
		// the caller's start sees ErrExited.
	default:
		w.procs[job] = p
	}
	w.mu.Unlock()
	w.n.log.Info("worker process started", "job", job, "pid", p.PID(), "addr", p.Addr())
	return p, nil
}

// commit applies c through the leader, retrying while there is none.
func (w *workerSet) commit(c scheduler.Command) {
	w.mu.Lock()
	closing := w.closing
	w.mu.Unlock()
	if closing {
		return // the node is going away: its death, not ours, is reported
	}
	for attempt := 0; attempt < 50; attempt++ {
		_, err := w.n.applyCommand(w.n.ctx, c)
		if err == nil {
			if _, started := c.(*scheduler.ActorStarted); !started {
				w.n.poke() // a death may need a new placement
			}
			return
		}
		var we *api.Error
		if errors.As(err, &we) || w.n.ctx.Err() != nil {
			w.n.log.Debug("worker report refused", "cmd", fmt.Sprintf("%T", c), "err", err)
			return // refused (stale incarnation, already dead): nothing to retry
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopAll ends every worker process (node shutdown).
func (w *workerSet) stopAll() {
	w.mu.Lock()
	w.closing = true
	procs := w.procs
	w.procs = map[scheduler.JobID]*worker.Proc{}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(2 * time.Second) }()
	}
	wg.Wait()
}

// gpuIdentity returns the NVML UUIDs of the node's GPUs with the given
// indices (nil if any is unknown) and whether the node's GPUs are simulated.
func (n *Node) gpuIdentity(idx []int) ([]string, bool) {
	if len(idx) == 0 {
		return nil, false
	}
	sim := n.cfg.Labels["troupe.gpus"] == "simulated"
	out := make([]string, len(idx))
	for i, x := range idx {
		for _, g := range n.cfg.GPUs {
			if g.Index == x {
				out[i] = g.UUID
			}
		}
		if out[i] == "" {
			return nil, sim
		}
	}
	return out, sim
}
