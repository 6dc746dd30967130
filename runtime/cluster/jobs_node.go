package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/worker"
	"troupe/scheduler"
)

// jobManager runs the submitted drivers of one node and, while the node
// leads raft, ends jobs whose keep-alives stopped.
type jobManager struct {
	n *Node

	mu      sync.Mutex
	running map[scheduler.JobID]*jobProc
	closing bool

	leaseMu     sync.Mutex
	seen        map[scheduler.JobID]time.Time // leader: last keep-alive (or first sight) per leased job
	leaderSince time.Time                     // zero while not leading
}

// jobProc is a driver process this node runs.
type jobProc struct {
	id   scheduler.JobID
	dir  string
	cmd  *exec.Cmd
	out  *jobLog
	done chan struct{} // closed once exit is set and the end committed

	mu       sync.Mutex
	stopping string // why a stop was asked ("" if not)
	exit     *JobExit
}

// jobRecord is a job's local record, <job dir>/job.json.
type jobRecord struct {
	ID        string   `json:"id"`
	Name      string   `json:"name,omitempty"`
	Program   string   `json:"program,omitempty"`
	Hash      string   `json:"hash"`
	Args      []string `json:"args,omitempty"`
	PID       int      `json:"pid,omitempty"`
	StartedAt int64    `json:"started_at"`
	EndedAt   int64    `json:"ended_at,omitempty"`
	Exit      *JobExit `json:"exit,omitempty"`
}

func newJobManager(n *Node) *jobManager {
	return &jobManager{n: n, running: map[scheduler.JobID]*jobProc{}, seen: map[scheduler.JobID]time.Time{}}
}

// jobLease is how long a leased job lives without a keep-alive: 20 gossip
// probe intervals, at least 3 s (10 s with LANTiming, 4 s with
// FastTiming), long enough to ride out a leader election.
func (n *Node) jobLease() time.Duration {
	return max(3*time.Second, 20*n.cfg.Timing.ProbeInterval)
}

// keepAliveEvery is how often keep-alives are sent.
func (n *Node) keepAliveEvery() time.Duration { return max(n.jobLease()/4, 100*time.Millisecond) }

func (m *jobManager) jobsDir() (string, error) {
	if m.n.cfg.DataDir == "" {
		return "", fmt.Errorf("node %s has no data dir to run jobs in (start it with --data-dir)", m.n.cfg.NodeID)
	}
	return filepath.Join(m.n.cfg.DataDir, "jobs"), nil
}

// validJobID accepts IDs that are safe as a directory name.
func validJobID(id string) bool {
	if id == "" || len(id) > 128 || id == "." || id == ".." {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func newJobID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("cluster: crypto/rand failed: %v", err)) // no randomness: nothing can work
	}
	return "job-" + hex.EncodeToString(b[:])
}

// start begins the loop of the job manager: keep-alives for this node's
// drivers, lease expiry on the leader, and stopping the drivers when the
// node shuts down. Records of drivers that ran when the node last stopped
// are closed first.
func (m *jobManager) start() {
	m.recoverRecords()
	m.n.wg.Add(1)
	go func() { defer m.n.wg.Done(); m.loop() }()
}

// recoverRecords marks jobs this node ran when it stopped as ended.
func (m *jobManager) recoverRecords() {
	dir, err := m.jobsDir()
	if err != nil {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name(), "job.json")
		rec, err := readJobRecord(p)
		if err != nil || rec.Exit != nil {
			continue
		}
		rec.Exit = &JobExit{State: scheduler.JobFailed.String(), Code: -1, Message: fmt.Sprintf("node %s stopped while the driver ran", m.n.cfg.NodeID)}
		rec.EndedAt = time.Now().UnixNano()
		writeJobRecord(p, rec)
	}
}

func readJobRecord(path string) (*jobRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rec := new(jobRecord)
	if err := json.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("job record %s: %w", path, err)
	}
	return rec, nil
}

