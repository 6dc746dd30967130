package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/scheduler"

	"troupe/runtime/api"

	"troupe/runtime/transport"
)

// The Jobs service's unary handlers (Logs is in jobs_logs.go, KeepAlive in
// jobs_lease.go).

func (m *jobManager) submit(ctx context.Context, r *SubmitJobRequest) (*SubmitJobResponse, error) {
	n := m.n
	if err := checkSubmit(r); err != nil {
		return nil, transport.Status(codes.InvalidArgument, err)
	}
	var stored string // the binary, or the working dir's archive
	var err error
	if r.Package != "" {
		stored, err = n.PackagePath(r.Package)
	} else {
		stored, err = n.BinaryPath(r.Hash)
	}
	if err != nil {
		return nil, transport.Status(codes.FailedPrecondition, err)
	}
	if _, err := os.Stat(stored); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%.12s is not stored on node %s: upload it first", r.Hash+r.Package, n.cfg.NodeID)
	}
	jobsDir, err := m.jobsDir()
	if err != nil {
		return nil, transport.Status(codes.FailedPrecondition, err)
	}
	if err := pruneJobDirs(jobsDir, keptJobs); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.log.Warn("removing old job directories", "err", err)
	}
	var resumeWD string // the earlier job's working dir the new one continues in
	if r.Resume != "" {
		if resumeWD, err = m.resumeDir(jobsDir, r.Resume); err != nil {
			return nil, transport.Status(codes.FailedPrecondition, err)
		}
	}
	id := scheduler.JobID(newJobID())
	dir := filepath.Join(jobsDir, string(id))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, status.Errorf(codes.Internal, "job dir: %v", err)
	}
	bin, wd := stored, dir
	if resumeWD != "" {
		wd = resumeWD
	}
	if r.Package != "" {
		now := time.Now()
		os.Chtimes(stored, now, now) // recently used: pruned last
		prunePackages(filepath.Dir(stored), keptPackages)
		unpack := unpackPackage
		if resumeWD != "" {
			unpack = unpackOver
		} else {
			wd = filepath.Join(dir, "wd")
		}
		if err := unpack(stored, wd); err != nil {
			os.RemoveAll(dir)
			return nil, transport.Status(codes.Internal, fmt.Errorf("job %s: unpack working dir %.12s: %w", id, r.Package, err))
		}
		if bin, err = ResolveCommand(wd, r.Program); err != nil {
			os.RemoveAll(dir)
			return nil, transport.Status(codes.FailedPrecondition, fmt.Errorf("node %s: %w", n.cfg.NodeID, err))
		}
	}
	entry := strings.TrimSpace(r.Program + " " + strings.Join(r.Args, " "))
	meta := map[string]string{JobMetaNode: n.cfg.NodeID, JobMetaLease: "1"}
	if r.Name != "" {
		meta[JobMetaName] = r.Name
	}
	if _, err := n.applyCommand(ctx, &scheduler.SubmitJob{Spec: scheduler.JobSpec{ID: id, Entrypoint: entry, Metadata: meta}, At: time.Now().UnixNano()}); err != nil {
		os.RemoveAll(dir)
		return nil, status.Errorf(codes.Unavailable, "register job: %v", err)
	}
	if _, err := m.run(id, dir, wd, bin, r); err != nil {
		m.commitEnd(id, scheduler.JobFailed, "driver did not start: "+err.Error())
		return nil, status.Errorf(codes.Internal, "job %s on node %s: %v", id, n.cfg.NodeID, err)
	}
	return &SubmitJobResponse{Job: string(id), Node: n.cfg.NodeID}, nil
}

// checkSubmit validates a submission's fields.
func checkSubmit(r *SubmitJobRequest) error {
	switch {
	case r.Package != "" && r.Hash != "":
		return fmt.Errorf("submit: a binary (%.12s) and a working dir (%.12s): give one", r.Hash, r.Package)
	case r.Package != "":
		if !validHash(r.Package) {
			return fmt.Errorf("submit: working dir hash %q: want 64 hex digits (sha256)", r.Package)
		}
		if r.Program == "" {
			return fmt.Errorf("submit: a working dir without a command to run in it")
		}
	case !validHash(r.Hash):
		return fmt.Errorf("submit: binary hash %q: want 64 hex digits (sha256)", r.Hash)
	}
	if len(r.Name) > 128 || strings.ContainsFunc(r.Name, func(c rune) bool { return c < ' ' }) {
		return fmt.Errorf("submit: name %q: at most 128 printable characters", r.Name)
	}
	if len(r.Args) > 4096 || len(r.Env) > 4096 {
		return fmt.Errorf("submit: %d arguments and %d environment entries: at most 4096 each", len(r.Args), len(r.Env))
	}
	for _, kv := range r.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return fmt.Errorf("submit: environment entry %q: want KEY=VALUE", kv)
		}
	}
	return nil
}

