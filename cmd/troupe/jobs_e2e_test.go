package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime"
	"troupe/runtime/cluster"
	"troupe/runtime/worker"
)

// The job tests submit this test binary as the driver: with
// TROUPE_TEST_JOB_DRIVER set (through troupe submit --env) it runs
// TestJobDriverHelperProcess in the given mode; the worker processes the
// nodes start from the same uploaded binary serve jobProbe actors.

const jobDriverEnv = "TROUPE_TEST_JOB_DRIVER"

const driverRun = "-test.run=^TestJobDriverHelperProcess$"

type jobProbe struct{}

func (p *jobProbe) Pid(ctx context.Context, _ int) (int, error) { return os.Getpid(), nil }

// Blob returns n bytes: from 256 KiB on, the result stays in the worker's
// object store.
func (p *jobProbe) Blob(ctx context.Context, n int) ([]byte, error) { return make([]byte, n), nil }

func init() {
	actors.MustRegister("JobProbe", func(ctx context.Context, _ int) (*jobProbe, error) { return &jobProbe{}, nil })
}

func TestJobDriverHelperProcess(t *testing.T) {
	_, isWorker := os.LookupEnv(worker.EnvVar)
	mode := os.Getenv(jobDriverEnv)
	if !isWorker && mode == "" {
		t.Skip("helper process for the job tests")
	}
	os.Exit(jobDriver(mode))
}

// jobDriver is the driver program of the job tests.
func jobDriver(mode string) int {
	ctx := context.Background()
	rt, err := runtime.Init(ctx) // a worker serves JobProbe here, then returns ErrWorkerDone
	if errors.Is(err, runtime.ErrWorkerDone) {
		return 0
	}
	if err != nil {
		fmt.Println("init:", err)
		return 10
	}
	switch mode {
	case "fail":
		fmt.Println("about to fail")
		fmt.Fprintln(os.Stderr, "failing on stderr")
		return 7
	case "objects":
		// An actor on the worker node holds a 1 MiB result for this
		// driver, which holds its future until killed.
		h, err := actors.Spawn[jobProbe](ctx, rt, "JobProbe", 0, actors.Resources(map[string]float64{"special": 1}), actors.Name("prober"))
		if err != nil {
			fmt.Println("spawn:", err)
			return 11
		}
		pid, err := actors.Call(ctx, h, (*jobProbe).Pid, 0).Get(ctx)
		if err != nil {
			fmt.Println("call:", err)
			return 12
		}
		blob := actors.Call(ctx, h, (*jobProbe).Blob, 1<<20)
		if _, err := blob.Get(ctx); err != nil {
			fmt.Println("blob:", err)
			return 12
		}
		heldBlob = blob // not garbage: its object stays in the worker
		fmt.Printf("driver-pid %d actor-pid %d actor-id %s job %s\n", os.Getpid(), pid, h.ID(), os.Getenv(cluster.EnvJobID))
		select {} // until killed
	case "ok", "hold":
		// The actor needs the worker node's "special" resource: it runs on
		// the other node.
		h, err := actors.Spawn[jobProbe](ctx, rt, "JobProbe", 0, actors.Resources(map[string]float64{"special": 1}))
		if err != nil {
			fmt.Println("spawn:", err)
			return 11
		}
		pid, err := actors.Call(ctx, h, (*jobProbe).Pid, 0).Get(ctx)
		if err != nil {
			fmt.Println("call:", err)
			return 12
		}
		fmt.Printf("driver-pid %d actor-pid %d actor-id %s job %s\n", os.Getpid(), pid, h.ID(), os.Getenv(cluster.EnvJobID))
		if mode == "hold" {
			select {} // until killed
		}
		if err := rt.Shutdown(ctx); err != nil {
			fmt.Println("shutdown:", err)
			return 13
		}
		return 0
	}
	fmt.Println("unknown mode", mode)
	return 14
}

// heldBlob keeps the objects driver's future alive.
var heldBlob any

var driverLine = regexp.MustCompile(`driver-pid (\d+) actor-pid (\d+) actor-id (\S+)`)

// driverPIDs parses the line the driver prints once its actor answered.
func driverPIDs(out string) (driver, actor int, actorID string, ok bool) {
	m := driverLine.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, "", false
	}
	driver, _ = strconv.Atoi(m[1])
	actor, _ = strconv.Atoi(m[2])
	return driver, actor, m[3], true
}

