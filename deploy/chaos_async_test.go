//go:build docker

package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"troupe/algorithms/trainer/checkpoint"
)

// The asynchronous job's shape: a checkpoint every step (the job's own
// setting), a rollout worker's node killed after asyncWorkerFault steps and
// the learners' process after asyncLearnerFault.
const (
	asyncSteps        = 40
	asyncWorkerFault  = 10
	asyncLearnerFault = 25
)

// TestComposeAsyncChaos brings up deploy/compose.yaml and runs a training
// job with rollout workers on it (deploy/asyncjob: AT-GRPO, two rollout
// workers per policy, max staleness 1, --recover), the learners on the
// server that runs the driver (their checkpoint files and the driver's
// must land in one directory, and only the workers mount /shared), rollout
// worker 0 on worker-1 and rollout worker 1 on worker-2. After step
// asyncWorkerFault it kills worker-1's container (a rollout worker's node
// lost): the learner must not stall, since the other worker samples a
// backup of the chunk in flight on the lost node. After step
// asyncLearnerFault the job kills the process hosting the learners: the
// run restores its last checkpoint and replays the steps since. It
// reports the stall of each (the longest time between two steps after the
// fault, beside the longest before it), and checks the run ends with every
// step recorded once and its checkpoints verifying.
func TestComposeAsyncChaos(t *testing.T) {
	if _, err := run(context.Background(), nil, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no Docker engine answers (docker info failed), skipping the compose chaos test: %v", err)
	}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("docker-compose not found, skipping the compose chaos test")
	}
	sweepStale(t)
	dir := t.TempDir()
	c := &composeEnv{t: t, project: fmt.Sprintf("troupetest%d", os.Getpid()), bin: filepath.Join(dir, "troupe"),
		jobBin: filepath.Join(dir, "asyncjob"), controlDir: filepath.Join(dir, "control")}
	start := time.Now()
	build := exec.Command("go", "build", "-trimpath", "-tags", "netgo,osusergo", "-o", dir+"/", "./cmd/troupe", "./deploy/asyncjob")
	build.Dir, build.Env = "..", append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c.image = "troupe:test-" + strconv.Itoa(os.Getpid())
	if _, err := run(context.Background(), []string{"TROUPE_BINARY=" + c.bin, "TROUPE_IMAGE=" + c.image}, "sh", "build-image.sh"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run(context.Background(), nil, "docker", "rmi", "-f", c.image) })
	t.Logf("binaries and image built in %v", time.Since(start).Round(time.Millisecond))

	var tb [32]byte
	rand.Read(tb[:])
	c.token = hex.EncodeToString(tb[:])
	c.envFile = filepath.Join(dir, "cluster.env")
	if err := os.WriteFile(c.envFile, []byte("TROUPE_TOKEN="+c.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.subnet = freeSubnet(t)
	p := []int{freePort(t), freePort(t), freePort(t)}
	c.addrs = fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", p[0], p[1], p[2])
	c.ports = map[string]int{"server-1": p[0], "server-2": p[1], "server-3": p[2]}
	c.env = []string{"TROUPE_IMAGE=" + c.image, "TROUPE_ENV_FILE=" + c.envFile, "TROUPE_SUBNET=" + c.subnet,
		"TROUPE_PORT_1=" + strconv.Itoa(p[0]), "TROUPE_PORT_2=" + strconv.Itoa(p[1]), "TROUPE_PORT_3=" + strconv.Itoa(p[2])}
	t.Cleanup(func() {
		if t.Failed() {
			if logs, err := c.compose("logs", "--no-color", "--tail", "40"); err == nil {
				t.Logf("container logs:\n%s", logs)
			}
		}
		if out, err := c.compose("down", "-v", "--remove-orphans", "-t", "2"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, out)
		}
	})
	c.mustCompose("up", "-d")
	ids := c.containers()
	c.waitFor("5 nodes alive and a leader", 2*time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		for id := range ids {
			if nodeState(s, id) != "alive" {
				return false, id + " is " + nodeState(s, id)
			}
		}
		return s.Leader != "", "no leader"
	})

	const name = "asyncchaos"
	node := c.follower() // the driver's and the learners' server
	j := &job{c: c, name: name, node: node, out: &syncBuffer{}, exited: make(chan struct{})}
	j.cmd = exec.Command(c.bin, "submit", "--address", "127.0.0.1:"+strconv.Itoa(c.ports[node]), "--name", name, c.jobBin, "--",
		"--name", name, "--dir", "run", "--steps", strconv.Itoa(asyncSteps), "--learner-node", node,
		"--worker-nodes", "worker-1,worker-2", "--kill-learner-after", strconv.Itoa(asyncLearnerFault), "--timeout", "8m")
	j.cmd.Env = append(os.Environ(), "TROUPE_TOKEN="+c.token)
	j.cmd.Stdout, j.cmd.Stderr = j.out, j.out
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.err = j.cmd.Wait(); close(j.exited) }()
	t.Cleanup(func() {
		select {
		case <-j.exited:
		default:
			j.cmd.Process.Kill()
			<-j.exited
		}
	})
	started := j.waitEvent("start", 3*time.Minute, func(e jobEvent) bool { return e.Event == "start" })
	if started.Nodes[node] != 2 {
		t.Fatalf("the learners are on %v, not on %s (does the server take actors?)", started.Nodes, node)
	}

	// A rollout worker's node lost.
	j.waitEvent(fmt.Sprintf("step %d", asyncWorkerFault), 3*time.Minute, func(e jobEvent) bool { return e.Event == "step" && e.Step >= asyncWorkerFault })
	st, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, a := range jobActors(st, name)["worker-1"] {
		on = append(on, a.Name)
		if !strings.HasPrefix(a.Name, name+"-rollout0-") {
			t.Fatalf("actor %s is on worker-1 beside rollout worker 0: killing the node would lose more than a rollout worker", a.Name)
		}
	}
	if len(on) == 0 {
		t.Fatalf("no actor of rollout worker 0 on worker-1: %v", jobActors(st, name))
	}
	evs, _ := j.events()
	killAt := len(evs)
	c.docker("kill", ids["worker-1"])
	t.Logf("killed worker-1 (rollout worker 0: %v) after step %d", on, asyncWorkerFault)

	_, evs = j.finish()
	learnerAt := -1
	for i, e := range evs {
		if e.Event == "kill" {
			learnerAt = i
		}
	}
	if learnerAt < 0 {
		t.Fatalf("the job never killed the learners' process:\n%s", tail(j.out.String(), 40))
	}
	before, afterWorker, afterLearner := asyncStall(evs[:killAt]), asyncStall(evs[killAt:learnerAt]), asyncStall(evs[learnerAt:])
	t.Logf("MEASURE stall after a rollout worker's node was killed (docker kill worker-1): %v between two steps (%v before the fault)",
		afterWorker.Round(time.Millisecond), before.Round(time.Millisecond))
	t.Logf("MEASURE stall after the learners' process was killed (kill -9, restore the last checkpoint, replay): %v between two steps",
		afterLearner.Round(time.Millisecond))
	out := j.out.String()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, `{"event":"log"`) {
			t.Logf("job: %s", l)
		}
	}
	if !strings.Contains(out, "recover: step ") {
		t.Errorf("no recovery of the learners:\n%s", tail(out, 40))
	}
	if afterWorker > stallBound {
		t.Errorf("the learner stalled %v after a rollout worker's node was lost, beyond %v", afterWorker, stallBound)
	}

	// The run's directory: every step once, every checkpoint verifying.
	dst := filepath.Join(t.TempDir(), "run")
	c.docker("cp", ids[node]+":"+started.Dir, dst)
	b, err := os.ReadFile(filepath.Join(dst, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"kind":"step"`) {
			i := strings.Index(l, `"step":`)
			steps = append(steps, strings.SplitN(l[i+7:], ",", 2)[0])
		}
	}
	for i, s := range steps {
		if s != strconv.Itoa(i+1) || len(steps) != asyncSteps {
			t.Fatalf("step records %v, want 1..%d once each", steps, asyncSteps)
		}
	}
	store := &checkpoint.Store{Dir: filepath.Join(dst, "checkpoints")}
	list, err := store.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("checkpoints %v: %v", list, err)
	}
	for _, s := range list {
		if _, err := checkpoint.Verify(filepath.Join(store.Dir, checkpoint.Name(s))); err != nil {
			t.Errorf("checkpoint of step %d: %v", s, err)
		}
	}
}

// asyncStall is the longest time between two consecutive step events of
// evs.
func asyncStall(evs []jobEvent) time.Duration {
	var worst, last int64 = 0, -1
	for _, e := range evs {
		if e.Event != "step" {
			continue
		}
		if last >= 0 {
			worst = max(worst, e.T-last)
		}
		last = e.T
	}
	return time.Duration(worst) * time.Millisecond
}
