package gpu

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"troupe/gpu/busy"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeClock is a settable clock for deterministic sampling.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openSim(t testing.TB, profile string, clk *fakeClock) *Inventory {
	t.Helper()
	inv, err := Open(Options{Simulate: profile, Now: clk.Now})
	if err != nil {
		t.Fatalf("open %s: %v", profile, err)
	}
	t.Cleanup(func() { inv.Close() })
	return inv
}

func TestProfileTopology(t *testing.T) {
	island := func(per, in, out int) func(i, j int) int {
		return func(i, j int) int {
			if i/per == j/per {
				return in
			}
			return out
		}
	}
	cases := []struct {
		profile string
		n       int
		want    func(i, j int) int
		cell    func(i, j int) string
	}{
		{"dgx-h100", 8, func(int, int) int { return 1800 }, func(int, int) string { return "NV18" }},
		{"2x4-nvlink", 8, island(4, 400, 10), func(i, j int) string { return map[bool]string{true: "NV4", false: "SYS"}[i/4 == j/4] }},
		{"pcie-4", 4, island(2, 50, 10), func(i, j int) string { return map[bool]string{true: "PIX", false: "SYS"}[i/2 == j/2] }},
		{"5", 5, func(int, int) int { return 30 }, func(int, int) string { return "PHB" }},
		{"0", 0, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.profile, func(t *testing.T) {
			inv := openSim(t, c.profile, newFakeClock())
			if inv.Len() != c.n || inv.Topology().Len() != c.n {
				t.Fatalf("got %d GPUs (topology %d), want %d", inv.Len(), inv.Topology().Len(), c.n)
			}
			topo := inv.Topology()
			for i := 0; i < c.n; i++ {
				if topo.Score(i, i) != 0 || topo.Link(i, i).Level != LinkSelf {
					t.Errorf("diagonal %d: score %d level %v", i, topo.Score(i, i), topo.Link(i, i).Level)
				}
				for j := 0; j < c.n; j++ {
					if i == j {
						continue
					}
					if got, want := topo.Score(i, j), c.want(i, j); got != want {
						t.Errorf("score(%d,%d) = %d, want %d", i, j, got, want)
					}
					if got, want := topo.Link(i, j).String(), c.cell(i, j); got != want {
						t.Errorf("link(%d,%d) = %s, want %s", i, j, got, want)
					}
				}
			}
			for _, d := range inv.Devices() {
				if !d.Simulated || d.UUID == "" || d.Name == "" || d.NUMANode == nil || d.MemoryTotal == nil || len(d.Errors) > 0 {
					t.Errorf("device %+v: want a complete simulated device", d)
				}
			}
			if topo.Score(-1, 0) != 0 || topo.Score(0, c.n) != 0 {
				t.Error("out-of-range score not 0")
			}
		})
	}
}

func TestDGXDetails(t *testing.T) {
	inv := openSim(t, "dgx-h100", newFakeClock())
	l := inv.Topology().Link(0, 7)
	if !l.ViaNVSwitch || l.PCIe != LinkSystem {
		t.Errorf("link 0-7 = %+v, want via NVSwitch with PCIe SYS", l)
	}
	if l := inv.Topology().Link(0, 3); l.PCIe != LinkNUMANode {
		t.Errorf("link 0-3 PCIe = %v, want NODE", l.PCIe)
	}
	d := inv.Devices()[5]
	if d.PCIBusID != "0000:c3:00.0" || *d.NUMANode != 1 || d.ComputeCapability.String() != "9.0" || *d.PowerLimitWatts != 700 {
		t.Errorf("device 5 = %+v", d)
	}
	// Deterministic UUIDs: two simulations of a profile agree, profiles differ.
	again := openSim(t, "dgx-h100", newFakeClock())
	other := openSim(t, "2x4-nvlink", newFakeClock())
	if again.Devices()[5].UUID != d.UUID || other.Devices()[5].UUID == d.UUID {
		t.Error("simulated UUIDs not deterministic per profile")
	}
	if got := inv.Topology().SetScore([]int{0, 1, 2}); got != 3*1800 {
		t.Errorf("set score = %d", got)
	}
	if !strings.Contains(inv.Topology().String(), "GPU7    NV18") {
		t.Errorf("topology table:\n%s", inv.Topology())
	}
}

func TestUnknownProfile(t *testing.T) {
	for _, p := range []string{"dgx-a9000", "-1", "65", "x4"} {
		if _, err := Open(Options{Simulate: p}); !errors.Is(err, ErrProfile) {
			t.Errorf("profile %q: err = %v, want ErrProfile", p, err)
		}
	}
}

