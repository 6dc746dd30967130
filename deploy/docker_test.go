//go:build docker

package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"troupe/runtime/cluster"
)

// The compose cluster's services, which are also the node IDs.
var (
	servers = []string{"server-1", "server-2", "server-3"}
	workers = []string{"worker-1", "worker-2"}
)

// composeEnv is one compose project under test.
type composeEnv struct {
	t       *testing.T
	project string
	env     []string       // extra environment for docker-compose
	addrs   string         // the servers' published gRPC addresses, comma-separated
	ports   map[string]int // each server's published gRPC port
	token   string
	subnet  string // first three octets
	bin     string // the troupe binary on the host
	jobBin  string // deploy/chaosjob, built like the image's binary
	image   string
	envFile string // TROUPE_TOKEN=...
	// controlDir is bind-mounted read-only into job containers: the test
	// writes release files there.
	controlDir string
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

// run runs a command with a deadline and returns its combined output.
func run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func (c *composeEnv) compose(args ...string) (string, error) {
	return run(context.Background(), c.env, "docker-compose", append([]string{"-p", c.project, "-f", "compose.yaml"}, args...)...)
}

func (c *composeEnv) mustCompose(args ...string) string {
	c.t.Helper()
	out, err := c.compose(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// containers returns the container ID of each of the project's services
// (one docker call: docker-compose itself takes seconds to start on a
// loaded machine).
func (c *composeEnv) containers() map[string]string {
	c.t.Helper()
	out := c.docker("ps", "-a", "--filter", "label=com.docker.compose.project="+c.project,
		"--format", `{{.Label "com.docker.compose.service"}} {{.ID}}`)
	ids := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if svc, id, ok := strings.Cut(l, " "); ok {
			ids[svc] = id
		}
	}
	for _, s := range append(append([]string{}, servers...), workers...) {
		if ids[s] == "" {
			c.t.Fatalf("no container for service %s (docker ps: %q)", s, out)
		}
	}
	return ids
}

func (c *composeEnv) docker(args ...string) string {
	c.t.Helper()
	out, err := run(context.Background(), nil, "docker", args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// health returns a container's health status (starting, healthy,
// unhealthy) as Docker's HEALTHCHECK, that is `troupe health`, sees it.
func (c *composeEnv) health(id string) string {
	h, err := run(context.Background(), nil, "docker", "inspect", "-f", "{{.State.Health.Status}}", id)
	if err != nil {
		return "unknown: " + err.Error()
	}
	return strings.TrimSpace(h)
}

// status asks the cluster through the published ports, in process.
func (c *composeEnv) status() (*cluster.ClusterStatus, error) {
	cl, err := cluster.NewClient(c.addrs, c.token)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return cl.Status(ctx)
}

// waitFor polls cond every 50 ms until it holds or the timeout passes, and
// returns how long it took.
func (c *composeEnv) waitFor(what string, timeout time.Duration, cond func() (bool, string)) time.Duration {
	c.t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < timeout {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		last = why
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("%s: not reached within %v (last: %s)", what, timeout, last)
	return 0
}

// nodeState returns a node's committed state in st ("" if unknown).
func nodeState(st *cluster.ClusterStatus, id string) string {
	for _, n := range st.Nodes {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestComposeCluster brings up deploy/compose.yaml (3 servers, 2 workers
// with simulated GPUs) and measures the time to a healthy cluster; then
// runs a checkpointing training job (deploy/chaosjob) on it once without a
// fault and once through each of: the raft leader's container killed, a
// worker holding actors killed, and a worker holding actors cut off the
// network and reconnected. After each fault the job finishes, everything
// committed before it is still there, restarted actors resumed from their
// last checkpoint, and the cut-off worker's actors do not run on it once it
// is back. It also stops a leader gracefully (docker stop) and checks it
// hands over and exits 0. It logs MEASURE lines and always takes down
// what it made.
func TestComposeCluster(t *testing.T) {
	if _, err := run(context.Background(), nil, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no Docker engine answers (docker info failed), skipping the compose cluster test: %v", err)
	}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("docker-compose not found, skipping the compose cluster test")
	}
	sweepStale(t)
	dir := t.TempDir()
	c := &composeEnv{t: t, project: fmt.Sprintf("troupetest%d", os.Getpid()), bin: filepath.Join(dir, "troupe"),
		jobBin: filepath.Join(dir, "chaosjob"), controlDir: filepath.Join(dir, "control")}
	if err := os.Mkdir(c.controlDir, 0o755); err != nil {
		t.Fatal(err)
	}

	// The binaries (one build: the image's node binary, which the host CLI
	// also uses, and the job), then the image.
	start := time.Now()
	build := exec.Command("go", "build", "-trimpath", "-tags", "netgo,osusergo", "-o", dir+"/", "./cmd/troupe", "./deploy/chaosjob")
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

	// A random token in an env file, free host ports, a subnet per run.
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

	// Up to healthy: every container's HEALTHCHECK (troupe health) passes.
	start = time.Now()
	c.mustCompose("up", "-d")
	upTook := time.Since(start)
	ids := c.containers()
	allHealthy := func() (bool, string) {
		for s, id := range ids {
			if h := c.health(id); h != "healthy" {
				return false, s + " is " + h
			}
		}
		return true, ""
	}
	c.waitFor("5 nodes alive in the committed state", 2*time.Minute, func() (bool, string) {
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
	aliveAt := time.Since(start)
	c.waitFor("5 healthy containers", 2*time.Minute, allHealthy)
	t.Logf("MEASURE docker-compose up -d to 5 healthy containers: %v (up -d returned after %v; a leader and 5 nodes alive in the committed state after %v; Docker runs the health check every 2 s)",
		time.Since(start).Round(time.Millisecond), upTook.Round(time.Millisecond), aliveAt.Round(time.Millisecond))

	// The host CLI through the published ports.
	out, err := run(context.Background(), []string{"TROUPE_TOKEN=" + c.token}, c.bin, "status", "--json", "--address", c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	var st cluster.ClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("troupe status --json: %v\n%s", err, out)
	}
	if st.Leader == "" || len(st.Servers) != 3 {
		t.Fatalf("troupe status: leader %q, %d raft servers; want a leader and 3", st.Leader, len(st.Servers))
	}
	for s := range ids {
		if nodeState(&st, s) != "alive" {
			t.Fatalf("troupe status: node %s is %q, want alive\n%s", s, nodeState(&st, s), out)
		}
	}
	for _, n := range st.Nodes {
		if strings.HasPrefix(n.ID, "worker-") && (n.Total.GPUs != 8 || n.Labels["troupe.gpus"] != "simulated") {
			t.Errorf("worker %s: %g GPUs, label %q; want 8 simulated", n.ID, n.Total.GPUs, n.Labels["troupe.gpus"])
		}
	}
	if _, err := run(context.Background(), []string{"TROUPE_TOKEN=wrong"}, c.bin, "status", "--address", c.addrs); err == nil {
		t.Error("troupe status with a wrong token succeeded")
	}

	walls, stalls, redone := map[string]time.Duration{}, map[string]time.Duration{}, map[string]int{}
	// The job without a fault, submitted from the host with troupe submit:
	// the reference wall time (run again at the end: the machine's load
	// moves).
	j := c.startJob("nofault", c.follower(), false)
	done, evs := j.finish()
	walls["none"], stalls["none"] = stepTimes(evs)
	c.checkResumes(j.name, evs, false)
	t.Logf("job without a fault: %v from its first step to its last (%d steps of 2 actors; %v with the spawn and the binary's upload), longest step %v",
		walls["none"], jobSteps, time.Duration(done.WallMS)*time.Millisecond, stalls["none"])

	// (a) Kill the raft leader's container with the job running: a new
	// leader is elected by the other two, the job goes on.
	j = c.startJob("leaderkill", c.follower(), false)
	j.waitEvent(fmt.Sprintf("step %d", faultStep), 3*time.Minute, func(e jobEvent) bool { return e.Event == "step" && e.Step >= faultStep })
	before := c.committed()
	cur, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	old := cur.Leader
	if old == j.node {
		t.Fatalf("leadership moved to %s, where the job's driver runs, while the job ran (no fault yet): killing it would kill the driver", old)
	}
	// The clock starts before `docker kill` is sent: the daemon returns
	// only once the container is gone, and an election may be over by then.
	killAt := time.Now()
	c.docker("kill", ids[old])
	killTook := time.Since(killAt)
	c.waitFor("a new raft leader", time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return s.Leader != "" && s.Leader != old, "leader " + s.Leader
	})
	t.Logf("MEASURE failover after docker kill of the leader (%s) with a job running: %v from sending the kill to a new leader seen by status (docker kill itself took %v)",
		old, time.Since(killAt).Round(time.Millisecond), killTook.Round(time.Millisecond))
	dead := c.waitFor("the killed leader marked dead", time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return nodeState(s, old) == "dead", old + " is " + nodeState(s, old)
	})
	t.Logf("MEASURE killed server marked dead %v after the new leader", dead.Round(time.Millisecond))
	done, evs = j.finish()
	walls["leader killed"], stalls["leader killed"] = stepTimes(evs)
	redone["leader killed"] = done.Redone
	c.checkResumes(j.name, evs, false)
	c.checkKept("leader killed", before)
	// Restarted with its volume, it rejoins as a voter and turns alive.
	c.docker("start", ids[old])
	back := c.waitFor("the old leader back", 2*time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		voters := 0
		for _, r := range s.Servers {
			if r.Suffrage == "Voter" {
				voters++
			}
		}
		return nodeState(s, old) == "alive" && voters == 3 && s.Leader != "", fmt.Sprintf("%s is %s, %d voters", old, nodeState(s, old), voters)
	})
	t.Logf("MEASURE restarted server alive again after %v", back.Round(time.Millisecond))

	// Stop the (new) leader gracefully, as `docker stop` or a rolling
	// update does: SIGTERM drains it, it hands leadership on and exits by
	// itself well before Docker's SIGKILL.
	s, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	old = s.Leader
	stopStart := time.Now()
	c.docker("stop", "-t", "20", ids[old])
	stopTook := time.Since(stopStart)
	if code := strings.TrimSpace(c.docker("inspect", "-f", "{{.State.ExitCode}}", ids[old])); code != "0" {
		t.Errorf("docker stop of the leader %s: exit code %s after %v, want 0 (137: it did not exit within 20 s of SIGTERM and was killed)", old, code, stopTook.Round(time.Millisecond))
	}
	c.waitFor("a new leader after docker stop", time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return s.Leader != "" && s.Leader != old, "leader " + s.Leader
	})
	t.Logf("MEASURE docker stop of the leader (%s): exited after %v, a new leader seen %v from sending the stop",
		old, stopTook.Round(time.Millisecond), time.Since(stopStart).Round(time.Millisecond))
	c.docker("start", ids[old])
	c.waitFor("the stopped leader back", 2*time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return nodeState(s, old) == "alive" && s.Leader != "", old + " is " + nodeState(s, old)
	})

	// (b) Kill a worker holding actors with the job running: its actors
	// are restarted on the other worker from their last checkpoints.
	j = c.startJob("workerkill", c.follower(), false)
	j.waitEvent(fmt.Sprintf("step %d", faultStep), 3*time.Minute, func(e jobEvent) bool { return e.Event == "step" && e.Step >= faultStep })
	before = c.committed()
	w := c.busiestWorker(j.name)
	c.docker("kill", ids[w])
	done, evs = j.finish()
	walls["worker killed"], stalls["worker killed"] = stepTimes(evs)
	redone["worker killed"] = done.Redone
	c.checkResumes(j.name, evs, true)
	c.checkKept("worker killed", before)
	c.docker("start", ids[w])
	c.waitFor("the killed worker alive and healthy again", 2*time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		h := c.health(ids[w])
		return nodeState(s, w) == "alive" && h == "healthy", w + " is " + nodeState(s, w) + ", " + h
	})

	// (c) Cut a worker holding actors off the network with the job
	// running: it is marked dead after gossip's detection and the short
	// suspect grace, and its actors restart on the other worker while
	// the cut-off ones may still run there, fenced off by their epochs
	// (the job's writes to the shared directory go through its fence);
	// the worker stops them itself once out of contact for the lease. The
	// job holds after its last step so that its actors still live when
	// the worker is reconnected. Back, the worker rejoins by itself. No
	// actor runs twice where it matters: the job checks that no write of
	// a replaced incarnation took effect after its successor started.
	j = c.startJob("cutoff", c.follower(), true)
	j.waitEvent(fmt.Sprintf("step %d", faultStep), 3*time.Minute, func(e jobEvent) bool { return e.Event == "step" && e.Step >= faultStep })
	before = c.committed()
	w = c.busiestWorker(j.name)
	netName := c.project + "_troupe"
	c.docker("network", "disconnect", netName, ids[w])
	cutAt := time.Now()
	cut := c.waitFor("the cut-off worker marked dead", time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return nodeState(s, w) == "dead", w + " is " + nodeState(s, w)
	})
	t.Logf("MEASURE cut-off worker marked dead after %v", cut.Round(time.Millisecond))
	// The actors restart elsewhere at once; the cut-off worker's own
	// fence (the lease) stops its job processes a few seconds later.
	t.Logf("cut-off worker %s runs %d job worker process(es) when it is marked dead (fenced off by epoch until its lease stops them)", w, c.jobProcs(ids[w]))
	j.waitEvent("all steps done (holding)", 5*time.Minute, func(e jobEvent) bool { return e.Event == "holding" })
	// Its own health check, which asks a server through the worker, fails;
	// the replaced incarnations still run in it, unreachable.
	c.waitFor("the cut-off worker's container unhealthy", time.Minute, func() (bool, string) {
		h := c.health(ids[w])
		return h == "unhealthy", "health " + h
	})
	t.Logf("cut-off worker %s runs %d job worker process(es) while cut off (fenced)", w, c.jobProcs(ids[w]))
	// Keep it cut off longer than memberlist gossips to members it
	// declared dead (GossipToTheDeadTime, 30 s on LAN settings): past
	// that, only the node's own rejoining brings it back.
	if d := 35*time.Second - time.Since(cutAt); d > 0 {
		time.Sleep(d)
	}
	t.Logf("worker %s reconnected after %v cut off", w, time.Since(cutAt).Round(time.Millisecond))
	c.docker("network", "connect", "--ip", c.subnet+"."+map[string]string{"worker-1": "21", "worker-2": "22"}[w], netName, ids[w])
	rejoin := c.waitFor("the reconnected worker alive (it must rejoin gossip by itself)", 2*time.Minute, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return nodeState(s, w) == "alive", w + " is " + nodeState(s, w)
	})
	t.Logf("MEASURE reconnected worker alive again after %v", rejoin.Round(time.Millisecond))
	c.waitFor("the reconnected worker's container healthy", time.Minute, func() (bool, string) {
		h := c.health(ids[w])
		return h == "healthy", "health " + h
	})
	// Back, it ends the incarnations the cluster replaced (their job's
	// worker process exits once it hosts nothing), while every actor of
	// the job is alive exactly once, elsewhere.
	c.waitFor("the replaced incarnations ended on the reconnected worker", 2*time.Minute, func() (bool, string) {
		n := c.jobProcs(ids[w])
		return n == 0, fmt.Sprintf("%d job processes in %s", n, w)
	})
	s, err = c.status()
	if err != nil {
		t.Fatal(err)
	}
	live := jobActors(s, j.name)
	if len(live[w]) != 0 || len(live) != 1 {
		t.Errorf("after the partition the job's actors are placed %v; want both alive on the other worker only", live)
	}
	j.release(ids)
	done, evs = j.finish()
	walls["worker cut off"], stalls["worker cut off"] = stepTimes(evs)
	redone["worker cut off"] = done.Redone
	c.checkResumes(j.name, evs, true)
	c.checkKept("worker cut off", before)

	j = c.startJob("nofault2", c.follower(), false)
	done, evs = j.finish()
	c.checkResumes(j.name, evs, false)
	again, againStall := stepTimes(evs)
	t.Logf("job without a fault, again: %v, longest step %v", again, againStall)
	walls["none"] = (walls["none"] + again) / 2
	stalls["none"] = max(stalls["none"], againStall)
	t.Logf("MEASURE job without a fault: %v from the first step to the last (mean of the first and last runs; %d steps of 2 actors, submitted with troupe submit), longest step %v",
		walls["none"].Round(time.Millisecond), jobSteps, stalls["none"])
	for _, f := range []string{"leader killed", "worker killed", "worker cut off"} {
		t.Logf("MEASURE job with %s: %v from the first step to the last, %.2fx the job without a fault; the job stalled at most %v between two steps; %d actor steps redone from checkpoints",
			f, walls[f], float64(walls[f])/float64(walls["none"]), stalls[f], redone[f])
	}
	c.checkStall("worker killed", stalls["worker killed"], stalls["none"])
	c.checkStall("worker cut off", stalls["worker cut off"], stalls["none"])

	// Everything healthy at the end, from the host CLI's point of view too.
	c.waitFor("5 healthy containers at the end", 2*time.Minute, allHealthy)
	st = cluster.ClusterStatus{}
	out, err = run(context.Background(), []string{"TROUPE_TOKEN=" + c.token}, c.bin, "status", "--json", "--address", c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	for s := range ids {
		if nodeState(&st, s) != "alive" {
			t.Errorf("at the end node %s is %q, want alive", s, nodeState(&st, s))
		}
	}
}

// sweepStale removes what earlier runs of this test left behind when they
// were killed before their cleanup ran (a CI timeout, a kill -9): compose
// projects troupetest<pid> and images troupe:test-<pid> whose process is
// gone, with their containers, networks and volumes. Runs of live
// processes (another test at the same time) are left alone.
func sweepStale(t *testing.T) {
	ctx := context.Background()
	gone := func(name, prefix string) bool {
		pid, err := strconv.Atoi(strings.TrimPrefix(name, prefix))
		if !strings.HasPrefix(name, prefix) || err != nil || pid == os.Getpid() {
			return false
		}
		_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err)
	}
	label := `{{.Label "com.docker.compose.project"}}`
	projects := map[string]bool{}
	for _, args := range [][]string{
		{"ps", "-a", "--filter", "label=com.docker.compose.project", "--format", label},
		{"network", "ls", "--filter", "label=com.docker.compose.project", "--format", label},
		{"volume", "ls", "--filter", "label=com.docker.compose.project", "--format", label},
	} {
		out, _ := run(ctx, nil, "docker", args...)
		for _, p := range strings.Fields(out) {
			if gone(p, "troupetest") {
				projects[p] = true
			}
		}
	}
	for p := range projects {
		t.Logf("removing what an earlier, killed run left behind: compose project %s", p)
		f := "label=com.docker.compose.project=" + p
		if ids, _ := run(ctx, nil, "docker", "ps", "-aq", "--filter", f); strings.TrimSpace(ids) != "" {
			run(ctx, nil, "docker", append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
		if ids, _ := run(ctx, nil, "docker", "network", "ls", "-q", "--filter", f); strings.TrimSpace(ids) != "" {
			run(ctx, nil, "docker", append([]string{"network", "rm"}, strings.Fields(ids)...)...)
		}
		if ids, _ := run(ctx, nil, "docker", "volume", "ls", "-q", "--filter", f); strings.TrimSpace(ids) != "" {
			run(ctx, nil, "docker", append([]string{"volume", "rm", "-f"}, strings.Fields(ids)...)...)
		}
	}
	out, _ := run(ctx, nil, "docker", "images", "troupe", "--format", "{{.Tag}}")
	for _, tag := range strings.Fields(out) {
		if gone(tag, "test-") {
			t.Logf("removing image troupe:%s, left behind by an earlier, killed run", tag)
			run(ctx, nil, "docker", "rmi", "-f", "troupe:"+tag)
		}
	}
}

// freeSubnet returns the first three octets of a 10.214.X.0/24 no Docker
// network uses (another run of this test may be up at the same time).
func freeSubnet(t *testing.T) string {
	used := map[string]bool{}
	if ids, _ := run(context.Background(), nil, "docker", "network", "ls", "-q"); strings.TrimSpace(ids) != "" {
		out, _ := run(context.Background(), nil, "docker", append([]string{"network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}"}, strings.Fields(ids)...)...)
		for _, s := range strings.Fields(out) {
			used[s] = true
		}
	}
	for i := 0; i < 200; i++ {
		sub := fmt.Sprintf("10.214.%d", 20+(os.Getpid()+i)%200)
		if !used[sub+".0/24"] {
			return sub
		}
	}
	t.Fatal("no free 10.214.X.0/24 subnet for the compose network")
	return ""
}
