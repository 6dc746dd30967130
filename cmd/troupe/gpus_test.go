package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"troupe/cmd/internal/cli"
	"troupe/gpu"
)

var updateGPUsGolden = flag.Bool("update-gpus", false, "rewrite cmd/troupe/testdata/gpus golden files")

// testClock is a settable clock shared by the inventory and the renderer.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// loadedEnv returns an env whose prepare hook puts seeded, deterministic
// busy time, memory and actors on the simulated GPUs, then advances the
// clock one sampling window.
func loadedEnv(stdout *bytes.Buffer, clk *testClock, vars map[string]string) gpusEnv {
	return gpusEnv{
		stdout: stdout, stderr: stdout, hostname: "node-a", now: clk.Now,
		getenv: func(k string) string { return vars[k] },
		prepare: func(inv *gpu.Inventory, attr *gpu.Attribution) error {
			sim := inv.Simulation()
			if sim == nil {
				return nil
			}
			rng := rand.New(rand.NewPCG(1, 2))
			roles := []string{"planner", "coder", "critic", "learner"}
			for i := 0; i < inv.Len(); i++ {
				if i%4 == 3 {
					continue // leave some GPUs idle
				}
				pid := uint32(1000 + i%2)
				busy := time.Duration(rng.IntN(1000)) * time.Millisecond
				if err := sim.AddProcessBusy(i, pid, busy); err != nil {
					return err
				}
				total := *inv.Devices()[i].MemoryTotal
				if err := sim.SetProcessMemory(i, pid, uint64(1+rng.IntN(int(total>>30)-1))<<30); err != nil {
					return err
				}
				h := gpu.Holder{Actor: fmt.Sprintf("%s-%d", roles[i%len(roles)], i), Job: "train-1", Fraction: 1, PID: pid}
				if i%4 == 2 {
					h.Fraction = 0.5
				}
				if err := attr.Assign(i, h); err != nil {
					return err
				}
			}
			clk.Add(time.Second)
			return nil
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "gpus", name)
	if *updateGPUsGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test ./cmd/troupe -run GPUs -update-gpus to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestGPUsGolden(t *testing.T) {
	for _, profile := range []string{"dgx-h100", "2x4-nvlink", "pcie-4", "3", "0"} {
		for _, mode := range []string{"once", "json"} {
			t.Run(profile+"/"+mode, func(t *testing.T) {
				clk := &testClock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
				var out bytes.Buffer
				env := loadedEnv(&out, clk, nil)
				if err := runGPUs(context.Background(), []string{"--" + mode, "--simulate-gpus", profile}, env); err != nil {
					t.Fatal(err)
				}
				ext := ".txt"
				if mode == "json" {
					ext = ".json"
					var r gpusReport
					if err := json.Unmarshal(out.Bytes(), &r); err != nil {
						t.Fatalf("output is not JSON: %v", err)
					}
					if !r.Simulated || r.Profile != profile {
						t.Errorf("report not marked simulated: %+v", r)
					}
					for _, g := range r.GPUs {
						if !g.Simulated || !g.Sample.Simulated {
							t.Errorf("GPU %d not marked simulated", g.Index)
						}
					}
				}
				golden(t, profile+ext, out.Bytes())
			})
		}
	}
}

func TestGPUsEnvSelectsProfile(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	var out bytes.Buffer
	env := loadedEnv(&out, clk, map[string]string{gpu.EnvSimulate: "pcie-4"})
	if err := runGPUs(context.Background(), []string{"--once"}, env); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "SIMULATED GPUs (profile pcie-4)") || !strings.Contains(out.String(), "[sim]") {
		t.Errorf("env profile not used:\n%s", out.String())
	}
}

func TestGPUsBadInput(t *testing.T) {
	var out bytes.Buffer
	env := loadedEnv(&out, &testClock{}, nil)
	if err := runGPUs(context.Background(), []string{"--once", "--simulate-gpus", "dgx-z9"}, env); !errors.Is(err, gpu.ErrProfile) {
		t.Errorf("unknown profile err = %v", err)
	}
	if err := runGPUs(context.Background(), []string{"--bogus"}, env); err != cli.ErrUsage {
		t.Errorf("bad flag err = %v", err)
	}
	if err := runGPUs(context.Background(), []string{"extra"}, env); err != cli.ErrUsage {
		t.Errorf("extra arg err = %v", err)
	}
	if err := runGPUs(context.Background(), []string{"--interval", "0s"}, env); err == nil {
		t.Error("zero interval accepted")
	}
}

// TestGPUsLive drives the live view with an injected ticker: each tick
// redraws the screen in place, and cancelling ends it without error.
func TestGPUsLive(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	var out syncBuffer
	tick := make(chan time.Time)
	env := gpusEnv{stdout: &out, stderr: &out, hostname: "node-a", now: clk.Now,
		getenv: func(string) string { return "" },
		ticker: func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }}
	var sim *gpu.Simulation
	ready := make(chan struct{})
	env.prepare = func(inv *gpu.Inventory, _ *gpu.Attribution) error {
		sim = inv.Simulation()
		close(ready)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- runGPUs(ctx, []string{"--simulate-gpus", "pcie-4", "--interval", "500ms"}, env) }()
	<-ready
	for k := 0; k < 2; k++ {
		clk.Add(time.Second)
		if err := sim.AddProcessBusy(1, 9, 750*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		tick <- clk.Now()
	}
	tick <- clk.Now() // the second frame is drawn once this is received
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("live view: %v", err)
	}
	s := out.String()
	if n := strings.Count(s, "\x1b[H\x1b[2J"); n < 3 {
		t.Errorf("%d redraws, want >= 3", n)
	}
	if !strings.Contains(s, " 75%") || !strings.Contains(s, "refreshing every 500ms") {
		t.Errorf("live output lacks the busy GPU or footer:\n%s", s)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