func TestNoLibraryIsNoGPUs(t *testing.T) {
	// This machine has no libnvidia-ml: the real library must read as empty.
	inv, err := Open(Options{})
	if err != nil {
		t.Fatalf("open real NVML: %v", err)
	}
	if inv.Len() != 0 && !inv.Simulated() {
		t.Logf("this machine has %d real GPUs", inv.Len())
	}
	inv.Close()

	for name, lib := range map[string]NVML{
		"not found": &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }},
		"panics":    &mock.Interface{InitFunc: func() nvml.Return { panic("dlopen failed") }},
		"no driver": &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }},
	} {
		inv, err := NewInventory(lib, false, nil)
		if err != nil || inv.Len() != 0 || len(inv.Sample()) != 0 {
			t.Errorf("%s: inventory %v, err %v; want empty, nil", name, inv, err)
		}
		if err := inv.Close(); err != nil {
			t.Errorf("%s: close: %v", name, err)
		}
	}
	_, err = NewInventory(&mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_NO_PERMISSION }}, false, nil)
	if !errors.Is(err, ErrNVML) {
		t.Errorf("no permission: err = %v, want ErrNVML", err)
	}
}

// TestFailedQueriesKeepDevice checks that a device failing single queries
// (an NVML error, or an unimplemented mock call that panics) is listed with
// those fields missing, not dropped.
func TestFailedQueriesKeepDevice(t *testing.T) {
	good := &mock.Device{
		GetUUIDFunc:                  func() (string, nvml.Return) { return "GPU-good", nvml.SUCCESS },
		GetNameFunc:                  func() (string, nvml.Return) { return "Good GPU", nvml.SUCCESS },
		GetMemoryInfoFunc:            func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 100, Used: 40}, nvml.SUCCESS },
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return 8, 6, nvml.SUCCESS },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			setCString(p.BusId[:], "00000000:3B:00.0")
			return p, nvml.SUCCESS
		},
		GetNumaNodeIdFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) { return 300_000, nvml.SUCCESS },
		GetNvLinkStateFunc:        func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetTopologyCommonAncestorFunc: func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: 70, Memory: 20}, nvml.SUCCESS },
		GetPowerUsageFunc:       func() (uint32, nvml.Return) { return 123_500, nvml.SUCCESS },
		GetTemperatureFunc:      func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 61, nvml.SUCCESS },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 42, UsedGpuMemory: 30}}, nvml.SUCCESS
		},
		GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			return []nvml.ProcessUtilizationSample{{Pid: 42, TimeStamp: 5, SmUtil: 10}, {Pid: 42, TimeStamp: 9, SmUtil: 65}}, nvml.SUCCESS
		},
	}
	// bad fails its name and power with NVML errors and implements nothing
	// else (the stock mock panics on every other call).
	bad := &mock.Device{
		GetUUIDFunc:       func() (string, nvml.Return) { return "GPU-bad", nvml.SUCCESS },
		GetNameFunc:       func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN },
		GetPowerUsageFunc: func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
	}
	devs := []nvml.Device{good, bad}
	lib := &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return 3, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i >= len(devs) {
				return nil, nvml.ERROR_GPU_IS_LOST
			}
			return devs[i], nvml.SUCCESS
		},
	}
	inv, err := NewInventory(lib, false, newFakeClock().Now)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Len() != 3 {
		t.Fatalf("got %d devices, want 3 (none dropped)", inv.Len())
	}
	g, b, lost := inv.Devices()[0], inv.Devices()[1], inv.Devices()[2]
	if g.Name != "Good GPU" || g.PCIBusID != "0000:3b:00.0" || *g.NUMANode != 1 || *g.MemoryTotal != 100 ||
		g.ComputeCapability.String() != "8.6" || *g.PowerLimitWatts != 300 || len(g.Errors) != 0 {
		t.Errorf("good device = %+v", g)
	}
	if b.UUID != "GPU-bad" || b.Name != "" || b.MemoryTotal != nil || b.NUMANode != nil {
		t.Errorf("bad device = %+v", b)
	}
	for _, f := range []string{"name", "memory", "numa_node", "pci_bus_id", "compute_capability"} {
		if b.Errors[f] == "" {
			t.Errorf("bad device: no error recorded for %s (errors %v)", f, b.Errors)
		}
	}
	if lost.Errors["handle"] == "" {
		t.Errorf("lost device errors = %v", lost.Errors)
	}
	if l := inv.Topology().Link(0, 1); l.Level != LinkUnknown || l.Score() != 0 {
		// good's ancestor call with bad succeeds in this mock; bad itself
		// cannot answer, so pair (0,1) comes from good's side.
		if l.PCIe != LinkHostBridge {
			t.Errorf("link 0-1 = %+v", l)
		}
	}
	ss := inv.Sample()
	gs, bs := ss[0], ss[1]
	if *gs.SMUtil != 70 || *gs.MemUtil != 20 || *gs.PowerWatts != 123.5 || *gs.TemperatureC != 61 || *gs.MemoryUsed != 40 {
		t.Errorf("good sample = %+v", gs)
	}
	if len(gs.Processes) != 1 || gs.Processes[0].PID != 42 || *gs.Processes[0].SMUtil != 65 {
		t.Errorf("good processes = %+v", gs.Processes)
	}
	if bs.SMUtil != nil || bs.PowerWatts != nil || bs.Errors["power"] != nvml.ERROR_NOT_SUPPORTED.Error() || bs.Errors["utilization"] == "" {
		t.Errorf("bad sample = %+v", bs)
	}
}

