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
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"troupe/runtime/worker"
	"troupe/scheduler"

	"troupe/runtime/api"
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
	Hash      string   `json:"hash,omitempty"`
	Package   string   `json:"package,omitempty"`
	Args      []string `json:"args,omitempty"`
	Workdir   string   `json:"workdir,omitempty"` // where the driver ran (a resumed job: its predecessor's)
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

// keepAliveEvery is how often keep-alives are sent: seven can be lost or
// late (a loaded machine, a leader election) before a lease runs out.
func (n *Node) keepAliveEvery() time.Duration { return max(n.jobLease()/8, 100*time.Millisecond) }

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

// keptJobs is how many finished jobs' directories (output and record) a
// node keeps; older ones are removed when a job is submitted.
const keptJobs = 100

// pruneJobDirs removes the directories of finished jobs beyond the newest
// keep (by end time). Running jobs and directories without a record are
// left alone.
func pruneJobDirs(jobsDir string, keep int) error {
	ents, err := os.ReadDir(jobsDir)
	if err != nil {
		return err
	}
	type ended struct {
		dir string
		at  int64
	}
	var done []ended
	inUse := map[string]bool{} // the dirs later jobs run in (resumed jobs)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(jobsDir, e.Name())
		rec, err := readJobRecord(filepath.Join(dir, "job.json"))
		if err == nil && rec.Workdir != "" && !strings.HasPrefix(rec.Workdir+string(filepath.Separator), dir+string(filepath.Separator)) {
			inUse[jobDirOf(jobsDir, rec.Workdir)] = true
		}
		if err != nil || rec.Exit == nil {
			continue
		}
		done = append(done, ended{dir, rec.EndedAt})
	}
	done = slices.DeleteFunc(done, func(d ended) bool { return inUse[d.dir] })
	if len(done) <= keep {
		return nil
	}
	sort.Slice(done, func(a, b int) bool { return done[a].at > done[b].at })
	var errs []error
	for _, d := range done[keep:] {
		if err := os.RemoveAll(d.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// run starts the driver process of a job: bin with the request's
// arguments, in wd (the job's dir, or its unpacked working dir in it).
func (m *jobManager) run(id scheduler.JobID, dir, wd, bin string, r *SubmitJobRequest) (*jobProc, error) {
	n := m.n
	out, err := newJobLog(dir, DefaultJobLogBytes)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, r.Args...)
	if r.Package != "" {
		cmd.Args[0] = r.Program // as typed: "./run.sh", "go"
	}
	cmd.Dir = wd
	jobEnv := append([]string{"TROUPE_ADDRESS=" + n.r.grpcAddr(), "TROUPE_TOKEN=" + n.cfg.Token, EnvJobID + "=" + string(id)}, n.driverTLSEnv()...)
	if r.Resume != "" {
		jobEnv = append(jobEnv, EnvResume+"="+r.Resume)
	}
	cmd.Env = driverEnv(os.Environ(), r.Env, jobEnv)
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
	// recorded is closed once job.json exists: finish adds the exit to it,
	// and a driver that ends at once must not finish before it is written
	// (its exit would be lost and the job read back as "node stopped").
	recorded := make(chan struct{})
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
		werr := cmd.Wait()
		<-recorded
		m.finish(p, werr)
	}()
	if err := <-started; err != nil {
		m.mu.Lock()
		delete(m.running, id)
		m.mu.Unlock()
		out.Close()
		return nil, fmt.Errorf("start driver: %w", err)
	}
	rec := &jobRecord{ID: string(id), Name: r.Name, Program: r.Program, Hash: r.Hash, Package: r.Package, Args: r.Args, Workdir: wd, PID: cmd.Process.Pid, StartedAt: time.Now().UnixNano()}
	if err := writeJobRecord(filepath.Join(dir, "job.json"), rec); err != nil {
		n.log.Warn("job record", "job", id, "err", err)
	}
	close(recorded)
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
		case "TROUPE_ADDRESS", "TROUPE_TOKEN", EnvJobID, EnvResume, worker.EnvVar, "TROUPE_WORKER_HOST":
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
	// Processes the driver started and left behind end with it (its
	// group's ID stays taken while any of them lives, so this reaches
	// only them).
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
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
		var we *api.Error
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
	if p.exit != nil { // reaped: its process group ID may be reused
		p.mu.Unlock()
		return
	}
	first := p.stopping == ""
	if first {
		p.stopping = why
	}
	pid := p.cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	p.mu.Unlock()
	if !first {
		return
	}
	go func() {
		select {
		case <-p.done:
		case <-time.After(grace):
			p.mu.Lock()
			if p.exit == nil {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
			p.mu.Unlock()
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