func jobView(j *scheduler.Job) JobView {
	return JobView{ID: string(j.Spec.ID), Name: j.Spec.Metadata[JobMetaName], State: j.State.String(), Node: j.Spec.Metadata[JobMetaNode],
		Driver: j.Spec.Metadata[JobMetaDriver], Entrypoint: j.Spec.Entrypoint, Message: j.Message, SubmittedAt: j.SubmittedAt, FinishedAt: j.FinishedAt}
}

// forwardJobs sends a jobs call to a server when this node holds no state.
func (n *Node) forwardJobs(ctx context.Context, method string, hops int, req, resp any) error {
	if hops >= maxHops {
		return status.Error(codes.Unavailable, "no server reachable")
	}
	addr := n.anyServer()
	if addr == "" {
		return status.Error(codes.Unavailable, "this worker knows no live server")
	}
	cc, err := n.peers.get(addr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "dial server %s: %v", addr, err)
	}
	return cc.Invoke(ctx, "/"+JobsServiceName+"/"+method, req, resp)
}

func (m *jobManager) list(ctx context.Context, r *ListJobsRequest) (*ListJobsResponse, error) {
	n := m.n
	out := new(ListJobsResponse)
	if n.raft == nil {
		return out, n.forwardJobs(ctx, "List", r.Hops, &ListJobsRequest{Hops: r.Hops + 1}, out)
	}
	n.fsm.Read(func(s *scheduler.State) {
		for _, jb := range s.Jobs() {
			out.Jobs = append(out.Jobs, jobView(jb))
		}
	})
	sortJobs(out.Jobs)
	return out, nil
}

func sortJobs(js []JobView) {
	sort.Slice(js, func(a, b int) bool {
		if js[a].SubmittedAt != js[b].SubmittedAt {
			return js[a].SubmittedAt < js[b].SubmittedAt
		}
		return js[a].ID < js[b].ID
	})
}

// lookupJob finds a job in the committed state (nil if unknown).
func (m *jobManager) lookupJob(ctx context.Context, id string) (*JobView, error) {
	resp, err := m.list(ctx, &ListJobsRequest{})
	if err != nil {
		return nil, err
	}
	for i := range resp.Jobs {
		if resp.Jobs[i].ID == id {
			return &resp.Jobs[i], nil
		}
	}
	return nil, nil
}

// nodeAddr returns a live node's gRPC address from gossip ("" if unknown
// or gone).
func (n *Node) nodeAddr(id string) string {
	if m, ok := n.members.get(id); ok && m.state == memberlist.StateAlive {
		return m.meta.GRPC
	}
	return ""
}

func (m *jobManager) stopJob(ctx context.Context, r *StopJobRequest) (*StopJobResponse, error) {
	n := m.n
	id := scheduler.JobID(r.Job)
	grace := r.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	grace = min(grace, 5*time.Minute)
	reason := r.Reason
	if reason == "" {
		reason = "troupe stop-job"
	}
	m.mu.Lock()
	p := m.running[id]
	m.mu.Unlock()
	if p != nil {
		p.stop(grace, reason)
		return &StopJobResponse{Job: r.Job, State: "stopping"}, nil
	}
	jv, err := m.lookupJob(ctx, r.Job)
	if err != nil {
		return nil, err
	}
	if jv == nil {
		return nil, status.Errorf(codes.NotFound, "no job %q", r.Job)
	}
	if jv.State != scheduler.JobRunning.String() {
		return &StopJobResponse{Job: r.Job, State: jv.State}, nil
	}
	if jv.Node != "" && jv.Node != n.cfg.NodeID && r.Hops == 0 {
		if addr := n.nodeAddr(jv.Node); addr != "" {
			out := new(StopJobResponse)
			cc, err := n.peers.get(addr)
			if err == nil {
				err = cc.Invoke(ctx, "/"+JobsServiceName+"/Stop", &StopJobRequest{Job: r.Job, Grace: r.Grace, Reason: r.Reason, Hops: 1}, out)
			}
			if err == nil || status.Code(err) != codes.Unavailable {
				return out, err
			}
		}
		reason += fmt.Sprintf("; node %s, which ran its driver, is unreachable", jv.Node)
	}
	// No driver process here to signal (started by hand, or its node is
	// gone): end the job, which kills its actors.
	if _, err := n.applyCommand(ctx, &scheduler.JobFinished{Job: id, State: scheduler.JobStopped, Message: "stopped (" + reason + ")", At: time.Now().UnixNano()}); err != nil {
		var we *api.Error
		if errors.As(err, &we) && errors.Is(err, scheduler.ErrConflict) {
			return &StopJobResponse{Job: r.Job, State: "ended"}, nil
		}
		return nil, err
	}
	n.poke()
	return &StopJobResponse{Job: r.Job, State: scheduler.JobStopped.String()}, nil
}
