package main

import (
	"bytes"
	"context"
	"flag"
	"image/png"
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

	"troupe/runtime/cluster"
	"troupe/runtime/dashboard"
)

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
	w, err := dashboard.NewServer(ctx, c.head.ID(), c.headA, c.head, dashboard.ServerOptions{})
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
