package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"troupe/gpu"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "copy the end-to-end screenshot to testdata/screenshot.png (if < 300 KB)")

// simCluster is a local source over a simulated profile whose GPUs run a
// deterministic load; step advances its clock by one second of work.
type simCluster struct {
	mu    sync.Mutex
	now   time.Time
	k     int
	inv   *gpu.Inventory
	s     *gpu.Sampler
	src   *LocalSource
	attrs *gpu.Attribution
}

func newSimCluster(t *testing.T, profile string, history int) *simCluster {
	t.Helper()
	c := &simCluster{now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	inv, err := gpu.Open(gpu.Options{Simulate: profile, Now: c.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inv.Close() })
	c.inv, c.attrs = inv, gpu.NewAttribution()
	roles := []string{"planner", "coder", "critic", "learner"}
	for i := 0; i < inv.Len(); i++ {
		if i == inv.Len()-1 {
			continue // one idle GPU without an actor
		}
		if err := c.attrs.Assign(i, gpu.Holder{Actor: fmt.Sprintf("%s-%d", roles[i%4], i), Job: "at-grpo", Fraction: 1}); err != nil {
			t.Fatal(err)
		}
		if err := inv.Simulation().SetProcessMemory(i, 4242, uint64(8+6*i)<<30); err != nil {
			t.Fatal(err)
		}
	}
	c.s = gpu.NewSampler(inv, gpu.SamplerConfig{History: 120, Attribution: c.attrs})
	c.src = &LocalSource{Node: "head-0", Inventory: inv, Sampler: c.s, Attribution: c.attrs, Now: c.clock}
	for range history {
		c.step()
	}
	return c
}

func (c *simCluster) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// step reports one second of load per GPU (a phase-shifted wave, like
// actors alternating generation and training) and samples.
func (c *simCluster) step() {
	c.mu.Lock()
	c.k++
	k := c.k
	c.now = c.now.Add(time.Second)
	c.mu.Unlock()
	for i := 0; i < c.inv.Len()-1; i++ {
		load := 0.5 + 0.45*math.Sin(float64(k)/7+float64(i)*0.8)
		c.inv.Simulation().AddProcessBusy(i, 4242, time.Duration(load*float64(time.Second)))
	}
	c.s.SampleOnce()
}

func (c *simCluster) State(ctx context.Context) (State, error) { return c.src.State(ctx) }

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestStateAndAssets(t *testing.T) {
	c := newSimCluster(t, "dgx-h100", 5)
	srv := httptest.NewServer(New(c, Options{}))
	defer srv.Close()

	resp, body := get(t, srv.URL+"/api/state")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("api/state: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	var st State
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 1 || st.Nodes[0].SimulatedGPUs != "dgx-h100" || st.Nodes[0].GPUs != 8 || !st.Nodes[0].Leader {
		t.Errorf("nodes = %+v", st.Nodes)
	}
	if len(st.GPUs) != 8 || len(st.Actors) != 7 || st.PollMillis != 1000 {
		t.Fatalf("%d GPUs, %d actors, poll %d", len(st.GPUs), len(st.Actors), st.PollMillis)
	}
	g := st.GPUs[1]
	if !g.Simulated || len(g.History) != 5 || g.SMUtil == nil || *g.SMUtil != *g.History[4].SM ||
		len(g.Actors) != 1 || g.Actors[0].Actor != "coder-1" || *g.MemoryUsed != 14<<30 {
		t.Errorf("GPU 1 = %+v", g)
	}
	if g.History[0].T >= g.History[4].T {
		t.Error("history not in time order")
	}
	if a := st.Actors[2]; a.Name != "critic-2" || a.Node != "head-0" || len(a.GPUs) != 1 || a.GPUs[0] != 2 {
		t.Errorf("actor 2 = %+v", a)
	}
	if len(st.GPUs[7].Actors) != 0 || *st.GPUs[7].SMUtil != 0 {
		t.Errorf("idle GPU 7 = %+v", st.GPUs[7])
	}

	for path, want := range map[string]string{"/": "<canvas id=\"overall\"", "/app.js": "function drawChart", "/style.css": "--sim"} {
		resp, body := get(t, srv.URL+path)
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %s, body lacks %q", path, resp.Status, want)
		}
	}
	// No external assets: the page must work offline.
	for _, f := range []string{"/", "/app.js", "/style.css"} {
		_, body := get(t, srv.URL+f)
		if regexp.MustCompile(`(src|href)="(https?:)?//`).Match(body) || strings.Contains(string(body), "cdn") {
			t.Errorf("%s references an external asset", f)
		}
	}
}

type failingSource struct{}

func (failingSource) State(context.Context) (State, error) {
	return State{}, errors.New("raft: no leader")
}

func TestStateError(t *testing.T) {
	srv := httptest.NewServer(New(failingSource{}, Options{}))
	defer srv.Close()
	resp, body := get(t, srv.URL+"/api/state")
	if resp.StatusCode != 500 || !strings.Contains(string(body), "raft: no leader") {
		t.Errorf("got %s %s", resp.Status, body)
	}
	if _, err := (&LocalSource{}).State(context.Background()); err == nil {
		t.Error("empty LocalSource gave no error")
	}
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestDashboardInChromium loads the page against a live source with a
// simulated dgx-h100 in headless Chromium, checks the rendered DOM, and
// saves a screenshot.
func TestDashboardInChromium(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium not installed (scripts/install-deps.sh installs it)")
		}
		t.Skip("chromium not installed; skipping the end-to-end dashboard test")
	}
	c := newSimCluster(t, "dgx-h100", 90)
	var polls atomic.Int32
	h := New(c, Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/state" {
			polls.Add(1)
			c.step() // the cluster moves on between polls: the page must follow
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()

	dir := t.TempDir()
	shot := filepath.Join(dir, "dashboard.png")
	run := func(extra ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1280,900",
			"--virtual-time-budget=3000"}, extra...)
		args = append(args, srv.URL+"/")
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", extra, err)
		}
		return out
	}
	dom := string(run("--dump-dom"))
	for _, want := range []string{`data-gpu="head-0/0"`, `data-gpu="head-0/7"`, "SIMULATED", "dgx-h100",
		`data-actor="planner-0"`, `data-node="head-0"`, "status live", "NVIDIA H100 80GB HBM3"} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q", want)
		}
	}
	if n := len(regexp.MustCompile(`class="big sm">\d+%<`).FindAllString(dom, -1)); n != 8 {
		t.Errorf("%d GPU utilization readouts, want 8", n)
	}
	if p := polls.Load(); p < 2 {
		t.Errorf("page polled %d times in 3 s of virtual time, want >= 2 (live updates)", p)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}

	run("--screenshot=" + shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 900 {
		t.Errorf("screenshot is %v, want 1280x900", b)
	}
	// A blank or unstyled page has few colours; charts and cards have many.
	colors := map[uint32]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 3 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 3 {
			r, g, b, _ := img.At(x, y).RGBA()
			colors[r>>8<<16|g>>8<<8|b>>8] = true
		}
	}
	if len(colors) < 50 {
		t.Errorf("screenshot has only %d colours: page did not render", len(colors))
	}
	t.Logf("screenshot: %s (%d colours)", shot, len(colors))
	if *updateScreenshot {
		st, _ := os.Stat(shot)
		if st.Size() < 300<<10 {
			data, _ := os.ReadFile(shot)
			if err := os.WriteFile(filepath.Join("testdata", "screenshot.png"), data, 0o644); err != nil {
				t.Error(err)
			}
		} else {
			t.Logf("screenshot %d bytes: too big to keep", st.Size())
		}
	}
}
