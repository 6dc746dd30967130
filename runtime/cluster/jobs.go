package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/transport"
)

// Jobs: `troupe submit` uploads a driver binary (content-addressed, as for
// actors) to a node, which runs it as a driver process with the cluster's
// address, token and a job ID in its environment, keeps its output in
// <data-dir>/jobs/<id>/output.log and commits the job's end (exit code or
// signal) through raft. Drivers started by hand register their job
// themselves. Every running job that promises keep-alives (all jobs of this
// runtime do: the driver itself, or the node running a submitted driver)
// is ended by the leader when they stop for JobLease, so a driver killed
// with -9, or lost with its node, frees its actors.

// SubmitJobRequest asks a node to run a job's driver: an uploaded binary
// (Hash), or a command in an uploaded working directory (Package).
type SubmitJobRequest struct {
	// Hash is the sha256 of the binary, uploaded with UploadBinary.
	Hash string `msgpack:"hash,omitempty"`
	// Package is the sha256 of a working directory packed with PackDir
	// and uploaded with UploadPackage; the job runs Program with Args in a
	// fresh copy of it.
	Package string `msgpack:"pkg,omitempty"`
	// Name is a display name (optional); `troupe logs NAME` finds the
	// latest job with it.
	Name string `msgpack:"name,omitempty"`
	// Program is the submitted file's name, for display; with Package, the
	// command to run: a path in the working dir with a slash ("./run.sh"),
	// or a program on the node's PATH ("go").
	Program string `msgpack:"prog,omitempty"`
	// Args are the driver's arguments.
	Args []string `msgpack:"args,omitempty"`
	// Env adds "K=V" entries to the driver's environment.
	Env []string `msgpack:"env,omitempty"`
	// Resume, if set, is the ID of an earlier job of this node that has
	// ended: the new driver runs in that job's working directory (where its
	// outputs are; a working dir is unpacked over it) with EnvResume set,
	// so that a training script continues from its last checkpoint.
	Resume string `msgpack:"resume,omitempty"`
}

// SubmitJobResponse names the new job and the node running its driver.
type SubmitJobResponse struct {
	Job  string `msgpack:"job"`
	Node string `msgpack:"node"`
}

// JobView is one job, for people and scripts.
type JobView struct {
	ID         string `msgpack:"id" json:"id"`
	Name       string `msgpack:"name,omitempty" json:"name,omitempty"`
	State      string `msgpack:"state" json:"state"` // RUNNING, SUCCEEDED, FAILED, STOPPED
	Node       string `msgpack:"node,omitempty" json:"node,omitempty"`
	Driver     string `msgpack:"driver,omitempty" json:"driver,omitempty"`
	Entrypoint string `msgpack:"entry,omitempty" json:"entrypoint,omitempty"`
	Message    string `msgpack:"msg,omitempty" json:"message,omitempty"`
	// SubmittedAt and FinishedAt are Unix nanoseconds (0: not finished).
	SubmittedAt int64 `msgpack:"submitted" json:"submitted_at"`
	FinishedAt  int64 `msgpack:"finished,omitempty" json:"finished_at,omitempty"`
}

// ListJobsRequest asks for every job the cluster knows.
type ListJobsRequest struct {
	Hops int `msgpack:"hops,omitempty"`
}

// ListJobsResponse lists jobs sorted by submission time.
type ListJobsResponse struct {
	Jobs []JobView `msgpack:"jobs"`
}

// StopJobRequest asks to stop a job: its driver gets SIGTERM, then SIGKILL
// after Grace; a job whose driver no node runs is ended at once.
type StopJobRequest struct {
	Job    string        `msgpack:"job"`
	Grace  time.Duration `msgpack:"grace,omitempty"`
	Reason string        `msgpack:"reason,omitempty"`
	Hops   int           `msgpack:"hops,omitempty"`
}

// StopJobResponse says what happened: "stopping" (a driver was signalled)
// or the job's final state.
type StopJobResponse struct {
	Job   string `msgpack:"job"`
	State string `msgpack:"state"`
}

// LogsRequest asks for a job's output; with Follow the stream goes on
// until the driver exits.
type LogsRequest struct {
	Job    string `msgpack:"job"`
	Follow bool   `msgpack:"follow,omitempty"`
	Hops   int    `msgpack:"hops,omitempty"`
}

// LogChunk is one message of a Logs stream: output bytes, a note from
// troupe (output skipped), or the last message (Done) with the driver's
// exit when it has ended.
type LogChunk struct {
	Data []byte   `msgpack:"data,omitempty"`
	Note string   `msgpack:"note,omitempty"`
	Done bool     `msgpack:"done,omitempty"`
	Exit *JobExit `msgpack:"exit,omitempty"`
}

// JobExit is how a submitted driver ended.
type JobExit struct {
	// State is SUCCEEDED, FAILED or STOPPED.
	State string `msgpack:"state" json:"state"`
	// Code is the exit code, -1 when a signal ended the process.
	Code int `msgpack:"code" json:"code"`
	// Signal names the signal that ended it ("" if it exited).
	Signal    string `msgpack:"signal,omitempty" json:"signal,omitempty"`
	SignalNum int    `msgpack:"signum,omitempty" json:"signal_number,omitempty"`
	// Message describes the end for people.
	Message string `msgpack:"msg" json:"message"`
}

