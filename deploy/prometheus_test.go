//go:build prometheus

package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The Prometheus test runs a real Prometheus (Debian's prometheus package)
// with deploy/prometheus/prometheus.yml against a two-node troupe cluster
// on this machine running deploy/metricsjob, then checks through
// Prometheus's query API what users' dashboards will see: both nodes up,
// the job's calls per method and outcome, the GPU its actor holds, the
// GPUs under the DCGM exporter's names (every query of NVIDIA's stock
// dashboard that troupe can answer), and every query of
// deploy/grafana/troupe-dashboard.json.
//
//	apt-get install prometheus
//	go test -tags prometheus -count=1 -v ./deploy/

// proc is a child process whose output is kept.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string { p.mu.Lock(); defer p.mu.Unlock(); return p.out.String() }

// start runs name args; t.Cleanup kills it (SIGKILL, after a SIGTERM and
// 3 s for a node to drain).
func start(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(3 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("---- %s %s ----\n%s", filepath.Base(name), strings.Join(args, " "), p.output())
		}
	})
	return p
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

// freeNodePort returns a port P with P+1 and P+2 free too (a node's
// gossip and raft ports).
func freeNodePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		p := freePort(t)
		ok := true
		for k := 1; k <= 2; k++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+k))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no three consecutive free ports")
	return 0
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// promResult is an instant query's answer.
type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func query(base, q string) (*promResult, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := new(promResult)
	if err := json.NewDecoder(resp.Body).Decode(r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return r, fmt.Errorf("query %s: %s", q, r.Error)
	}
	return r, nil
}

