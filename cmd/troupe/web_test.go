package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"troupe/internal/testnet"
	"troupe/runtime/cluster"
	"troupe/runtime/dashboard"
	"troupe/runtime/transport"
	"troupe/scheduler"
)

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

func TestWebServesLocalDashboardAndMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent, err := startGPUAgent(ctx, gpuAgentOptions{Node: "box", Simulate: "pcie-4"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWeb(ctx, "box", agent, nil, webOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.handler())
	defer srv.Close()
	var st dashboard.State
	if err := json.Unmarshal([]byte(getBody(t, srv.URL+"/api/state")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.GPUs) != 4 || !st.GPUs[0].Simulated || len(st.Nodes) != 1 || st.Nodes[0].Name != "box" {
		t.Fatalf("state: %d GPUs, nodes %+v", len(st.GPUs), st.Nodes)
	}
	if page := getBody(t, srv.URL+"/"); !strings.Contains(page, "<html") {
		t.Fatalf("dashboard page: %.200s", page)
	}
	mf, err := parseMetrics(strings.NewReader(getBody(t, srv.URL+"/metrics")))
	if err != nil {
		t.Fatal(err)
	}
	if g := mf["troupe_gpu_memory_total_bytes"]; g == nil || len(g.Metric) != 4 {
		t.Fatalf("GPU memory gauges: %v", g)
	}
}

func TestWebShowsTheCluster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := testnet.Ports(t, "127.0.0.1", 3)
	cfg := cluster.Config{NodeID: "head-1", Role: cluster.RoleHead, DataDir: t.TempDir(), BindAddr: fmt.Sprintf("127.0.0.1:%d", p),
		GossipPort: p + 1, RaftPort: p + 2, Token: "web-test-token", Timing: cluster.FastTiming(),
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 8 << 30}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n, err := cluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	agent, err := startGPUAgent(ctx, gpuAgentOptions{Node: n.ID(), Simulate: "2"})
	if err != nil {
		t.Fatal(err)
	}
	n.ServeGPUs(agent.sampler, agent.inv.Profile())
	w, err := newWeb(ctx, n.ID(), agent, n, webOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.handler())
	defer srv.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st dashboard.State
		json.Unmarshal([]byte(getBody(t, srv.URL+"/api/state")), &st)
		if len(st.Nodes) == 1 && st.Nodes[0].Name == "head-1" && st.Nodes[0].Leader && st.Nodes[0].Address == n.Addr() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dashboard never showed the elected head: %+v", st.Nodes)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		mf, _ := parseMetrics(strings.NewReader(getBody(t, srv.URL+"/metrics")))
		var leader float64
		for name, f := range mf {
			if strings.HasPrefix(name, "troupe_raft_leader") && len(f.Metric) > 0 && f.Metric[0].Gauge != nil {
				leader = f.Metric[0].Gauge.GetValue()
			}
		}
		if leader == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never reported raft leadership: %v", mf)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

var updateClusterScreenshot = flag.Bool("update-cluster-screenshot", false, "copy the cluster dashboard screenshot to testdata/dashboard-cluster.png (if < 300 KB)")

// TestClusterDashboardInChromium loads the head's dashboard of a running
// two-node cluster with simulated GPUs in headless Chromium: the GPUs of
// both nodes (gathered through the GPU service) must appear with their
// actors, the GPU on which a policy actor runs training steps shows
// non-zero utilization, the charts follow new samples between polls, and a
// screenshot is saved (go test ./cmd/troupe -run InChromium
// -update-cluster-screenshot commits it to testdata).
func TestClusterDashboardInChromium(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium not installed (scripts/install-deps.sh installs it)")
		}
		t.Skip("chromium not installed; skipping the end-to-end cluster dashboard test")
	}
	c := startGPUCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := newWeb(ctx, c.head.ID(), c.headA, c.head, webOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Each poll first lets the cluster move on: the worker's planner works
	// and both nodes take a sample, so the page must follow live updates.
	var polls atomic.Int32
	// The test's samplers tick hourly (it samples by hand): poll every second.
	h := dashboard.New(pollEvery{w, 1000}, dashboard.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/state" {
			polls.Add(1)
			c.train(t)
		}
		h.ServeHTTP(rw, r)
	}))
	defer srv.Close()
	for range 5 { // some history before the page opens
		c.train(t)
		w.State(ctx)
	}

	dir := t.TempDir()
	shot := filepath.Join(dir, "dashboard-cluster.png")
	run := func(extra ...string) string {
		t.Helper()
		rctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1280,900",
			"--virtual-time-budget=3000"}, extra...)
		out, err := exec.CommandContext(rctx, bin, append(args, srv.URL+"/")...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", extra, err)
		}
		return string(out)
	}
	dom := run("--dump-dom")
	for _, want := range []string{`data-gpu="head-1/0"`, `data-gpu="head-1/3"`, `data-gpu="worker-1/0"`, `data-gpu="worker-1/1"`,
		`data-node="worker-1"`, `data-actor="planner"`, "planner (job-7)", "critic (job-7) 50%", "SIMULATED", "status live"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q", want)
		}
	}
	// The planner's training steps keep its GPU busy for most of every
	// window; the exact share depends on the machine.
	if !regexp.MustCompile(`data-gpu="worker-1/0"[^§]*?class="big sm">([1-9][0-9]*)%<`).MatchString(dom) {
		t.Error("the worker's GPU 0, where the planner trains, is not shown with non-zero utilization")
	}
	if p := polls.Load(); p < 2 {
		t.Errorf("page polled %d times in 3 s of virtual time, want >= 2 (live updates)", p)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
	run("--screenshot=" + shot)
	data, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Errorf("screenshot is %v, want 1280x900", b)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(data))
	if *updateClusterScreenshot && len(data) < 300<<10 {
		if err := os.WriteFile(filepath.Join("testdata", "dashboard-cluster.png"), data, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// pollEvery overrides the poll interval a source tells the page.
type pollEvery struct {
	src dashboard.StateSource
	ms  int
}

func (p pollEvery) State(ctx context.Context) (dashboard.State, error) {
	st, err := p.src.State(ctx)
	st.PollMillis = p.ms
	return st, err
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func TestDashboardAddr(t *testing.T) {
	for _, c := range []struct {
		flag string
		role cluster.Role
		want string
	}{
		{"", cluster.RoleHead, defaultDashboard},
		{"", cluster.RoleServer, ""},
		{"", cluster.RoleWorker, ""},
		{"off", cluster.RoleHead, ""},
		{" OFF ", cluster.RoleHead, ""},
		{"none", cluster.RoleHead, ""},
		{"0.0.0.0:9000", cluster.RoleWorker, "0.0.0.0:9000"},
	} {
		if got := dashboardAddr(c.flag, c.role); got != c.want {
			t.Errorf("dashboardAddr(%q, %s) = %q, want %q", c.flag, c.role, got, c.want)
		}
	}
}

// A worker node (no state copy) serving /metrics labels its GPUs with the
// actors placed on them, learned through the GPU service.
func TestWorkerMetricsNameActors(t *testing.T) {
	c := startGPUCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := newWeb(ctx, c.worker.ID(), c.workerA, c.worker, webOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.handler())
	defer srv.Close()
	waitUntil(t, "the worker's metrics to name the planner on GPU 0", func() bool {
		c.workerA.sampler.SampleOnce() // attribution is read at sampling
		mf, err := parseMetrics(strings.NewReader(getBody(t, srv.URL+"/metrics")))
		if err != nil || mf["troupe_gpu_actor_fraction"] == nil {
			return false
		}
		for _, m := range mf["troupe_gpu_actor_fraction"].Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if l["node"] == "worker-1" && l["gpu"] == "0" && l["actor"] == "planner" && l["job"] == "job-7" && m.Gauge.GetValue() == 1 {
				return true
			}
		}
		return false
	})
}

// TestWebBeyondLoopbackRequiresAuth: the dashboard bound to all addresses
// serves no page, no state and no metrics without the token, and serves
// them with it; without a credential it does not start at all.
func TestWebBeyondLoopbackRequiresAuth(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent, err := startGPUAgent(ctx, gpuAgentOptions{Node: "box", Simulate: "2"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWeb(ctx, "box", agent, nil, webOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.serve(ctx, "0.0.0.0:0", transport.HTTPAuth{}, slog.Default()); !errors.Is(err, transport.ErrOpenHTTP) {
		t.Fatalf("serving beyond loopback without a credential: %v, want ErrOpenHTTP", err)
	}
	addr, err := w.serve(ctx, "0.0.0.0:0", transport.HTTPAuth{Token: "tok"}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	base := "http://127.0.0.1:" + port
	for _, path := range []string{"/", "/api/state", "/metrics"} {
		for _, auth := range []string{"", "Bearer wrong"} {
			req, _ := http.NewRequest("GET", base+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(b), "troupe_gpu") || strings.Contains(string(b), "<html") {
				t.Errorf("GET %s with %q: %s %.80q, want 401 and nothing served", path, auth, resp.Status, b)
			}
		}
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s with the token: %s", path, resp.Status)
		}
	}
}