// ShellCode is the exit code a shell would report: the code, or 128 plus
// the signal's number.
func (e *JobExit) ShellCode() int {
	if e.Code >= 0 {
		return e.Code
	}
	if e.SignalNum > 0 {
		return 128 + e.SignalNum
	}
	return 1
}

// jobsServer is what the Jobs service's handlers call.
type jobsServer interface {
	submit(ctx context.Context, r *SubmitJobRequest) (*SubmitJobResponse, error)
	list(ctx context.Context, r *ListJobsRequest) (*ListJobsResponse, error)
	stopJob(ctx context.Context, r *StopJobRequest) (*StopJobResponse, error)
	keepAlive(ctx context.Context, r *KeepAliveRequest) (*KeepAliveResponse, error)
	logs(r *LogsRequest, ss grpc.ServerStream) error
}

var jobsDesc = grpc.ServiceDesc{
	ServiceName: JobsServiceName,
	HandlerType: (*jobsServer)(nil),
	Methods: []grpc.MethodDesc{
		transport.UnaryMethod(JobsServiceName, "Submit", jobsServer.submit),
		transport.UnaryMethod(JobsServiceName, "List", jobsServer.list),
		transport.UnaryMethod(JobsServiceName, "Stop", jobsServer.stopJob),
		transport.UnaryMethod(JobsServiceName, "KeepAlive", jobsServer.keepAlive),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Logs",
		ServerStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			r := new(LogsRequest)
			if err := ss.RecvMsg(r); err != nil {
				return err
			}
			s, ok := srv.(jobsServer)
			if !ok {
				return status.Errorf(codes.Internal, "Logs: server of type %T does not implement the jobs service", srv)
			}
			return s.logs(r, ss)
		},
	}},
	Metadata: "troupe/runtime/cluster/jobs.go",
}

// SubmitJob runs the binary with that hash (uploaded to the node at the
// client's first address with UploadBinary) as a job's driver there.
func (c *Client) SubmitJob(ctx context.Context, r *SubmitJobRequest) (*SubmitJobResponse, error) {
	cc, err := c.Conn(c.First())
	if err != nil {
		return nil, err
	}
	resp := new(SubmitJobResponse)
	if err := cc.Invoke(ctx, "/"+JobsServiceName+"/Submit", r, resp); err != nil {
		return nil, fmt.Errorf("submit at %s: %w", c.First(), err)
	}
	return resp, nil
}

// Jobs lists the cluster's jobs.
func (c *Client) Jobs(ctx context.Context) ([]JobView, error) {
	resp := new(ListJobsResponse)
	if err := c.InvokeService(ctx, JobsServiceName, "List", &ListJobsRequest{}, resp); err != nil {
		return nil, err
	}
	return resp.Jobs, nil
}

// StopJob stops a job (see StopJobRequest).
func (c *Client) StopJob(ctx context.Context, job string, grace time.Duration, reason string) (*StopJobResponse, error) {
	resp := new(StopJobResponse)
	return resp, c.InvokeService(ctx, JobsServiceName, "Stop", &StopJobRequest{Job: job, Grace: grace, Reason: reason}, resp)
}

// JobLogs streams a job's output to fn, chunk by chunk, from the first
// reachable node (which relays from the node that ran the driver). It
// returns the driver's exit when the job has ended (nil while it runs and
// follow is false).
func (c *Client) JobLogs(ctx context.Context, job string, follow bool, fn func(LogChunk) error) (*JobExit, error) {
	var last error
	for _, addr := range c.Addrs() {
		cc, err := c.Conn(addr)
		if err != nil {
			last = err
			continue
		}
		exit, got, err := streamLogs(ctx, cc, &LogsRequest{Job: job, Follow: follow}, fn)
		if err == nil {
			return exit, nil
		}
		last = fmt.Errorf("logs at %s: %w", addr, err)
		if got || status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return nil, last
		}
	}
	return nil, last
}

// streamLogs runs one Logs call; got reports whether any chunk arrived
// (then the call cannot be retried elsewhere without repeating output).
func streamLogs(ctx context.Context, cc grpc.ClientConnInterface, r *LogsRequest, fn func(LogChunk) error) (exit *JobExit, got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := cc.NewStream(ctx, &jobsDesc.Streams[0], "/"+JobsServiceName+"/Logs")
	if err != nil {
		return nil, false, err
	}
	if err := cs.SendMsg(r); err != nil {
		return nil, false, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, false, err
	}
	for {
		var ch LogChunk
		if err := cs.RecvMsg(&ch); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, got, fmt.Errorf("logs of %s: stream ended without its last message", r.Job)
			}
			return nil, got, err
		}
		got = true
		if err := fn(ch); err != nil {
			return nil, got, err
		}
		if ch.Done {
			return ch.Exit, got, nil
		}
	}
}