func writeJobRecord(path string, rec *jobRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("job record: %w", err)
	}
	return os.Rename(tmp, path)
}

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

// run starts the driver process of a job.
func (m *jobManager) run(id scheduler.JobID, dir, bin string, r *SubmitJobRequest) (*jobProc, error) {
	n := m.n
	out, err := newJobLog(dir, DefaultJobLogBytes)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, r.Args...)
	cmd.Dir = dir
	cmd.Env = driverEnv(os.Environ(), r.Env, []string{"TROUPE_ADDRESS=" + n.r.grpcAddr(), "TROUPE_TOKEN=" + n.cfg.Token, EnvJobID + "=" + string(id)})
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 2 * time.Second // a grandchild holding the output pipes open does not hold the job
	// Its own process group (a stop signals the driver and what it
	// started); SIGKILL when the node dies, even by kill -9. Pdeathsig
	// fires when the forking thread exits, so that thread stays locked
	// until the driver has exited.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &jobProc{id: id, dir: dir, cmd: cmd, out: out, done: make(chan struct{})}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		out.Close()
		return nil, errors.New("node is shutting down")
	}
	m.running[id] = p
	m.mu.Unlock()
	started := make(chan error, 1)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		m.finish(p, cmd.Wait())
	}()
	if err := <-started; err != nil {
		m.mu.Lock()
		delete(m.running, id)
		m.mu.Unlock()
		out.Close()
		return nil, fmt.Errorf("start driver: %w", err)
	}
	rec := &jobRecord{ID: string(id), Name: r.Name, Program: r.Program, Hash: r.Hash, Args: r.Args, PID: cmd.Process.Pid, StartedAt: time.Now().UnixNano()}
	if err := writeJobRecord(filepath.Join(dir, "job.json"), rec); err != nil {
		n.log.Warn("job record", "job", id, "err", err)
	}
	n.log.Info("job driver started", "job", id, "pid", cmd.Process.Pid, "name", r.Name)
	return p, nil
}

// driverEnv is the node's environment without troupe's own variables,
// then the user's, then the job's (later entries win).
func driverEnv(base, user, job []string) []string {
	out := make([]string, 0, len(base)+len(user)+len(job))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "TROUPE_ADDRESS", "TROUPE_TOKEN", EnvJobID, worker.EnvVar, "TROUPE_WORKER_HOST":
			continue
		}
		out = append(out, kv)
	}
	out = append(out, user...)
	return append(out, job...)
}

// exitOf describes how the driver ended.
func exitOf(werr error, ps *os.ProcessState, stopping string) *JobExit {
	e := &JobExit{Code: -1}
	if ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal, e.SignalNum = ws.Signal().String(), int(ws.Signal())
		} else {
			e.Code = ps.ExitCode()
		}
	}
	switch {
	case e.Signal != "":
		e.Message = fmt.Sprintf("driver killed by signal %d (%s)", e.SignalNum, e.Signal)
	case e.Code >= 0:
		e.Message = fmt.Sprintf("driver exited with code %d", e.Code)
	default:
		e.Message = fmt.Sprintf("driver ended: %v", werr)
	}
	if werr != nil && ps != nil && errors.Is(werr, exec.ErrWaitDelay) {
		e.Message += " (its output pipes stayed open: a process it started still holds them)"
	}
	switch {
	case stopping != "":
		e.State = scheduler.JobStopped.String()
		e.Message = "stopped (" + stopping + "): " + e.Message
	case e.Code == 0 && e.Signal == "":
		e.State = scheduler.JobSucceeded.String()
	default:
		e.State = scheduler.JobFailed.String()
	}
	return e
}

func jobStateOf(s string) scheduler.JobState {
	for _, st := range []scheduler.JobState{scheduler.JobSucceeded, scheduler.JobFailed, scheduler.JobStopped} {
		if st.String() == s {
			return st
		}
	}
	return scheduler.JobFailed
}