func exitCodeOf(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func jobsJSON(t *testing.T, env []string, addr string) []cluster.JobView {
	t.Helper()
	out, err := cliRun(t, env, "jobs", "--json", "--address", addr)
	if err != nil {
		t.Fatalf("jobs: %v\n%s", err, out)
	}
	if i := strings.LastIndex(out, "\n]"); i >= 0 {
		out = out[:i+2]
	}
	var list []cluster.JobView
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("jobs --json: %v: %s", err, out)
	}
	return list
}

func jobByID(list []cluster.JobView, id string) *cluster.JobView {
	for i := range list {
		if list[i].ID == id {
			return &list[i]
		}
	}
	return nil
}

// waitJob polls cond every 100 ms until it holds or 30 s pass.
func waitJob(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return true
	}
	// A zombie (not yet reaped by its node) counts as gone.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

// startHandDriver runs the driver in hold mode as a user would, with
// TROUPE_ADDRESS and TROUPE_TOKEN, not through troupe submit.
func startHandDriver(t *testing.T, exe string, env []string) (*cliProc, *exec.Cmd) {
	t.Helper()
	p := &cliProc{done: make(chan struct{})}
	cmd := exec.Command(exe, driverRun)
	cmd.Env = append(append(os.Environ(), env...), jobDriverEnv+"=hold")
	cmd.Stdout, cmd.Stderr = p, p
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	return p, cmd
}

// jobOfDriver finds the job of a driver started by hand by its PID.
func jobOfDriver(t *testing.T, env []string, addr string, pid int) *cluster.JobView {
	t.Helper()
	for _, j := range jobsJSON(t, env, addr) {
		if strings.HasSuffix(j.Driver, fmt.Sprintf(" pid %d", pid)) {
			return &j
		}
	}
	return nil
}

func actorState(t *testing.T, env []string, id string) string {
	st, err := statusJSON(t, env)
	if err != nil {
		return ""
	}
	for _, a := range st.Actors {
		if a.ID == id {
			return a.State
		}
	}
	return ""
}

