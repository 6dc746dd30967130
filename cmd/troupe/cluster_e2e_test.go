package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"troupe/internal/testnet"

	"troupe/runtime/cluster"
)

// The end-to-end test runs the real CLI in child processes: the test binary
// re-executes itself into TestClusterCLIHelperProcess, which calls run()
// with the arguments from the environment (no TestMain needed).

const cliArgsEnv = "TROUPE_CLI_TEST_ARGS"

func TestClusterCLIHelperProcess(t *testing.T) {
	args := os.Getenv(cliArgsEnv)
	if args == "" {
		t.Skip("helper process for TestClusterCLIEndToEnd")
	}
	var list []string
	if err := json.Unmarshal([]byte(args), &list); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(run(list))
}

type cliProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *cliProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *cliProc) output() string { p.mu.Lock(); defer p.mu.Unlock(); return p.out.String() }

// startCLI starts `troupe args...` as a child process; t.Cleanup kills it.
func startCLI(t *testing.T, env []string, args ...string) *cliProc {
	t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterCLIHelperProcess$")
	cmd.Env = append(append(os.Environ(), cliArgsEnv+"="+string(b)), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &cliProc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			// SIGQUIT first: Go prints every goroutine's stack, so a process
			// that hung shows where in the output logged below.
			cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-p.done:
			case <-time.After(2 * time.Second):
				cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("---- troupe %s ----\n%s", strings.Join(args, " "), p.output())
		}
	})
	return p
}

// cliRun runs a CLI command to completion and returns its output.
func cliRun(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	p := startCLI(t, env, args...)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("troupe %v did not finish", args)
	}
	return p.output(), p.err
}

func freeAddr(t *testing.T, ip string) (string, int) {
	t.Helper()
	port := testnet.Ports(t, ip, 3) // gossip and raft take the next two ports
	return fmt.Sprintf("%s:%d", ip, port), port
}

func statusJSON(t *testing.T, env []string, args ...string) (*cluster.ClusterStatus, error) {
	out, err := cliRun(t, env, append([]string{"status", "--json"}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	st := new(cluster.ClusterStatus)
	// The helper process may print test-framework lines after the JSON.
	if i := strings.LastIndex(out, "\n}"); i >= 0 {
		out = out[:i+2]
	}
	if err := json.Unmarshal([]byte(out), st); err != nil {
		return nil, fmt.Errorf("status --json: %v: %s", err, out)
	}
	return st, nil
}

// TestClusterCLIEndToEnd: troupe start --head generates a token file with
// mode 0600; a worker joins with it; troupe status shows both; a wrong
// token is refused; troupe stop drains the worker (it exits 0 and is
// marked drained) and then the head.
func TestClusterCLIEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process CLI test: skipped in -short")
	}
	dir := t.TempDir()
	headAddr, _ := freeAddr(t, "127.0.0.51")
	head := startCLI(t, nil, "start", "--head", "--data-dir", filepath.Join(dir, "head"), "--bind", headAddr, "--fast-timers",
		"--simulate-gpus", "2", "--resources", "cpu=4,memory=2G,tpu=1", "--node-id", "head")
	tokFile := filepath.Join(dir, "head", "token")
	var tok []byte
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if tok, err = os.ReadFile(tokFile); err == nil && len(tok) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no token file: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fi, _ := os.Stat(tokFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	env := []string{"TROUPE_TOKEN=" + strings.TrimSpace(string(tok)), "TROUPE_ADDRESS=" + headAddr}
	workerAddr, _ := freeAddr(t, "127.0.0.52")
	worker := startCLI(t, env, "start", "--join", headAddr, "--bind", workerAddr, "--fast-timers", "--node-id", "worker", "--resources", "cpu=2")

	var st *cluster.ClusterStatus
	deadline = time.Now().Add(20 * time.Second)
	for {
		var err error
		st, err = statusJSON(t, env)
		if err == nil && nodeStateOf(st, "head") == "alive" && nodeStateOf(st, "worker") == "alive" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never showed head and worker alive: %v %+v", err, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range st.Nodes {
		if n.ID == "head" && (n.Total.GPUs != 2 || n.Total.Custom["tpu"] != 1 || n.Total.CPUs() != 4 || n.Labels["troupe.gpus"] != "simulated") {
			t.Errorf("head resources %+v", n)
		}
	}
	if out, err := cliRun(t, []string{"TROUPE_TOKEN=wrong"}, "status", "--address", headAddr); err == nil || !strings.Contains(out, "invalid cluster token") {
		t.Errorf("status with a wrong token: %v\n%s", err, out)
	}
	out, err := cliRun(t, env, "status")
	if err != nil || !strings.Contains(out, "raft leader: head") || !strings.Contains(out, "worker") {
		t.Errorf("status: %v\n%s", err, out)
	}
	if out, err := cliRun(t, env, "stop", "--address", workerAddr); err != nil || !strings.Contains(out, "drained") {
		t.Fatalf("stop worker: %v\n%s", err, out)
	}
	select {
	case <-worker.done:
		if worker.err != nil {
			t.Errorf("worker exited with %v", worker.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worker still running after troupe stop")
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		st, err := statusJSON(t, env)
		if err == nil && nodeStateOf(st, "worker") == cluster.NodeDrained {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stopped worker never marked drained: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := cliRun(t, env, "stop"); err != nil {
		t.Fatalf("stop head: %v\n%s", err, out)
	}
	select {
	case <-head.done:
		if head.err != nil {
			t.Errorf("head exited with %v", head.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("head still running after troupe stop")
	}
}

func nodeStateOf(st *cluster.ClusterStatus, id string) string {
	for _, n := range st.Nodes {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}