// value is the one sample of q ("" if none or several).
func value(base, q string) string {
	r, err := query(base, q)
	if err != nil || len(r.Data.Result) != 1 {
		return ""
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	return s
}

func TestPrometheusScrapesCluster(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (Debian: apt-get install prometheus); this test checks the scrape config and dashboards with it")
	}
	dir := t.TempDir()
	// Build the CLI and the job as users would.
	for pkg, out := range map[string]string{"../cmd/troupe": "troupe", "./metricsjob": "metricsjob"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	troupe := filepath.Join(dir, "troupe")
	token := "prometheus-test-token"
	headPort, workerPort := freeNodePort(t), freeNodePort(t)
	headHTTP, workerHTTP := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	headAddr := fmt.Sprintf("127.0.0.1:%d", headPort)
	env := []string{"TROUPE_TOKEN=" + token, "TROUPE_ADDRESS=" + headAddr}
	start(t, env, troupe, "start", "--head", "--node-id", "head", "--data-dir", filepath.Join(dir, "head"), "--bind", headAddr,
		"--fast-timers", "--http", headHTTP, "--simulate-gpus", "2", "--resources", "cpu=2,memory=2G")
	start(t, env, troupe, "start", "--join", headAddr, "--node-id", "worker", "--data-dir", filepath.Join(dir, "worker"),
		"--bind", fmt.Sprintf("127.0.0.1:%d", workerPort), "--fast-timers", "--http", workerHTTP, "--simulate-gpus", "dgx-h100",
		"--resources", "cpu=2,memory=2G,probe=1")
	waitUntil(t, "both nodes alive", 30*time.Second, func() bool {
		out, err := exec.Command(troupe, "list", "nodes", "--filter", "state=alive", "--address", headAddr, "--token", token).CombinedOutput()
		return err == nil && strings.Contains(string(out), "head") && strings.Contains(string(out), "worker")
	})
	if out, err := exec.Command(troupe, "submit", "--detach", "--name", "metrics", "--address", headAddr, "--token", token,
		filepath.Join(dir, "metricsjob"), "--", "-calls", "50").CombinedOutput(); err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	waitUntil(t, "the job's calls", 60*time.Second, func() bool {
		out, _ := exec.Command(troupe, "logs", "metrics", "--address", headAddr, "--token", token).CombinedOutput()
		return strings.Contains(string(out), "ready")
	})

	// Prometheus with the shipped configuration, scraping every second.
	cfgDir := filepath.Join(dir, "prometheus")
	os.MkdirAll(filepath.Join(cfgDir, "targets"), 0o755)
	cfg, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	fast := strings.NewReplacer("scrape_interval: 15s", "scrape_interval: 1s", "evaluation_interval: 15s", "evaluation_interval: 1s").Replace(string(cfg))
	os.WriteFile(filepath.Join(cfgDir, "prometheus.yml"), []byte(fast), 0o644)
	targets := fmt.Sprintf(`[{"targets": [%q], "labels": {"troupe_node": "head"}}, {"targets": [%q]}]`, headHTTP, workerHTTP)
	os.WriteFile(filepath.Join(cfgDir, "targets", "troupe.json"), []byte(targets), 0o644)
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "config", "prometheus/prometheus.yml").CombinedOutput(); err != nil {
			t.Errorf("promtool check config: %v\n%s", err, out)
		}
	}
	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start(t, nil, prom, "--config.file="+filepath.Join(cfgDir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)
	base := "http://" + promAddr
	waitUntil(t, "Prometheus ready", 60*time.Second, func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	// Wait for a few scrapes of both nodes with the job's calls in them
	// (rates need two samples in their window).
	waitUntil(t, "scrapes of both nodes", 60*time.Second, func() bool {
		n, _ := strconv.Atoi(value(base, `count_over_time(troupe_actor_calls_total{class="Echo",method="Echo",outcome="ok"}[1m])`))
		return value(base, `count(up{job="troupe"} == 1)`) == "2" && n >= 3
	})

	checks := map[string]string{
		`up{job="troupe", instance="head"}`:                                                     "1", // relabelled from the target file's troupe_node
		`troupe_actor_calls_total{node="worker", class="Echo", method="Echo", outcome="ok"}`:    "50",
		`troupe_actor_calls_total{node="worker", class="Echo", method="Fail", outcome="error"}`: "1",
		`troupe_actor_call_duration_seconds_count{node="worker", class="Echo", method="Echo"}`:  "50",
		`troupe_gpu_actor_fraction{node="worker", actor="echo"}`:                                "1",
		`max(troupe_actors{state="ALIVE"})`:                                                     "1",
		`max(troupe_nodes{state="alive"})`:                                                      "2",
		`sum(troupe_raft_leader)`:                                                               "1",
		`count(DCGM_FI_DEV_FB_FREE)`:                                                            "10",
		`count(DCGM_FI_DEV_GPU_UTIL{Hostname="worker", modelName="NVIDIA H100 80GB HBM3"})`:     "8",
	}
	for q, want := range checks {
		if got := value(base, q); got != want {
			t.Errorf("%s = %q, want %s", q, got, want)
		}
	}

	// NVIDIA's stock dashboard (grafana.com 12239): its variables and the
	// panels troupe has data for.
	resp, err := http.Get(base + "/api/v1/label/Hostname/values?match[]=DCGM_FI_DEV_FB_FREE")
	if err != nil {
		t.Fatal(err)
	}
	var lv struct{ Data []string }
	json.NewDecoder(resp.Body).Decode(&lv)
	resp.Body.Close()
	if sort.Strings(lv.Data); strings.Join(lv.Data, ",") != "head,worker" {
		t.Errorf("label_values(DCGM_FI_DEV_FB_FREE, Hostname) = %v, want head, worker", lv.Data)
	}
	for _, q := range []string{
		`max(DCGM_FI_DEV_GPU_TEMP{Hostname=~"head|worker", gpu=~".*"}) by (Hostname, gpu, uuid)`,
		`max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"head|worker", gpu=~".*"}) by (Hostname, gpu, uuid)`,
		`sum(max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"head|worker", gpu=~".*"}) by (gpu))`,
		`max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname=~"head|worker", gpu=~".*"}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)`,
		`max(DCGM_FI_DEV_FB_USED{Hostname=~"head|worker", gpu=~".*"}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)`,
	} {
		if r, err := query(base, q); err != nil || len(r.Data.Result) == 0 {
			t.Errorf("DCGM dashboard query %s: no data (%v)", q, err)
		}
	}

	// Every query of troupe's own dashboard is valid and has data.
	b, err := os.ReadFile("grafana/troupe-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("troupe-dashboard.json: %v", err)
	}
	vars := strings.NewReplacer(`$job`, "troupe", `$node`, ".*", `$__rate_interval`, "15s")
	// Measured per-actor utilization needs an actor that computes on its
	// GPU; the echo actor does not.
	mayBeEmpty := regexp.MustCompile(`measured per actor`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			n++
			q := vars.Replace(tg.Expr)
			r, err := query(base, q)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			if len(r.Data.Result) == 0 && !mayBeEmpty.MatchString(p.Title) {
				t.Errorf("panel %q: %s has no data", p.Title, q)
			}
		}
	}
	if n < 15 {
		t.Errorf("the dashboard has %d queries", n)
	}
}
