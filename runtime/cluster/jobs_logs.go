package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/scheduler"
)

// logs streams a job's output: from this node's data dir when it ran the
// driver, otherwise relayed from the node that did.
func (m *jobManager) logs(r *LogsRequest, ss grpc.ServerStream) error {
	n := m.n
	ctx := ss.Context()
	if !validJobID(r.Job) {
		return status.Errorf(codes.InvalidArgument, "job ID %q: letters, digits, '-', '_' and '.' only", r.Job)
	}
	if jobsDir, err := m.jobsDir(); err == nil {
		dir := filepath.Join(jobsDir, r.Job)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return m.serveLogs(ss, dir, scheduler.JobID(r.Job), r.Follow)
		}
	}
	jv, err := m.lookupJob(ctx, r.Job)
	if err != nil {
		return err
	}
	switch {
	case jv == nil:
		return status.Errorf(codes.NotFound, "no job %q", r.Job)
	case jv.Node == "":
		return status.Errorf(codes.NotFound, "job %s was not submitted with troupe submit: its driver's output is wherever it was started (%s)", r.Job, orUnknown(jv.Driver))
	case jv.Node == n.cfg.NodeID || r.Hops > 0:
		return status.Errorf(codes.NotFound, "node %s has no output of job %s (its data dir was replaced?)", jv.Node, r.Job)
	}
	addr := n.nodeAddr(jv.Node)
	if addr == "" {
		return status.Errorf(codes.Unavailable, "node %s, which ran job %s and keeps its output, is not reachable", jv.Node, r.Job)
	}
	cc, err := n.peers.get(addr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "dial node %s: %v", jv.Node, err)
	}
	_, _, err = streamLogs(ctx, cc, &LogsRequest{Job: r.Job, Follow: r.Follow, Hops: r.Hops + 1}, func(ch LogChunk) error { return ss.SendMsg(&ch) })
	return err
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// serveLogs sends a local job's output and, last, its exit (waiting for it
// with follow).
func (m *jobManager) serveLogs(ss grpc.ServerStream, dir string, id scheduler.JobID, follow bool) error {
	m.mu.Lock()
	p := m.running[id]
	m.mu.Unlock()
	var l *jobLog
	if p != nil {
		l = p.out
	}
	send := func(b []byte) error { return ss.SendMsg(&LogChunk{Data: b}) }
	note := func(s string) error { return ss.SendMsg(&LogChunk{Note: s}) }
	if err := readJobOutput(ss.Context(), dir, l, follow, send, note); err != nil {
		if ss.Context().Err() != nil {
			return status.FromContextError(ss.Context().Err()).Err()
		}
		return status.Errorf(codes.Internal, "job %s output: %v", id, err)
	}
	var exit *JobExit
	if p != nil {
		if follow {
			select {
			case <-p.done:
			case <-ss.Context().Done():
				return status.FromContextError(ss.Context().Err()).Err()
			}
		}
		select {
		case <-p.done:
			p.mu.Lock()
			exit = p.exit
			p.mu.Unlock()
		default: // still running (no follow)
		}
	} else {
		rec, err := readJobRecord(filepath.Join(dir, "job.json"))
		switch {
		case errors.Is(err, os.ErrNotExist):
			exit = &JobExit{State: scheduler.JobFailed.String(), Code: -1, Message: "the driver never started"}
		case err != nil:
			return status.Errorf(codes.Internal, "%v", err)
		case rec.Exit == nil:
			exit = &JobExit{State: scheduler.JobFailed.String(), Code: -1, Message: fmt.Sprintf("node %s stopped while the driver ran", m.n.cfg.NodeID)}
		default:
			exit = rec.Exit
		}
	}
	return ss.SendMsg(&LogChunk{Done: true, Exit: exit})
}
