package gpu_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"troupe/gpu"
	"troupe/gpu/busy"
	"troupe/gpu/compute"
	"troupe/gpu/compute/cpu"
)

// stepClock advances by step on every read, so each metered op "takes"
// exactly one step, whatever the machine's load.
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// manualClock moves only when told.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestMeteredBackendDrivesSimulatedGPU(t *testing.T) {
	simClock := &manualClock{t: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}
	inv, err := gpu.Open(gpu.Options{Simulate: "pcie-4", Now: simClock.now})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	meter := busy.NewMeter()
	feed, err := gpu.NewBusyFeed(inv.Simulation(), gpu.BusyFeedOptions{Node: "n1", Meter: meter})
	if err != nil {
		t.Fatal(err)
	}
	attr := gpu.NewAttribution()
	pid := uint32(os.Getpid())
	if err := attr.Assign(2, gpu.Holder{Actor: "planner", Job: "j1", Fraction: 1, PID: pid}); err != nil {
		t.Fatal(err)
	}
	s := gpu.NewSampler(inv, gpu.SamplerConfig{Attribution: attr, BeforeSample: func() {
		if err := feed.Pull(); err != nil {
			t.Error(err)
		}
	}})

	// The actor's backend on GPU 2 runs 30 ops of 10 ms each (the injected
	// clock) and allocates 1 Mi floats; another node's counter is ignored.
	opClock := &stepClock{t: simClock.now(), step: 10 * time.Millisecond}
	be := compute.Metered(cpu.New(), meter.Counter(busy.Key{Node: "n1", GPU: 2, Actor: "planner"}), opClock.now)
	if _, ok := compute.As[compute.MatmulTransposer](be); !ok {
		t.Error("metered cpu backend lost MatmulTransposer")
	}
	x, err := be.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for range 30 {
		be.Scale(x, 0.5, 1024)
	}
	meter.Counter(busy.Key{Node: "other", GPU: 2}).AddBusy(time.Second)
	simClock.add(time.Second)
	smp := s.SampleOnce()[2]
	if smp.SMUtil == nil || *smp.SMUtil != 30 {
		t.Fatalf("GPU 2 SM utilization %v, want 30%% (300 ms busy of 1 s)", deref(smp.SMUtil))
	}
	if *smp.MemoryUsed != 4<<20 {
		t.Errorf("GPU 2 memory used %d, want %d", *smp.MemoryUsed, 4<<20)
	}
	if len(smp.Actors) != 1 || smp.Actors[0].SMUtil == nil || *smp.Actors[0].SMUtil != 30 {
		t.Errorf("GPU 2 actors %+v, want planner using 30%%", smp.Actors)
	}
	if u := s.Latest()[1].SMUtil; *u != 0 {
		t.Errorf("idle GPU 1 at %d%%", *u)
	}

	// Next window: 10 ops, the buffer freed.
	for range 10 {
		be.Scale(x, 2, 1024)
	}
	be.Free(x)
	simClock.add(time.Second)
	smp = s.SampleOnce()[2]
	if *smp.SMUtil != 10 || *smp.MemoryUsed != 0 {
		t.Errorf("second window: %d%%, %d bytes; want 10%%, 0", *smp.SMUtil, *smp.MemoryUsed)
	}
	if p := smp.PowerWatts; p == nil || *p <= 35 {
		t.Errorf("power %v does not follow the load", p)
	}
}

func deref(p *uint32) any {
	if p == nil {
		return "n/a"
	}
	return *p
}

func TestBusyLedgerAcrossProcesses(t *testing.T) {
	simClock := &manualClock{t: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}
	inv, err := gpu.Open(gpu.Options{Simulate: "2", Now: simClock.now})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	dir := filepath.Join(t.TempDir(), "ledgers")
	feed, err := gpu.NewBusyFeed(inv.Simulation(), gpu.BusyFeedOptions{Node: "n1", LedgerDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// A "worker" (a meter of this process) publishes 250 ms on GPU 1.
	worker := busy.NewMeter()
	c := worker.Counter(busy.Key{Node: "n1", GPU: 1, Actor: "coder"})
	c.AddBusy(250 * time.Millisecond)
	c.AddMemory(3 << 30)
	if err := worker.WriteLedger(dir); err != nil {
		t.Fatal(err)
	}
	// An ended process left a ledger holding memory: it is released.
	dead := busy.Record{Key: busy.Key{Node: "n1", GPU: 0}, PID: 0x7ffffff0, BusyNanos: 1, MemoryBytes: 1 << 30}
	b, _ := json.Marshal([]busy.Record{dead})
	os.WriteFile(filepath.Join(dir, "2147483632.json"), b, 0o600)
	// Garbage is reported, not fatal.
	os.WriteFile(filepath.Join(dir, "77.json"), []byte("{not json"), 0o600)

	simClock.add(time.Second)
	err = feed.Pull()
	if !errors.Is(err, busy.ErrLedger) {
		t.Errorf("Pull error %v, want the malformed ledger reported", err)
	}
	smp := inv.Sample()
	if *smp[1].SMUtil != 25 || *smp[1].MemoryUsed != 3<<30 {
		t.Errorf("GPU 1: %d%%, %d bytes; want 25%%, 3 GiB", *smp[1].SMUtil, *smp[1].MemoryUsed)
	}
	if *smp[0].MemoryUsed != 0 {
		t.Errorf("GPU 0 holds %d bytes of an ended process", *smp[0].MemoryUsed)
	}
	if _, err := os.Stat(filepath.Join(dir, "2147483632.json")); !os.IsNotExist(err) {
		t.Error("ledger of an ended process not removed")
	}
	// No change: nothing more is added.
	simClock.add(time.Second)
	feed.Pull()
	if u := inv.Sample()[1].SMUtil; *u != 0 {
		t.Errorf("GPU 1 at %d%% with no new work", *u)
	}
	if err := feed.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Error("feed did not remove its ledger directory")
	}
}

func TestBusyFeedRefusesForeignLedgerDir(t *testing.T) {
	inv, err := gpu.Open(gpu.Options{Simulate: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	if _, err := gpu.NewBusyFeed(inv.Simulation(), gpu.BusyFeedOptions{LedgerDir: dir}); err == nil {
		t.Error("a world-writable ledger directory was accepted")
	}
	if _, err := gpu.NewBusyFeed(nil, gpu.BusyFeedOptions{}); err == nil {
		t.Error("a feed without a simulation was accepted")
	}
}

// A feed counts only work done after it started, and starts with a clean
// ledger directory (one left by an earlier process with the same PID).
func TestBusyFeedStartsFresh(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)}
	inv, err := gpu.Open(gpu.Options{Simulate: "1", Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	meter := busy.NewMeter()
	c := meter.Counter(busy.Key{GPU: 0})
	c.AddBusy(time.Hour) // before the feed: not this node's business
	dir := filepath.Join(t.TempDir(), "ledgers")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "1.json")
	os.WriteFile(stale, []byte(`[{"gpu":0,"pid":1,"busy_ns":999999999999,"memory_bytes":0}]`), 0o600)
	feed, err := gpu.NewBusyFeed(inv.Simulation(), gpu.BusyFeedOptions{Meter: meter, LedgerDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("stale ledger kept")
	}
	c.AddBusy(400 * time.Millisecond)
	clk.add(time.Second)
	if err := feed.Pull(); err != nil {
		t.Fatal(err)
	}
	if u := inv.Sample()[0].SMUtil; *u != 40 {
		t.Errorf("GPU 0 at %d%%, want 40%% (only the work after the feed started)", *u)
	}
}
