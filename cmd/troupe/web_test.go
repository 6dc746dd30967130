package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
	"troupe/runtime/dashboard"
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
	w, err := newWeb(ctx, "box", agent, nil)
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
		GossipPort: p + 1, RaftPort: p + 2, Token: "web-test-token", Timing: cluster.FastTiming,
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
	w, err := newWeb(ctx, n.ID(), agent, n)
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
