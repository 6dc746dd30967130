package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"troupe/internal/testnet"
	"troupe/runtime/cluster"
	"troupe/runtime/gpuagent"
	"troupe/runtime/transport"
	"troupe/scheduler"
)

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, b := get(t, url)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func startAgent(t *testing.T, ctx context.Context, o gpuagent.Options) *gpuagent.Agent {
	t.Helper()
	a, err := gpuagent.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestServerLocalDashboardAndMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := startAgent(t, ctx, gpuagent.Options{Node: "box", Simulate: "pcie-4"})
	w, err := NewServer(ctx, "box", agent, nil, ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	var st State
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
	if mf["DCGM_FI_DEV_GPU_UTIL"] == nil {
		t.Error("no DCGM-named gauges by default")
	}
	quiet, err := NewServer(ctx, "box", agent, nil, ServerOptions{NoDCGM: true})
	if err != nil {
		t.Fatal(err)
	}
	qsrv := httptest.NewServer(quiet.Handler())
	defer qsrv.Close()
	if mf, _ := parseMetrics(strings.NewReader(getBody(t, qsrv.URL+"/metrics"))); mf["DCGM_FI_DEV_GPU_UTIL"] != nil {
		t.Error("NoDCGM still exports the DCGM-named gauges")
	}
}

func TestServerShowsTheCluster(t *testing.T) {
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
	agent := startAgent(t, ctx, gpuagent.Options{Node: n.ID(), Simulate: "2"})
	n.ServeGPUs(agent.Sampler(), agent.Profile())
	w, err := NewServer(ctx, n.ID(), agent, n, ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	waitUntil(t, "the dashboard to show the elected head", func() bool {
		var st State
		json.Unmarshal([]byte(getBody(t, srv.URL+"/api/state")), &st)
		return len(st.Nodes) == 1 && st.Nodes[0].Name == "head-1" && st.Nodes[0].Leader && st.Nodes[0].Address == n.Addr()
	})
	waitUntil(t, "the metrics to report raft leadership", func() bool {
		mf, _ := parseMetrics(strings.NewReader(getBody(t, srv.URL+"/metrics")))
		for name, f := range mf {
			if strings.HasPrefix(name, "troupe_raft_leader") && len(f.Metric) > 0 && f.Metric[0].Gauge != nil && f.Metric[0].Gauge.GetValue() == 1 {
				return true
			}
		}
		return false
	})
}

// TestWorkerMetricsNameActors: a worker node (no state copy) serving
// /metrics labels its GPUs with the actors placed on them, learned through
// the GPU service.
func TestWorkerMetricsNameActors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const token = "dashboard-worker-test-token"
	p := testnet.Ports(t, "127.0.0.1", 6)
	start := func(id string, role cluster.Role, port int, join []string) (*cluster.Node, *gpuagent.Agent) {
		gpus, topo, _, err := gpuagent.NodeGPUs("", "2")
		if err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		gpuagent.MarkSimulated(labels)
		n, err := cluster.Start(ctx, cluster.Config{NodeID: id, Role: role, DataDir: t.TempDir(), BindAddr: fmt.Sprintf("127.0.0.1:%d", port),
			GossipPort: port + 1, RaftPort: port + 2, Token: token, Timing: cluster.FastTiming(), Join: join,
			Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 8 << 30}, GPUs: gpus, Topology: topo, Labels: labels, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Shutdown() })
		// A long interval: the test takes the samples it checks itself.
		a := startAgent(t, ctx, gpuagent.Options{Node: id, Simulate: "2", Interval: time.Hour, Log: log})
		n.ServeGPUs(a.Sampler(), a.Profile())
		return n, a
	}
	head, _ := start("head-1", cluster.RoleHead, p, nil)
	worker, workerA := start("worker-1", cluster.RoleWorker, p+3, []string{head.Addr()})
	c, err := cluster.NewClient(head.Addr(), token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitUntil(t, "both nodes registered", func() bool {
		st, err := c.Status(ctx)
		return err == nil && len(st.Nodes) == 2
	})
	// A placement record (no launch: nothing runs it), pinned by affinity.
	res, err := c.CreateActors(ctx, []scheduler.ActorSpec{{ID: "a-planner", Name: "planner", Class: "Policy", JobID: "job-7",
		Request: scheduler.Request{Resources: scheduler.Resources{GPUs: 1}, Affinity: &scheduler.Affinity{Node: "worker-1"}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("create: %v %v", err, res)
	}

	w, err := NewServer(ctx, worker.ID(), workerA, worker, ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	waitUntil(t, "the worker's metrics to name the planner on GPU 0", func() bool {
		workerA.Sampler().SampleOnce() // attribution is read at sampling
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
	var st State
	if err := json.Unmarshal([]byte(getBody(t, srv.URL+"/api/state")), &st); err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.SimulatedGPUs == "" {
			t.Errorf("node %s: simulated GPUs not shown", n.Name)
		}
	}
}

// TestServerBeyondLoopbackRequiresAuth: the dashboard bound to all
// addresses serves no page, no state and no metrics without the token, and
// serves them with it; without a credential it does not start at all.
func TestServerBeyondLoopbackRequiresAuth(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := startAgent(t, ctx, gpuagent.Options{Node: "box", Simulate: "2"})
	w, err := NewServer(ctx, "box", agent, nil, ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Serve(ctx, "0.0.0.0:0", transport.HTTPAuth{}, slog.Default()); !errors.Is(err, transport.ErrOpenHTTP) {
		t.Fatalf("serving beyond loopback without a credential: %v, want ErrOpenHTTP", err)
	}
	addr, err := w.Serve(ctx, "0.0.0.0:0", transport.HTTPAuth{Token: "tok"}, slog.Default())
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
