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
	env     []string // extra environment for docker-compose
	addrs   string   // the servers' published gRPC addresses, comma-separated
	token   string
	subnet  string // first three octets
	bin     string // the troupe binary on the host
}

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

// container returns the container ID of a service.
func (c *composeEnv) container(service string) string {
	c.t.Helper()
	id := strings.TrimSpace(c.mustCompose("ps", "-q", service))
	if id == "" {
		c.t.Fatalf("no container for service %s", service)
	}
	return id
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
// with simulated GPUs), measures the time to a healthy cluster, kills the
// raft leader's container and measures failover, restarts it with its
// volume, and cuts a worker off the network and reconnects it.
func TestComposeCluster(t *testing.T) {
	if _, err := run(context.Background(), nil, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no Docker engine answers (docker info failed), skipping the compose cluster test: %v", err)
	}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("docker-compose not found, skipping the compose cluster test")
	}
	dir := t.TempDir()
	c := &composeEnv{t: t, project: fmt.Sprintf("troupetest%d", os.Getpid()), bin: filepath.Join(dir, "troupe")}

	// The image, from the binary the host CLI also uses.
	start := time.Now()
	build := exec.Command("go", "build", "-trimpath", "-tags", "netgo,osusergo", "-o", c.bin, "./cmd/troupe")
	build.Dir, build.Env = "..", append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	image := "troupe:test-" + strconv.Itoa(os.Getpid())
	if _, err := run(context.Background(), []string{"TROUPE_BINARY=" + c.bin, "TROUPE_IMAGE=" + image}, "sh", "build-image.sh"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run(context.Background(), nil, "docker", "rmi", "-f", image) })
	t.Logf("binary and image built in %v", time.Since(start).Round(time.Millisecond))

	// A random token in an env file, free host ports, a subnet per run.
	var tb [32]byte
	rand.Read(tb[:])
	c.token = hex.EncodeToString(tb[:])
	envFile := filepath.Join(dir, "cluster.env")
	if err := os.WriteFile(envFile, []byte("TROUPE_TOKEN="+c.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.subnet = fmt.Sprintf("10.214.%d", 20+os.Getpid()%200)
	p := []int{freePort(t), freePort(t), freePort(t)}
	c.addrs = fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", p[0], p[1], p[2])
	c.env = []string{"TROUPE_IMAGE=" + image, "TROUPE_ENV_FILE=" + envFile, "TROUPE_SUBNET=" + c.subnet,
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
	ids := map[string]string{}
	for _, s := range append(append([]string{}, servers...), workers...) {
		ids[s] = c.container(s)
	}
	c.waitFor("5 healthy containers", 90*time.Second, func() (bool, string) {
		for s, id := range ids {
			if h := c.health(id); h != "healthy" {
				return false, s + " is " + h
			}
		}
		return true, ""
	})
	t.Logf("MEASURE docker-compose up -d to 5 healthy containers: %v", time.Since(start).Round(time.Millisecond))

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

	// (a) Kill the raft leader's container: a new leader is elected by the
	// other two, and status keeps answering through their ports.
	// The clock starts before `docker kill` is sent: the daemon returns
	// only once the container is gone, and an election may be over by then.
	cur, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	old := cur.Leader
	killAt := time.Now()
	c.docker("kill", ids[old])
	killTook := time.Since(killAt)
	c.waitFor("a new raft leader", 30*time.Second, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return s.Leader != "" && s.Leader != old, "leader " + s.Leader
	})
	t.Logf("MEASURE failover after docker kill of the leader (%s): %v from sending the kill to a new leader seen by status (docker kill itself took %v)",
		old, time.Since(killAt).Round(time.Millisecond), killTook.Round(time.Millisecond))
	dead := c.waitFor("the killed leader marked dead", 30*time.Second, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return nodeState(s, old) == "dead", old + " is " + nodeState(s, old)
	})
	t.Logf("MEASURE killed server marked dead %v after the new leader", dead.Round(time.Millisecond))
	// Restarted with its volume, it rejoins as a voter and turns alive.
	c.docker("start", ids[old])
	back := c.waitFor("the old leader back", 60*time.Second, func() (bool, string) {
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
	c.waitFor("a new leader after docker stop", 30*time.Second, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return s.Leader != "" && s.Leader != old, "leader " + s.Leader
	})
	t.Logf("MEASURE docker stop of the leader (%s): exited after %v, a new leader seen %v from sending the stop",
		old, stopTook.Round(time.Millisecond), time.Since(stopStart).Round(time.Millisecond))
	c.docker("start", ids[old])
	c.waitFor("the stopped leader back", 60*time.Second, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return nodeState(s, old) == "alive" && s.Leader != "", old + " is " + nodeState(s, old)
	})

	// (c) Cut a worker off the network: marked dead; reconnected with
	// its address, it is alive again.
	net := c.project + "_troupe"
	w := "worker-2"
	c.docker("network", "disconnect", net, ids[w])
	cut := c.waitFor("the cut-off worker marked dead", 30*time.Second, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return nodeState(s, w) == "dead", w + " is " + nodeState(s, w)
	})
	t.Logf("MEASURE cut-off worker marked dead after %v", cut.Round(time.Millisecond))
	// Its own health check, which asks a server through the worker, fails.
	c.waitFor("the cut-off worker's container unhealthy", 30*time.Second, func() (bool, string) {
		h := c.health(ids[w])
		return h == "unhealthy", "health " + h
	})
	c.docker("network", "connect", "--ip", c.subnet+".22", net, ids[w])
	// Memberlist alone heals this only while the two sides still gossip to
	// the nodes they marked dead (GossipToTheDeadTime, 30 s on LAN
	// settings); the node rejoining its known servers is what makes it
	// certain.
	rejoin := c.waitFor("the reconnected worker alive (it must rejoin gossip by itself)", 60*time.Second, func() (bool, string) {
		s, err := c.status()
		if err != nil {
			return false, err.Error()
		}
		return nodeState(s, w) == "alive", w + " is " + nodeState(s, w)
	})
	t.Logf("MEASURE reconnected worker alive again after %v", rejoin.Round(time.Millisecond))
	c.waitFor("the reconnected worker's container healthy", 30*time.Second, func() (bool, string) {
		h := c.health(ids[w])
		return h == "healthy", "health " + h
	})

	// Everything healthy at the end, from the host CLI's point of view too.
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
