package cluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/scheduler"
)

// Job leases: a job marked JobMetaLease lives while keep-alives come (from
// the driver, or from the node running a submitted driver). The leader
// keeps the last keep-alive of each job in memory; a new leader counts
// from when it took over.

// loop runs until the node shuts down, then stops this node's drivers
// (Shutdown waits for it).
func (m *jobManager) loop() {
	n := m.n
	tick := time.NewTicker(n.keepAliveEvery())
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			m.stopAll()
			return
		case <-tick.C:
		}
		m.keepLocalAlive()
		m.expireLeases()
	}
}

// keepLocalAlive renews the leases of the drivers this node runs, and
// stops a driver whose job the cluster has ended (its actors are gone).
func (m *jobManager) keepLocalAlive() {
	m.mu.Lock()
	ids := make([]string, 0, len(m.running))
	for id := range m.running {
		ids = append(ids, string(id))
	}
	m.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(m.n.ctx, m.n.keepAliveEvery()*2)
	resp, err := m.keepAlive(ctx, &KeepAliveRequest{Jobs: ids})
	cancel()
	if err != nil {
		m.n.log.Debug("job keep-alive failed", "err", err)
		return
	}
	for id, why := range resp.Ended {
		m.mu.Lock()
		p := m.running[scheduler.JobID(id)]
		m.mu.Unlock()
		if p != nil {
			m.n.log.Warn("the cluster ended a job whose driver runs here: stopping it", "job", id, "why", why)
			p.stop(5*time.Second, "the cluster ended the job ("+why+")")
		}
	}
}

// expireLeases, on the leader, ends leased jobs not kept alive for the
// lease. A new leader counts from when it took over.
func (m *jobManager) expireLeases() {
	n := m.n
	if !n.isLeader() {
		m.leaseMu.Lock()
		m.leaderSince = time.Time{}
		clear(m.seen)
		m.leaseMu.Unlock()
		return
	}
	now := time.Now()
	lease := n.jobLease()
	var expired []*scheduler.JobFinished
	m.leaseMu.Lock()
	if m.leaderSince.IsZero() {
		m.leaderSince = now
	}
	running := map[scheduler.JobID]bool{}
	n.fsm.Read(func(s *scheduler.State) {
		for _, j := range s.Jobs() {
			if j.State != scheduler.JobRunning || j.Spec.Metadata[JobMetaLease] == "" {
				continue
			}
			running[j.Spec.ID] = true
			last, ok := m.seen[j.Spec.ID]
			if !ok {
				m.seen[j.Spec.ID] = now
				continue
			}
			if now.Sub(last) > lease {
				from := "the driver"
				if d := j.Spec.Metadata[JobMetaDriver]; d != "" {
					from += " (" + d + ")"
				}
				if nd := j.Spec.Metadata[JobMetaNode]; nd != "" {
					from = "node " + nd + ", which runs the driver,"
				}
				expired = append(expired, &scheduler.JobFinished{Job: j.Spec.ID, State: scheduler.JobFailed,
					Message: fmt.Sprintf("driver lost: no keep-alive from %s for %v", from, now.Sub(last).Round(100*time.Millisecond)), At: now.UnixNano()})
			}
		}
	})
	for id := range m.seen {
		if !running[id] {
			delete(m.seen, id)
		}
	}
	m.leaseMu.Unlock()
	for _, c := range expired {
		if _, err := n.commitLocal(c); err != nil {
			n.log.Warn("ending a lost job failed", "job", c.Job, "err", err)
			continue
		}
		n.log.Warn("job ended: driver lost", "job", c.Job, "why", c.Message)
		n.poke()
	}
}

// renew records keep-alives on the leader; it returns the jobs that are
// not running (ended, or unknown) with why.
func (m *jobManager) renew(jobs []string) map[string]string {
	now := time.Now()
	var ended map[string]string
	m.leaseMu.Lock()
	defer m.leaseMu.Unlock()
	m.n.fsm.Read(func(s *scheduler.State) {
		for _, id := range jobs {
			j := s.Job(scheduler.JobID(id))
			why := ""
			switch {
			case j == nil:
				why = "UNKNOWN: no such job"
			case j.State != scheduler.JobRunning:
				why = j.State.String() + ": " + j.Message
			default:
				m.seen[j.Spec.ID] = now
				continue
			}
			if ended == nil {
				ended = map[string]string{}
			}
			ended[id] = why
		}
	})
	return ended
}

// keepAlive renews leases on the leader (forwarded there from any node).
func (m *jobManager) keepAlive(ctx context.Context, r *KeepAliveRequest) (*KeepAliveResponse, error) {
	n := m.n
	if len(r.Jobs) > 100000 {
		return nil, status.Errorf(codes.InvalidArgument, "keep-alive for %d jobs in one call", len(r.Jobs))
	}
	out := &KeepAliveResponse{Every: n.keepAliveEvery()}
	err := n.onLeader(ctx, r.Hops, func() error {
		out.Ended = m.renew(r.Jobs)
		return nil
	}, func(cc *grpc.ClientConn) error {
		return cc.Invoke(ctx, "/"+JobsServiceName+"/KeepAlive", &KeepAliveRequest{Jobs: r.Jobs, Hops: r.Hops + 1}, out)
	})
	return out, err
}
