package cluster

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"troupe/runtime/worker"
	"troupe/scheduler"
)

// A node's worker processes count the calls their actors serve and hold
// the objects their actors returned. The node asks them when someone looks
// (a /metrics scrape, troupe list objects) and sums the calls per actor
// type and method. A worker that exits takes its counts along; the node
// keeps the last ones it was told, so the sums never go down.

// ObjectView is one object held in a worker's object store.
type ObjectView struct {
	ID   string `msgpack:"id" json:"id"`
	Size int64  `msgpack:"size" json:"size_bytes"`
	Node string `msgpack:"node" json:"node"`
	Job  string `msgpack:"job,omitempty" json:"job,omitempty"`
	PID  int    `msgpack:"pid,omitempty" json:"pid,omitempty"`
	// Actor is the actor whose call returned the object.
	Actor string `msgpack:"actor,omitempty" json:"actor,omitempty"`
	// Refs counts the references held on it (one per future, argument or
	// transfer in flight).
	Refs      int   `msgpack:"refs" json:"refs"`
	CreatedAt int64 `msgpack:"created,omitempty" json:"created_at,omitempty"`
	// Owner is the object store address that serves it.
	Owner string `msgpack:"owner,omitempty" json:"owner,omitempty"`
}

// NodeObjectsRequest asks one node for the objects its workers hold.
type NodeObjectsRequest struct{}

// NodeObjectsResponse lists them; Errors names workers that did not
// answer, Omitted counts objects beyond worker.MaxListedObjects.
type NodeObjectsResponse struct {
	Objects []ObjectView `msgpack:"objects,omitempty"`
	Omitted int          `msgpack:"omitted,omitempty"`
	Errors  []string     `msgpack:"errors,omitempty"`
}

// workerStatsTimeout bounds one worker's answer.
const workerStatsTimeout = 2 * time.Second

// WorkerReport is one worker process's statistics.
type WorkerReport struct {
	Job   string
	Stats *worker.Stats
}

// WorkerStats gathers the statistics of this node's worker processes: one
// report per live worker that answered, the calls summed per actor type
// and method over every worker this node has run, and the errors of those
// that did not answer.
func (n *Node) WorkerStats(ctx context.Context) (reports []WorkerReport, calls []worker.CallStats, errs []string) {
	w := n.workers
	w.mu.Lock()
	procs := make(map[scheduler.JobID]*worker.Proc, len(w.procs))
	for j, p := range w.procs {
		procs[j] = p
	}
	w.mu.Unlock()
	type answer struct {
		job scheduler.JobID
		p   *worker.Proc
		st  *worker.Stats
		err error
	}
	answers := make(chan answer, len(procs))
	for j, p := range procs {
		go func() {
			ctx, cancel := context.WithTimeout(ctx, workerStatsTimeout)
			defer cancel()
			st, err := p.Stats(ctx)
			answers <- answer{j, p, st, err}
		}()
	}
	for range procs {
		a := <-answers
		if a.err != nil {
			errs = append(errs, fmt.Sprintf("job %s worker %d: %v", a.job, a.p.PID(), a.err))
			continue
		}
		reports = append(reports, WorkerReport{Job: string(a.job), Stats: a.st})
		// Kept only while the process lives: its exit closes Done before
		// retire runs (under statsMu), so a late answer is never counted
		// twice.
		w.statsMu.Lock()
		select {
		case <-a.p.Done():
		default:
			w.lastCalls[a.p] = a.st.Calls
		}
		w.statsMu.Unlock()
	}
	sort.Slice(reports, func(i, j int) bool { return reports[i].Job < reports[j].Job })
	sort.Strings(errs)

	// Sum: the retired workers' counts, then what every live worker said
	// last (this time, or before if it did not answer now).
	sum := map[[2]string]*worker.CallStats{}
	add := func(cs []worker.CallStats) {
		for _, c := range cs {
			k := [2]string{c.Class, c.Method}
			s := sum[k]
			if s == nil {
				s = &worker.CallStats{Class: c.Class, Method: c.Method, Buckets: make([]uint64, len(worker.CallBuckets))}
				sum[k] = s
			}
			s.OK += c.OK
			s.Errors += c.Errors
			s.Seconds += c.Seconds
			for i := range min(len(s.Buckets), len(c.Buckets)) {
				s.Buckets[i] += c.Buckets[i]
			}
		}
	}
	w.statsMu.Lock()
	add(w.retiredCalls)
	for _, cs := range w.lastCalls {
		add(cs)
	}
	w.statsMu.Unlock()
	for _, s := range sum {
		calls = append(calls, *s)
	}
	sort.Slice(calls, func(i, j int) bool {
		if calls[i].Class != calls[j].Class {
			return calls[i].Class < calls[j].Class
		}
		return calls[i].Method < calls[j].Method
	})
	return reports, calls, errs
}

