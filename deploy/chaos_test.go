//go:build docker

package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"troupe/runtime/cluster"
)

// jobEvent is one JSON line of deploy/chaosjob's output.
type jobEvent struct {
	Event    string         `json:"event"`
	Step     int            `json:"step"`
	Actor    string         `json:"actor"`
	Expected int            `json:"expected_resume"`
	Nodes    map[string]int `json:"nodes"`
	WallMS   int64          `json:"wall_ms"`
	Restarts int            `json:"restarts"`
	Redone   int            `json:"redone"`
	Error    string         `json:"error"`
	Dir      string         `json:"dir"`
	T        int64          `json:"t_ms"`
	Result   *struct {
		Step        int    `json:"step"`
		Incarnation int    `json:"inc"`
		ResumedFrom int    `json:"resumed_from"`
		LastCkpt    int    `json:"last_ckpt"`
		Node        string `json:"node"`
	} `json:"result"`
}

// job is one run of deploy/chaosjob submitted with `troupe submit` from
// the host through a server's published port: the driver runs on that
// server (in its container, from the uploaded binary), its actors in
// worker processes the worker nodes start from the same binary.
type job struct {
	c      *composeEnv
	name   string // job name, run name and actor name prefix
	node   string // the server the driver runs on
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	err    error // troupe submit's exit (the driver's code)
}

// syncBuffer is a bytes.Buffer safe for one writer and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Job shape: small enough to take seconds on a loaded 2-core machine,
// long enough for a fault in the middle; a checkpoint every ckptEvery
// steps, and the fault after faultStep (past several checkpoints).
const (
	jobSteps  = 120
	ckptEvery = 10
	faultStep = 30
)

// follower returns a server that is not the raft leader now: where a job's
// driver runs, so that killing the leader does not kill the driver with it.
func (c *composeEnv) follower() string {
	c.t.Helper()
	st := c.committedStatus()
	for _, s := range servers {
		if s != st.Leader && nodeState(st, s) == "alive" {
			return s
		}
	}
	c.t.Fatalf("no live follower among %v (leader %s)", servers, st.Leader)
	return ""
}

// startJob submits the job to the server node; hold makes the driver wait
// after its last step until the test releases it (so the test can look at
// the cluster while the job's actors still live).
func (c *composeEnv) startJob(name, node string, hold bool) *job {
	c.t.Helper()
	j := &job{c: c, name: name, node: node, out: &syncBuffer{}, exited: make(chan struct{})}
	args := []string{"submit", "--address", "127.0.0.1:" + strconv.Itoa(c.ports[node]), "--name", name, c.jobBin, "--",
		"--name", name, "--dir", "/shared/" + name, "--actors", "2", "--steps", strconv.Itoa(jobSteps),
		"--ckpt-every", strconv.Itoa(ckptEvery), "--batch", "32", "--width", "64", "--timeout", "8m"}
	if hold {
		args = append(args, "--hold", "release")
	}
	j.cmd = exec.Command(c.bin, args...)
	j.cmd.Env = append(os.Environ(), "TROUPE_TOKEN="+c.token)
	j.cmd.Stdout, j.cmd.Stderr = j.out, j.out
	if err := j.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { j.err = j.cmd.Wait(); close(j.exited) }()
	c.t.Cleanup(func() {
		select {
		case <-j.exited:
		default:
			j.cmd.Process.Kill()
			<-j.exited
		}
	})
	return j
}

func (j *job) hasExited() bool {
	select {
	case <-j.exited:
		return true
	default:
		return false
	}
}

// events parses the job's output so far.
func (j *job) events() ([]jobEvent, string) {
	out := j.out.String()
	var evs []jobEvent
	for _, l := range strings.Split(out, "\n") {
		var e jobEvent
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &e) == nil && e.Event != "" {
			evs = append(evs, e)
		}
	}
	return evs, out
}

// waitEvent waits until an event satisfies cond and returns it; an
// "error" event or an ended job fails the test.
func (j *job) waitEvent(what string, timeout time.Duration, cond func(jobEvent) bool) jobEvent {
	j.c.t.Helper()
	var found jobEvent
	j.c.waitFor("job "+j.name+": "+what, timeout, func() (bool, string) {
		ended := j.hasExited() // before reading: the output is complete then
		evs, out := j.events()
		for _, e := range evs {
			if cond(e) {
				found = e
				return true, ""
			}
			if e.Event == "error" {
				j.c.t.Fatalf("job %s failed: %s\n%s", j.name, e.Error, tail(out, 30))
			}
		}
		if ended {
			j.c.t.Fatalf("job %s ended (%v) before %s:\n%s", j.name, j.err, what, tail(out, 30))
		}
		return false, fmt.Sprintf("%d events", len(evs))
	})
	return found
}