func TestSimulatedUtilizationFollowsBusyTime(t *testing.T) {
	clk := newFakeClock()
	inv := openSim(t, "dgx-h100", clk)
	sim := inv.Simulation()
	if sim == nil || inv.Busy() != BusyReporter(sim) {
		t.Fatal("simulated inventory has no simulation")
	}
	clk.Add(time.Second)
	if s := inv.Sample()[0]; *s.SMUtil != 0 || *s.PowerWatts != 70 || *s.TemperatureC != 30 || len(s.Processes) != 0 {
		t.Fatalf("idle sample = %+v", s)
	}
	must(t, sim.AddProcessBusy(2, 100, 300*time.Millisecond))
	must(t, sim.AddProcessBusy(2, 200, 200*time.Millisecond))
	must(t, sim.SetProcessMemory(2, 100, 4<<30))
	clk.Add(time.Second)
	s := inv.Sample()[2]
	if *s.SMUtil != 50 || *s.MemUtil != 25 || *s.PowerWatts != 385 || *s.TemperatureC != 52 || *s.MemoryUsed != 4<<30 {
		t.Errorf("busy sample = SM %d mem %d power %v temp %d used %d", *s.SMUtil, *s.MemUtil, *s.PowerWatts, *s.TemperatureC, *s.MemoryUsed)
	}
	if len(s.Processes) != 2 || *s.Processes[0].SMUtil != 30 || *s.Processes[1].SMUtil != 20 || s.Processes[0].MemoryUsed != 4<<30 {
		t.Errorf("processes = %+v", s.Processes)
	}
	if o := inv.Sample()[3]; *o.SMUtil != 0 {
		t.Errorf("GPU 3 got busy time of GPU 2: %d%%", *o.SMUtil)
	}
	// Over-reported work saturates at 100%; the next idle window is 0.
	must(t, sim.AddProcessBusy(2, 100, 5*time.Second))
	clk.Add(time.Second)
	if s := inv.Sample()[2]; *s.SMUtil != 100 || *s.TemperatureC != 75 {
		t.Errorf("saturated = %d%% %dC", *s.SMUtil, *s.TemperatureC)
	}
	clk.Add(time.Second)
	if s := inv.Sample()[2]; *s.SMUtil != 0 || *s.Processes[0].SMUtil != 0 {
		t.Errorf("idle again = %d%%", *s.SMUtil)
	}
	if err := sim.SetProcessMemory(2, 200, 77<<30); !errors.Is(err, ErrSimulatedOOM) {
		t.Errorf("80 GiB GPU accepted 4+77 GiB: %v", err)
	}
	must(t, sim.SetProcessMemory(2, 100, 80<<30)) // replaces pid 100's own 4 GiB
	if err := sim.AddBusy(8, time.Second); !errors.Is(err, ErrNoDevice) {
		t.Errorf("AddBusy(8) err = %v", err)
	}
	if err := sim.AddBusy(0, -time.Second); err == nil {
		t.Error("negative busy time accepted")
	}
	must(t, sim.AddBusy(1, time.Millisecond)) // own pid
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestAttribution(t *testing.T) {
	a := NewAttribution()
	must(t, a.Assign(0, Holder{Actor: "planner", Job: "j1", Fraction: 0.5}))
	must(t, a.Assign(0, Holder{Actor: "coder", Job: "j1", Fraction: 0.5}))
	must(t, a.Assign(1, Holder{Actor: "planner", Job: "j1", Fraction: 1}))
	if err := a.Assign(0, Holder{Actor: "critic", Fraction: 0.1}); !errors.Is(err, ErrHolder) {
		t.Errorf("oversubscription err = %v", err)
	}
	for _, h := range []Holder{{Actor: "", Fraction: 1}, {Actor: "x", Fraction: 0}, {Actor: "x", Fraction: 1.5}} {
		if err := a.Assign(2, h); !errors.Is(err, ErrHolder) {
			t.Errorf("assign %+v err = %v", h, err)
		}
	}
	// Re-assigning the same actor replaces its share.
	must(t, a.Assign(0, Holder{Actor: "coder", Job: "j1", Fraction: 0.25}))
	hs := a.Holders(0)
	if len(hs) != 2 || hs[0].Actor != "coder" || hs[0].Fraction != 0.25 || hs[1].Actor != "planner" {
		t.Errorf("holders(0) = %+v", hs)
	}
	a.Release("planner")
	if hs := a.Holders(1); hs != nil {
		t.Errorf("holders(1) after release = %+v", hs)
	}
	if hs := a.Holders(0); len(hs) != 1 || hs[0].Actor != "coder" {
		t.Errorf("holders(0) after release = %+v", hs)
	}
	var nilA *Attribution
	if nilA.Holders(0) != nil {
		t.Error("nil attribution has holders")
	}
}

func TestSamplerRingAndRun(t *testing.T) {
	clk := newFakeClock()
	inv := openSim(t, "pcie-4", clk)
	attr := NewAttribution()
	must(t, attr.Assign(3, Holder{Actor: "learner", Job: "train", Fraction: 0.5, PID: 7}))
	must(t, attr.Assign(3, Holder{Actor: "critic", Job: "train", Fraction: 0.25, PID: 8}))
	must(t, attr.Assign(2, Holder{Actor: "a", Fraction: 0.5, PID: 9}))
	must(t, attr.Assign(2, Holder{Actor: "b", Fraction: 0.5, PID: 9})) // shared process: not measurable
	tick := make(chan time.Time)
	stopped := make(chan struct{})
	sampled := make(chan struct{}, 1)
	s := NewSampler(inv, SamplerConfig{History: 3, Attribution: attr,
		OnSample: func([]Sample) { sampled <- struct{}{} },
		Ticker:   func(time.Duration) (<-chan time.Time, func()) { return tick, func() { close(stopped) } }})
	if s.Latest() != nil || s.History(0) != nil {
		t.Fatal("samples before sampling")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	<-sampled
	for k := 1; k <= 5; k++ {
		clk.Add(time.Second)
		must(t, inv.Simulation().AddProcessBusy(3, 7, time.Duration(k)*100*time.Millisecond))
		tick <- clk.Now()
		<-sampled
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
	<-stopped
	// 6 samples (one at start, five ticks) in a ring of 3: the last three.
	h := s.History(3)
	if len(h) != 3 {
		t.Fatalf("history len %d", len(h))
	}
	for k, want := range []uint32{30, 40, 50} {
		if *h[k].SMUtil != want {
			t.Errorf("history[%d] = %d%%, want %d", k, *h[k].SMUtil, want)
		}
		if len(h[k].Actors) != 2 || h[k].Actors[1].Actor != "learner" || *h[k].Actors[1].SMUtil != want || *h[k].Actors[0].SMUtil != 0 {
			t.Errorf("history[%d] actors = %+v", k, h[k].Actors)
		}
	}
	if !h[0].Time.Before(h[2].Time) {
		t.Error("history not oldest first")
	}
	if l := s.Latest(); len(l) != 4 || *l[3].SMUtil != 50 || l[0].Actors != nil || l[2].Actors[0].SMUtil != nil {
		t.Errorf("latest = %+v", l)
	}
	if s.History(4) != nil || s.History(-1) != nil {
		t.Error("history of a missing GPU")
	}
}

// BenchmarkSamplePass measures one sampling pass over the 8 GPUs of the
// simulated dgx-h100 (all NVML queries of Inventory.Sample plus the ring
// buffer store). At a 1 s interval, CPU per second = ns/op / 1e9 of a core.
func BenchmarkSamplePass(b *testing.B) {
	inv, err := Open(Options{Simulate: "dgx-h100"})
	if err != nil {
		b.Fatal(err)
	}
	defer inv.Close()
	attr := NewAttribution()
	must(b, attr.Assign(0, Holder{Actor: "a", Fraction: 1}))
	// A node also pulls the busy time of its actors' backends before each
	// pass: one counter per GPU in its own process and one worker ledger.
	meter := busy.NewMeter()
	counters := make([]*busy.Counter, inv.Len())
	for i := range counters {
		counters[i] = meter.Counter(busy.Key{Node: "n", GPU: i, Actor: "a"})
	}
	dir := filepath.Join(b.TempDir(), "ledgers")
	feed, err := NewBusyFeed(inv.Simulation(), BusyFeedOptions{Node: "n", Meter: meter, LedgerDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer feed.Close()
	worker := busy.NewMeter()
	worker.Counter(busy.Key{Node: "n", GPU: 1, Actor: "w"}).AddBusy(time.Millisecond)
	must(b, worker.WriteLedger(dir))
	s := NewSampler(inv, SamplerConfig{Attribution: attr, BeforeSample: func() { must(b, feed.Pull()) }})
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		for _, c := range counters {
			c.AddBusy(time.Millisecond)
		}
		s.SampleOnce()
	}
	// Process CPU time (user+sys, all threads: includes GC) per pass; at
	// one pass per second this is the fraction of one core spent sampling.
	perPass := float64(cpuTime(b)-cpu0) / float64(b.N)
	b.ReportMetric(perPass, "cpu-ns/op")
	b.ReportMetric(perPass/1e9*100, "%core@1s")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func FuzzLinkLevelText(f *testing.F) {
	for _, s := range levelNames {
		f.Add(s)
	}
	f.Add("NV18")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		var l LinkLevel
		if err := l.UnmarshalText([]byte(s)); err != nil {
			return
		}
		out, _ := l.MarshalText()
		if string(out) != s {
			t.Errorf("round trip %q -> %v -> %q", s, l, out)
		}
	})
}

func FuzzNormBusID(f *testing.F) {
	for _, s := range []string{"00000000:3B:00.0", "0000:3b:00.0", "3b:00.0", "", "12345678:00:00.0", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := normBusID(s)
		if normBusID(n) != n {
			t.Errorf("normBusID not idempotent: %q -> %q -> %q", s, n, normBusID(n))
		}
	})
}

// TestNVLinkWithoutRemoteType checks link discovery on drivers without
// nvmlDeviceGetNvLinkRemoteDeviceType (the mock call panics): remote bus ids
// of known GPUs count as direct links, unknown ones as NVSwitch ports.
func TestNVLinkWithoutRemoteType(t *testing.T) {
	// GPUs 0 and 1: 2 direct links each way plus 3 links to switch S.
	// GPU 2: 3 links to switch S only. GPU 3: no NVLink, PCIe only.
	remotes := [][]string{
		{"0000:02:00.0", "0000:02:00.0", "0000:ff:00.0", "0000:ff:00.0", "0000:ff:00.0"},
		{"0000:01:00.0", "0000:01:00.0", "0000:ff:00.0", "0000:ff:00.0", "0000:ff:00.0"},
		{"0000:ff:00.0", "0000:ff:00.0", "0000:ff:00.0"},
		nil,
	}
	devs := make([]nvml.Device, len(remotes))
	for i := range remotes {
		rs := remotes[i]
		bus := fmt.Sprintf("00000000:%02X:00.0", i+1)
		devs[i] = &mock.Device{
			GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
				var p nvml.PciInfo
				setCString(p.BusId[:], bus)
				return p, nvml.SUCCESS
			},
			GetNvLinkStateFunc: func(l int) (nvml.EnableState, nvml.Return) {
				if rs == nil {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				if l >= len(rs) {
					return 0, nvml.ERROR_INVALID_ARGUMENT
				}
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			},
			GetNvLinkRemotePciInfoFunc: func(l int) (nvml.PciInfo, nvml.Return) {
				var p nvml.PciInfo
				setCString(p.BusIdLegacy[:], rs[l])
				return p, nvml.SUCCESS
			},
			GetTopologyCommonAncestorFunc: func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
				return nvml.TOPOLOGY_MULTIPLE, nvml.SUCCESS
			},
		}
	}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
	}
	inv, err := NewInventory(lib, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	topo := inv.Topology()
	want := map[[2]int]string{{0, 1}: "NV2", {0, 2}: "NV3", {1, 2}: "NV3", {0, 3}: "PXB", {2, 3}: "PXB"}
	for p, cell := range want {
		if got := topo.Link(p[0], p[1]).String(); got != cell {
			t.Errorf("link %v = %s, want %s", p, got, cell)
		}
	}
	if !topo.Link(0, 2).ViaNVSwitch || topo.Link(0, 1).ViaNVSwitch {
		t.Errorf("switch flags: 0-2 %+v, 0-1 %+v", topo.Link(0, 2), topo.Link(0, 1))
	}
	if topo.Score(0, 1) != 200 || topo.Score(0, 3) != 40 {
		t.Errorf("scores 0-1 %d, 0-3 %d", topo.Score(0, 1), topo.Score(0, 3))
	}
}