// TestJobsEndToEnd: a two-node cluster (head, and a worker with the
// resource the driver's actor needs); troupe submit streams a driver's
// output and exits with its code (0, then 7 for a failing one); troupe
// logs shows the output later from the other node; troupe jobs lists the
// states; a binary for another architecture is refused; a driver killed
// with -9 (submitted, and one started by hand) ends its job and frees its
// actor; troupe stop-job stops a running one.
func TestJobsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process job test: skipped in -short")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	headAddr, _ := freeAddr(t, "127.0.0.61")
	startCLI(t, nil, "start", "--head", "--data-dir", filepath.Join(dir, "head"), "--bind", headAddr, "--fast-timers", "--node-id", "head",
		"--resources", "cpu=2,memory=1G")
	tokFile := filepath.Join(dir, "head", "token")
	var tok []byte
	waitJob(t, "the head's token file", func() bool {
		tok, _ = os.ReadFile(tokFile)
		return len(tok) > 0
	})
	env := []string{"TROUPE_TOKEN=" + strings.TrimSpace(string(tok)), "TROUPE_ADDRESS=" + headAddr}
	workerAddr, _ := freeAddr(t, "127.0.0.62")
	startCLI(t, env, "start", "--join", headAddr, "--bind", workerAddr, "--data-dir", filepath.Join(dir, "worker"), "--fast-timers",
		"--node-id", "worker", "--resources", "cpu=2,memory=1G,special=4")
	waitJob(t, "head and worker alive", func() bool {
		st, err := statusJSON(t, env)
		return err == nil && nodeStateOf(st, "head") == "alive" && nodeStateOf(st, "worker") == "alive"
	})

	// A driver that succeeds: its output streams back, the CLI exits 0.
	p := startCLI(t, env, "submit", "--name", "good", "--env", jobDriverEnv+"=ok", exe, "--", driverRun)
	<-p.done
	out := p.output()
	if p.err != nil || !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("submit of a succeeding driver: %v\n%s", p.err, out)
	}
	if _, _, actorID, ok := driverPIDs(out); !ok {
		t.Fatalf("driver output not streamed:\n%s", out)
	} else if s := actorState(t, env, actorID); s != "DEAD" {
		t.Errorf("actor of the finished job is %q, want DEAD", s)
	}

	// A failing driver: the CLI exits with its code; the output (stdout
	// and stderr) is kept and shown later from the other node.
	p = startCLI(t, env, "submit", "--name", "bad", "--env", jobDriverEnv+"=fail", exe, driverRun)
	<-p.done
	if code := exitCodeOf(p.err); code != 7 || !strings.Contains(p.output(), "about to fail") {
		t.Fatalf("submit of a failing driver: exit %d (%v), want 7\n%s", code, p.err, p.output())
	}
	out, err = cliRun(t, env, "logs", "--address", workerAddr, "bad")
	if err != nil || !strings.Contains(out, "about to fail") || !strings.Contains(out, "failing on stderr") || !strings.Contains(out, "exited with code 7") {
		t.Errorf("logs of the failed job from the worker node: %v\n%s", err, out)
	}
	list := jobsJSON(t, env, workerAddr)
	states := map[string]string{}
	for _, j := range list {
		states[j.Name] = j.State
		if j.Name == "bad" && (j.Node != "head" || !strings.Contains(j.Message, "code 7")) {
			t.Errorf("failed job %+v", j)
		}
	}
	if states["good"] != "SUCCEEDED" || states["bad"] != "FAILED" {
		t.Errorf("job states %v", states)
	}

	// A binary for another architecture is refused before anything runs.
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint16(b[18:20], 183) // e_machine = EM_AARCH64
	arm := filepath.Join(dir, "driver-arm64")
	if err := os.WriteFile(arm, b, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err = cliRun(t, env, "submit", arm)
	if exitCodeOf(err) != 1 || !strings.Contains(out, "cannot run") || !strings.Contains(out, "AARCH64") {
		t.Errorf("submit of an arm64 binary: %v\n%s", err, out)
	}

	// kill -9 of a submitted driver: the node reports it, the job fails
	// and its actor (on the other node) dies with its worker process.
	out, err = cliRun(t, env, "submit", "--detach", "--name", "held", "--env", jobDriverEnv+"=hold", exe, driverRun)
	if err != nil {
		t.Fatalf("submit --detach: %v\n%s", err, out)
	}
	jobID := strings.Fields(out)[0]
	var driverPID, actorPID int
	var actorID string
	waitJob(t, "the held driver's actor", func() bool {
		out, _ := cliRun(t, env, "logs", jobID)
		var ok bool
		driverPID, actorPID, actorID, ok = driverPIDs(out)
		return ok
	})
	syscall.Kill(driverPID, syscall.SIGKILL)
	waitJob(t, "the killed driver's job to fail", func() bool {
		j := jobByID(jobsJSON(t, env, headAddr), jobID)
		return j != nil && j.State == "FAILED" && strings.Contains(j.Message, "signal 9")
	})
	waitJob(t, "the killed driver's actor to die", func() bool { return actorState(t, env, actorID) == "DEAD" })
	waitJob(t, "the actor's worker process to exit", func() bool { return gone(actorPID) })

	// kill -9 of a driver started by hand: its keep-alives stop and the
	// leader ends the job after the lease (4 s with fast timers).
	direct, cmd := startHandDriver(t, exe, env)
	waitJob(t, "the hand-started driver's actor", func() bool {
		_, actorPID, actorID, _ = driverPIDs(direct.output())
		return actorID != ""
	})
	cmd.Process.Kill()
	<-direct.done
	waitJob(t, "the lost driver's actor to die", func() bool { return actorState(t, env, actorID) == "DEAD" })
	lost := jobOfDriver(t, env, headAddr, cmd.Process.Pid)
	if lost == nil || lost.State != "FAILED" || !strings.Contains(lost.Message, "driver lost") {
		t.Errorf("job of the driver killed by hand: %+v", lost)
	}
	waitJob(t, "the lost driver's worker process to exit", func() bool { return gone(actorPID) })

	// stop-job of a job whose driver was started by hand: the job ends
	// (its actor dies) and the driver is told.
	direct, cmd = startHandDriver(t, exe, env)
	waitJob(t, "the second hand-started driver's actor", func() bool {
		_, _, actorID, _ = driverPIDs(direct.output())
		return actorID != ""
	})
	if j := jobOfDriver(t, env, headAddr, cmd.Process.Pid); j == nil {
		t.Errorf("no job for the driver started by hand")
	} else if out, err := cliRun(t, env, "stop-job", j.ID); err != nil || !strings.Contains(out, "stopped") {
		t.Errorf("stop-job of a hand-started driver's job: %v\n%s", err, out)
	}
	waitJob(t, "the stopped hand-started job's actor to die", func() bool { return actorState(t, env, actorID) == "DEAD" })
	waitJob(t, "the driver to hear that its job ended", func() bool { return strings.Contains(direct.output(), "was ended by the cluster") })
	cmd.Process.Kill()

	// stop-job ends a running job (SIGTERM to its driver) and its actor.
	out, err = cliRun(t, env, "submit", "--detach", "--name", "tostop", "--env", jobDriverEnv+"=hold", exe, driverRun)
	if err != nil {
		t.Fatalf("submit --detach: %v\n%s", err, out)
	}
	jobID = strings.Fields(out)[0]
	waitJob(t, "the driver to stop's actor", func() bool {
		out, _ := cliRun(t, env, "logs", "--address", workerAddr, "tostop")
		_, _, actorID, _ = driverPIDs(out)
		return actorID != ""
	})
	out, err = cliRun(t, env, "stop-job", "--address", workerAddr, "tostop")
	if err != nil || !strings.Contains(out, "STOPPED") {
		t.Errorf("stop-job: %v\n%s", err, out)
	}
	waitJob(t, "the stopped job's actor to die", func() bool { return actorState(t, env, actorID) == "DEAD" })
	out, err = cliRun(t, env, "logs", "--follow", jobID)
	if err != nil || !strings.Contains(out, "STOPPED") || !strings.Contains(out, "signal 15") {
		t.Errorf("logs --follow of the stopped job: %v\n%s", err, out)
	}
}