// finish waits for the job's "done" event and troupe submit's exit 0 (the
// driver's), and returns its events.
func (j *job) finish() (jobEvent, []jobEvent) {
	j.c.t.Helper()
	done := j.waitEvent("done", 5*time.Minute, func(e jobEvent) bool { return e.Event == "done" })
	j.c.waitFor("troupe submit of "+j.name+" to exit", 2*time.Minute, func() (bool, string) { return j.hasExited(), "running" })
	evs, out := j.events()
	if j.err != nil {
		j.c.t.Fatalf("job %s: troupe submit: %v\n%s", j.name, j.err, tail(out, 30))
	}
	return done, evs
}

// release lets a holding job end: the file it waits for is copied into
// its working directory in the container of the node that runs it.
func (j *job) release(ids map[string]string) {
	j.c.t.Helper()
	start := j.waitEvent("start", time.Minute, func(e jobEvent) bool { return e.Event == "start" })
	f := filepath.Join(j.c.controlDir, j.name+".release")
	if err := writeFile(f, "release\n"); err != nil {
		j.c.t.Fatal(err)
	}
	j.c.docker("cp", f, ids[j.node]+":"+start.Dir+"/release")
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// jobActors returns the live actors of a job (by name prefix) per node.
func jobActors(st *cluster.ClusterStatus, name string) map[string][]cluster.ActorView {
	out := map[string][]cluster.ActorView{}
	for _, a := range st.Actors {
		if strings.HasPrefix(a.Name, name+"-") && a.State != "DEAD" {
			out[a.Node] = append(out[a.Node], a)
		}
	}
	return out
}

// busiestWorker returns the worker holding most of the job's actors.
func (c *composeEnv) busiestWorker(name string) string {
	c.t.Helper()
	st, err := c.status()
	if err != nil {
		c.t.Fatal(err)
	}
	by := jobActors(st, name)
	best := ""
	for _, w := range workers {
		if best == "" || len(by[w]) > len(by[best]) {
			best = w
		}
	}
	if len(by[best]) == 0 {
		c.t.Fatalf("job %s: no actor on a worker: %v", name, by)
	}
	return best
}

// committedState is what must survive a fault: every actor record with its
// name and a restart count, the registered nodes, and the applied index.
type committedState struct {
	actors  map[string]cluster.ActorView
	nodes   []string
	applied uint64
}

// committedStatus returns a status from a server that knows a leader.
func (c *composeEnv) committedStatus() *cluster.ClusterStatus {
	c.t.Helper()
	var st *cluster.ClusterStatus
	c.waitFor("a status with a leader", time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		st = s
		return s.Leader != "", "no leader"
	})
	return st
}

func (c *composeEnv) committed() committedState {
	c.t.Helper()
	st := c.committedStatus()
	cs := committedState{actors: map[string]cluster.ActorView{}, applied: st.AppliedIndex}
	for _, a := range st.Actors {
		cs.actors[a.ID] = a
	}
	for _, n := range st.Nodes {
		cs.nodes = append(cs.nodes, n.ID)
	}
	sort.Strings(cs.nodes)
	return cs
}

// checkKept fails the test if anything committed before a fault is gone
// after it: an actor record, a registered node, or applied entries.
func (c *composeEnv) checkKept(fault string, before committedState) {
	c.t.Helper()
	after := c.committed()
	if after.applied < before.applied {
		c.t.Errorf("%s: applied index went back from %d to %d", fault, before.applied, after.applied)
	}
	if strings.Join(after.nodes, ",") != strings.Join(before.nodes, ",") {
		c.t.Errorf("%s: nodes %v before, %v after", fault, before.nodes, after.nodes)
	}
	for id, a := range before.actors {
		b, ok := after.actors[id]
		switch {
		case !ok:
			c.t.Errorf("%s: actor %s (%s) committed before is gone", fault, id, a.Name)
		case b.Name != a.Name || b.Class != a.Class || b.Restarts < a.Restarts:
			c.t.Errorf("%s: actor %s was %s/%s with %d restarts, now %s/%s with %d", fault, id, a.Name, a.Class, a.Restarts, b.Name, b.Class, b.Restarts)
		}
	}
}