// finish records a driver's end: output closed, local record, the job's
// final state committed (its actors die), then done.
func (m *jobManager) finish(p *jobProc, werr error) {
	n := m.n
	p.mu.Lock()
	exit := exitOf(werr, p.cmd.ProcessState, p.stopping)
	p.exit = exit
	p.mu.Unlock()
	p.out.Close()
	recPath := filepath.Join(p.dir, "job.json")
	if rec, err := readJobRecord(recPath); err == nil {
		rec.Exit, rec.EndedAt = exit, time.Now().UnixNano()
		writeJobRecord(recPath, rec)
	}
	n.log.Info("job driver ended", "job", p.id, "state", exit.State, "how", exit.Message)
	m.commitEnd(p.id, jobStateOf(exit.State), exit.Message)
	m.mu.Lock()
	delete(m.running, p.id)
	m.mu.Unlock()
	close(p.done)
}

// commitEnd commits a job's end, retrying for a while when there is no
// leader; refused means it has ended already.
func (m *jobManager) commitEnd(id scheduler.JobID, st scheduler.JobState, msg string) {
	n := m.n
	deadline := time.Now().Add(30 * time.Second)
	m.mu.Lock()
	if m.closing {
		deadline = time.Now().Add(2 * time.Second)
	}
	m.mu.Unlock()
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err := n.applyCommand(ctx, &scheduler.JobFinished{Job: id, State: st, Message: msg, At: time.Now().UnixNano()})
		cancel()
		var we *WireError
		switch {
		case err == nil:
			n.poke()
			return
		case errors.As(err, &we):
			n.log.Debug("job end refused", "job", id, "err", err)
			return
		case time.Now().After(deadline):
			n.log.Warn("could not commit the job's end (the leader's lease will end it)", "job", id, "err", err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop signals the driver's process group with SIGTERM, and SIGKILL after
// grace.
func (p *jobProc) stop(grace time.Duration, why string) {
	p.mu.Lock()
	first := p.stopping == ""
	if first {
		p.stopping = why
	}
	p.mu.Unlock()
	pid := p.cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	if !first {
		return
	}
	go func() {
		select {
		case <-p.done:
		case <-time.After(grace):
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}()
}

// stopAll ends every driver (node shutdown) and waits for them.
func (m *jobManager) stopAll() {
	m.mu.Lock()
	m.closing = true
	procs := make([]*jobProc, 0, len(m.running))
	for _, p := range m.running {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	for _, p := range procs {
		p.stop(2*time.Second, fmt.Sprintf("node %s shut down", m.n.cfg.NodeID))
	}
	for _, p := range procs {
		<-p.done
	}
}

// ---- the service's handlers ----

func (m *jobManager) submit(ctx context.Context, r *SubmitJobRequest) (*SubmitJobResponse, error) {
	n := m.n
	if err := checkSubmit(r); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	bin, err := n.BinaryPath(r.Hash)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "binary %.12s is not stored on node %s: upload it first", r.Hash, n.cfg.NodeID)
	}
	jobsDir, err := m.jobsDir()
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	id := scheduler.JobID(newJobID())
	dir := filepath.Join(jobsDir, string(id))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, status.Errorf(codes.Internal, "job dir: %v", err)
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
	if _, err := m.run(id, dir, bin, r); err != nil {
		m.commitEnd(id, scheduler.JobFailed, "driver did not start: "+err.Error())
		return nil, status.Errorf(codes.Internal, "job %s on node %s: %v", id, n.cfg.NodeID, err)
	}
	return &SubmitJobResponse{Job: string(id), Node: n.cfg.NodeID}, nil
}

// checkSubmit validates a submission's fields.
func checkSubmit(r *SubmitJobRequest) error {
	if !validHash(r.Hash) {
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
		var we *WireError
		if errors.As(err, &we) && errors.Is(err, scheduler.ErrConflict) {
			return &StopJobResponse{Job: r.Job, State: "ended"}, nil
		}
		return nil, err
	}
	n.poke()
	return &StopJobResponse{Job: r.Job, State: scheduler.JobStopped.String()}, nil
}

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