// retire folds an exited worker's last reported counts into the node's.
func (w *workerSet) retire(p *worker.Proc) {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	cs, ok := w.lastCalls[p]
	if !ok {
		return
	}
	delete(w.lastCalls, p)
	idx := map[[2]string]int{}
	for i, c := range w.retiredCalls {
		idx[[2]string{c.Class, c.Method}] = i
	}
	for _, c := range cs {
		k := [2]string{c.Class, c.Method}
		i, ok := idx[k]
		if !ok {
			w.retiredCalls = append(w.retiredCalls, worker.CallStats{Class: c.Class, Method: c.Method, Buckets: make([]uint64, len(worker.CallBuckets))})
			i = len(w.retiredCalls) - 1
			idx[k] = i
		}
		r := &w.retiredCalls[i]
		r.OK += c.OK
		r.Errors += c.Errors
		r.Seconds += c.Seconds
		for j := range min(len(r.Buckets), len(c.Buckets)) {
			r.Buckets[j] += c.Buckets[j]
		}
	}
}

// nodeObjects answers for this node's workers' objects.
func (l *listImpl) nodeObjects(ctx context.Context, r *NodeObjectsRequest) (*NodeObjectsResponse, error) {
	n := l.node()
	reports, _, errs := n.WorkerStats(ctx)
	out := &NodeObjectsResponse{Errors: errs}
	for _, rep := range reports {
		st := rep.Stats
		for _, o := range st.Objects {
			out.Objects = append(out.Objects, ObjectView{ID: o.ID, Size: o.Size, Node: n.cfg.NodeID, Job: rep.Job, PID: st.PID,
				Actor: o.Tag, Refs: o.Refs, CreatedAt: o.CreatedAt, Owner: st.ObjectAddr})
		}
		out.Omitted += st.ObjectsTotal - len(st.Objects)
	}
	return out, nil
}

// clusterObjects asks every node that is not dead for its objects, in
// parallel; partial names the nodes (or workers) that did not answer.
func (n *Node) clusterObjects(ctx context.Context) (objs []ObjectView, partial []string) {
	type target struct{ id, addr string }
	var targets []target
	n.fsm.Read(func(s *scheduler.State) {
		for _, nd := range s.Nodes() {
			if nd.State != scheduler.NodeDead {
				targets = append(targets, target{string(nd.ID), nd.Address})
			}
		}
	})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			var resp *NodeObjectsResponse
			var err error
			if t.id == n.cfg.NodeID {
				resp, err = n.list.nodeObjects(ctx, &NodeObjectsRequest{})
			} else {
				resp = new(NodeObjectsResponse)
				cc, derr := n.peers.get(t.addr)
				if err = derr; err == nil {
					actx, cancel := context.WithTimeout(ctx, workerStatsTimeout+time.Second)
					err = cc.Invoke(actx, "/"+StateServiceName+"/NodeObjects", &NodeObjectsRequest{}, resp)
					cancel()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				partial = append(partial, fmt.Sprintf("node %s: %v", t.id, err))
				return
			}
			objs = append(objs, resp.Objects...)
			for _, e := range resp.Errors {
				partial = append(partial, fmt.Sprintf("node %s: %s", t.id, e))
			}
			if resp.Omitted > 0 {
				partial = append(partial, fmt.Sprintf("node %s: %d more objects not listed", t.id, resp.Omitted))
			}
		})
	}
	wg.Wait()
	sort.Strings(partial)
	return objs, partial
}