// listJSON runs troupe list with --json and decodes the array.
func listJSON[T any](t *testing.T, env []string, args ...string) []T {
	t.Helper()
	out, err := cliRun(t, env, append([]string{"list", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("list %v: %v\n%s", args, err, out)
	}
	if i := strings.LastIndex(out, "\n]"); i >= 0 {
		out = out[:i+2]
	}
	var list []T
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("list %v --json: %v: %s", args, err, out)
	}
	return list
}

// TestWorkingDirAndListEndToEnd: troupe submit --working-dir runs a shell
// script in a fresh copy of the directory (the driver it starts finds the
// cluster through the environment) and `go run .` of a Go module; a
// script given as BINARY is refused saying what to do; troupe list shows
// the job, its actor (filtered by state, and in detail) and the 1 MiB
// object the actor holds in its worker; a drained node is listed as
// drained, not dead.
func TestWorkingDirAndListEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process job test: skipped in -short")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	headAddr, _ := freeAddr(t, "127.0.0.63")
	startCLI(t, nil, "start", "--head", "--data-dir", filepath.Join(dir, "head"), "--bind", headAddr, "--fast-timers", "--node-id", "head",
		"--resources", "cpu=2,memory=1G")
	tokFile := filepath.Join(dir, "head", "token")
	var tok []byte
	waitJob(t, "the head's token file", func() bool {
		tok, _ = os.ReadFile(tokFile)
		return len(tok) > 0
	})
	env := []string{"TROUPE_TOKEN=" + strings.TrimSpace(string(tok)), "TROUPE_ADDRESS=" + headAddr}
	workerAddr, _ := freeAddr(t, "127.0.0.64")
	workerProc := startCLI(t, env, "start", "--join", headAddr, "--bind", workerAddr, "--data-dir", filepath.Join(dir, "worker"), "--fast-timers",
		"--node-id", "worker", "--resources", "cpu=2,memory=1G,special=4", "--labels", "zone=b")
	waitJob(t, "head and worker alive", func() bool {
		nodes := listJSON[cluster.NodeView](t, env, "nodes", "--filter", "state=alive")
		return len(nodes) == 2
	})
	if nodes := listJSON[cluster.NodeView](t, env, "nodes", "--filter", "labels.zone=b"); len(nodes) != 1 || nodes[0].ID != "worker" {
		t.Errorf("nodes in zone b: %+v", nodes)
	}

	// A script as BINARY: refused, saying to use --working-dir.
	wd := filepath.Join(dir, "project")
	os.MkdirAll(filepath.Join(wd, "runs"), 0o755)
	os.WriteFile(filepath.Join(wd, "data.txt"), []byte("payload"), 0o644)
	os.WriteFile(filepath.Join(wd, "runs", "huge.bin"), make([]byte, 1<<20), 0o644)
	os.WriteFile(filepath.Join(wd, "run.sh"), []byte("#!/bin/sh\necho \"in $(basename \"$PWD\") with $(cat data.txt); runs: $(ls runs 2>/dev/null | wc -l)\"\nexec \"$TROUPE_TEST_EXE\" '"+driverRun+"'\n"), 0o755)
	out, err := cliRun(t, env, "submit", filepath.Join(wd, "run.sh"))
	if exitCodeOf(err) != 1 || !strings.Contains(out, "is a script (#!/bin/sh)") || !strings.Contains(out, "--working-dir "+wd+" -- ./run.sh") {
		t.Errorf("submit of a script as BINARY: %v\n%s", err, out)
	}

	// The script in its working dir starts the driver, which spawns an
	// actor holding a 1 MiB result; runs/ is left out.
	out, err = cliRun(t, env, "submit", "--detach", "--name", "wd", "--working-dir", wd, "--exclude", "runs",
		"--env", "TROUPE_TEST_EXE="+exe, "--env", jobDriverEnv+"=objects", "--", "./run.sh")
	if err != nil {
		t.Fatalf("submit --working-dir: %v\n%s", err, out)
	}
	jobID := strings.Fields(out)[0]
	var actorID string
	var logs string
	waitJob(t, "the working-dir driver's actor", func() bool {
		logs, _ = cliRun(t, env, "logs", jobID)
		_, _, actorID, _ = driverPIDs(logs)
		return actorID != ""
	})
	if !strings.Contains(logs, "in wd with payload; runs: 0") {
		t.Errorf("the script did not run in a copy of the working dir without runs/:\n%s", logs)
	}
	jobs := listJSON[cluster.JobView](t, env, "jobs", "--filter", "name=wd")
	if len(jobs) != 1 || jobs[0].ID != jobID || jobs[0].State != "RUNNING" || jobs[0].Entrypoint != "./run.sh" {
		t.Errorf("list jobs --filter name=wd: %+v", jobs)
	}
	alive := listJSON[cluster.ActorView](t, env, "actors", "--filter", "state=ALIVE", "--filter", "class=JobProbe")
	if len(alive) != 1 || alive[0].ID != actorID || alive[0].Node != "worker" || alive[0].Job != jobID || alive[0].Name != "prober" {
		t.Errorf("list actors --filter state=ALIVE: %+v, want %s on worker in job %s", alive, actorID, jobID)
	}
	objs := listJSON[cluster.ObjectView](t, env, "objects")
	if len(objs) != 1 || objs[0].Actor != actorID || objs[0].Node != "worker" || objs[0].Size < 1<<20 || objs[0].Job != jobID {
		t.Errorf("list objects: %+v, want the 1 MiB result of %s on worker", objs, actorID)
	}
	out, err = cliRun(t, env, "list", "actors", "--detail", "prober")
	if err != nil || !strings.Contains(out, "id: "+actorID) || !strings.Contains(out, "resources: cpu=0 mem=0B gpu=0 special=1") {
		t.Errorf("list actors --detail prober: %v\n%s", err, out)
	}
	if out, err := cliRun(t, env, "stop-job", jobID); err != nil || !strings.Contains(out, "STOPPED") {
		t.Errorf("stop-job: %v\n%s", err, out)
	}
	waitJob(t, "the actor dead", func() bool {
		return len(listJSON[cluster.ActorView](t, env, "actors", "--filter", "state=DEAD", "--filter", "id="+actorID)) == 1
	})
	if dead := listJSON[cluster.ActorView](t, env, "actors", "--dead-retention", "1ns", "--filter", "id="+actorID); len(dead) != 0 {
		t.Errorf("an actor dead longer than --dead-retention is listed: %+v", dead)
	}

	// go run . of a Go module in its working dir.
	mod := filepath.Join(dir, "hello")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(mod, "main.go"), []byte("package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tfmt.Println(\"hello from\", os.Getenv(\"TROUPE_JOB_ID\") != \"\", os.Args[1:])\n}\n"), 0o644)
	out, err = cliRun(t, env, "submit", "--working-dir", mod, "--", "go", "run", ".", "x", "y")
	if err != nil || !strings.Contains(out, "hello from true [x y]") {
		t.Errorf("submit --working-dir -- go run .: %v\n%s", err, out)
	}

	// A drained node is listed as drained.
	if out, err := cliRun(t, env, "stop", "--address", workerAddr); err != nil {
		t.Fatalf("stop worker: %v\n%s", err, out)
	}
	<-workerProc.done
	waitJob(t, "the worker listed as drained", func() bool {
		nodes := listJSON[cluster.NodeView](t, env, "nodes", "--filter", "id=worker")
		return len(nodes) == 1 && nodes[0].State == cluster.NodeDrained
	})
}