// checkResumes checks the job's restart events: each restarted actor
// resumed from a checkpoint no older than the last one the driver saw it
// save (the driver also fails the job otherwise), and from a real one when
// the fault came after a checkpoint.
func (c *composeEnv) checkResumes(name string, evs []jobEvent, wantRestart bool) int {
	c.t.Helper()
	n := 0
	for _, e := range evs {
		if e.Event == "retry" {
			c.t.Logf("job %s: %s: step %d retried after: %s", name, e.Actor, e.Step, e.Error)
		}
		if e.Event != "restart" || e.Result == nil {
			continue
		}
		n++
		r := e.Result
		c.t.Logf("job %s: %s incarnation %d on %s resumed from step %d (last checkpoint seen %d)", name, e.Actor, r.Incarnation, r.Node, r.ResumedFrom, e.Expected)
		if r.ResumedFrom < e.Expected || (e.Expected >= ckptEvery && r.ResumedFrom == 0) || r.ResumedFrom%ckptEvery != 0 {
			c.t.Errorf("job %s: %s resumed from step %d; its last checkpoint was step %d or later", name, e.Actor, r.ResumedFrom, e.Expected)
		}
	}
	if wantRestart && n == 0 {
		c.t.Errorf("job %s: no actor was restarted, though its worker was lost", name)
	}
	c.checkNoOverlap(name)
	return n
}

// checkNoOverlap copies the job's directory out of the shared volume
// (through a worker container: the image has no shell) and runs the chaos
// job's --check-lives on it: no write of a replaced incarnation took
// effect after its successor started (the incarnations that ran on,
// fenced off, are logged).
func (c *composeEnv) checkNoOverlap(name string) {
	c.t.Helper()
	dst := filepath.Join(c.t.TempDir(), name)
	ids := c.containers()
	var err error
	for _, w := range []string{"worker-1", "worker-2"} {
		if _, err = run(context.Background(), nil, "docker", "cp", ids[w]+":/shared/"+name, dst); err == nil {
			break
		}
	}
	if err != nil {
		c.t.Errorf("job %s: copy its directory out of the shared volume: %v", name, err)
		return
	}
	out, err := run(context.Background(), nil, c.jobBin, "--check-lives", dst, "--name", name, "--actors", "2")
	if err != nil {
		c.t.Errorf("job %s: %v\n%s", name, err, out)
		return
	}
	c.t.Logf("job %s: %s", name, strings.TrimSpace(out))
}

// stepTimes returns how long a job took from its first step to its last
// (its training, without the spawn and the binary's first upload) and
// the longest time between two consecutive steps: how long a fault held
// the whole job up.
func stepTimes(evs []jobEvent) (training, stall time.Duration) {
	first, last, worst := int64(-1), int64(0), int64(0)
	for _, e := range evs {
		if e.Event != "step" {
			continue
		}
		if first < 0 {
			first = e.T
		} else {
			worst = max(worst, e.T-last)
		}
		last = e.T
	}
	return time.Duration(last-first) * time.Millisecond, time.Duration(worst) * time.Millisecond
}

// stallTarget is the stall a lost worker should cause at most (the issue's
// target) and stallBound what the test asserts: on a loaded 2-core machine
// gossip's detection and a worker process's start stretch, so the test
// holds the stall to a looser bound (it was about 18 s when the leader
// waited out 1.5 leases) and reports the figure against the target.
const (
	stallTarget = 5 * time.Second
	stallBound  = 10 * time.Second
)

// checkStall reports how long a lost worker held the job up (the longest
// time between two steps, beside the longest without a fault) and fails
// the test beyond stallBound.
func (c *composeEnv) checkStall(fault string, stall, normal time.Duration) {
	c.t.Helper()
	verdict := "within"
	if stall > stallTarget {
		verdict = "above"
	}
	c.t.Logf("MEASURE stall after %s: %v between two steps (a step takes up to %v without a fault): %s the %v target",
		fault, stall.Round(time.Millisecond), normal.Round(time.Millisecond), verdict, stallTarget)
	if stall > stallBound {
		c.t.Errorf("%s: the job stalled %v between two steps, beyond %v", fault, stall.Round(time.Millisecond), stallBound)
	}
}

// jobProcs counts the processes in a container other than the troupe node
// and its health checks: the job worker processes it runs.
func (c *composeEnv) jobProcs(id string) int {
	out, err := run(context.Background(), nil, "docker", "top", id)
	if err != nil {
		return -1
	}
	n := 0
	for i, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if i > 0 && !strings.Contains(l, "/usr/local/bin/troupe") {
			n++
		}
	}
	return n
}
