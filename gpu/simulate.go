package gpu

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// Simulated profiles, for machines without GPUs. Each is built on go-nvml's
// mock server (github.com/NVIDIA/go-nvml/pkg/nvml/mock/server) with the
// calls the stock mocks leave unimplemented filled in: NVLink state and
// remote ends, PCIe common ancestors, NUMA node, utilization, power,
// temperature, power limit and processes.
//
//   - dgx-h100: 8 × H100 SXM5 80GB, all-to-all NVLink through 4 NVSwitches.
//     Each GPU has 18 NVLinks split 5/4/4/5 over the switches as in a real
//     DGX H100, so every pair reports 18 links (score 1800): through the
//     switches any pair can use all 18. GPUs 0-3 on NUMA node 0, 4-7 on 1;
//     PCIe level NODE within a socket, SYS across.
//   - 2x4-nvlink: 8 × A100 SXM4 80GB in two islands of 4 (HGX A100 4-GPU
//     boards): each GPU has 4 direct NVLinks to each of its 3 island peers
//     (score 400); between islands no NVLink and PCIe SYS (cross-CPU, 10).
//   - pcie-4: 4 × A100 PCIe 40GB, two per CPU socket; the two GPUs of a
//     socket share a PCIe switch (PIX, 50), across sockets SYS (10).
//   - N (an integer, 0-64): N × A100 PCIe 40GB on one CPU behind its host
//     bridge (PHB, 30 for every pair).
//
// Utilization follows real work: compute backends report busy time with
// AddBusy; at each utilization query the busy time since the previous
// window (at least simWindow long) divided by its length is the SM
// percentage. Memory-controller activity is modelled as half the SM
// activity, power as idle + (limit-idle)×SM%, temperature as 30 °C + 0.45 °C
// per SM percent. Memory used is what processes declared with
// SetProcessMemory.

// Profiles lists the named simulated profiles (an integer N is also valid).
func Profiles() []string { return []string{"dgx-h100", "2x4-nvlink", "pcie-4"} }

// ErrProfile reports an unknown simulated profile name.
var ErrProfile = errors.New("gpu: unknown simulated GPU profile")

// simWindow is the shortest utilization window, like NVML's sample period:
// queries closer together than this see the previous window's value.
const simWindow = 100 * time.Millisecond

// BusyReporter receives the busy time of work run on a GPU. Compute
// backends and actors report into it; for simulated GPUs it drives the
// utilization that sampling sees.
type BusyReporter interface {
	// AddBusy records that GPU index was busy for d.
	AddBusy(index int, d time.Duration) error
}

type noBusy struct{}

func (noBusy) AddBusy(int, time.Duration) error { return nil }

// simLink is one NVLink of a simulated GPU.
type simLink struct {
	remote   string // bus id of the remote end
	toSwitch bool
}

type profileSpec struct {
	gpu          gpus.Config
	n            int
	idleW, maxW  float64
	busID        func(i int) string
	numa         func(i int) int
	pcie         func(i, j int) nvml.GpuTopologyLevel
	links        func(i int, bus func(int) string) []simLink
	switchBusIDs []string
}

func lookupProfile(name string) (profileSpec, error) {
	switch name {
	case "dgx-h100":
		bus := []string{"1b", "43", "52", "61", "9d", "c3", "d1", "df"}
		sw := []string{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}
		return profileSpec{
			gpu: gpus.H100_SXM5_80GB, n: 8, idleW: 70, maxW: 700,
			busID: func(i int) string { return "0000:" + bus[i] + ":00.0" },
			numa:  func(i int) int { return i / 4 },
			pcie:  socketPair(4, nvml.TOPOLOGY_NODE),
			links: func(i int, _ func(int) string) []simLink {
				var ls []simLink
				for s, k := range []int{5, 4, 4, 5} {
					for range k {
						ls = append(ls, simLink{remote: sw[s], toSwitch: true})
					}
				}
				return ls
			},
			switchBusIDs: sw,
		}, nil
	case "2x4-nvlink":
		bus := []string{"07", "0f", "47", "4e", "87", "90", "b7", "bd"}
		return profileSpec{
			gpu: gpus.A100_SXM4_80GB, n: 8, idleW: 55, maxW: 400,
			busID: func(i int) string { return "0000:" + bus[i] + ":00.0" },
			numa:  func(i int) int { return i / 4 },
			pcie:  socketPair(4, nvml.TOPOLOGY_NODE),
			links: func(i int, busOf func(int) string) []simLink {
				var ls []simLink
				base := i / 4 * 4
				for p := base; p < base+4; p++ {
					if p == i {
						continue
					}
					for range 4 {
						ls = append(ls, simLink{remote: busOf(p)})
					}
				}
				return ls
			},
		}, nil
	case "pcie-4":
		bus := []string{"18", "19", "af", "b0"}
		return profileSpec{
			gpu: gpus.A100_PCIE_40GB, n: 4, idleW: 35, maxW: 250,
			busID: func(i int) string { return "0000:" + bus[i] + ":00.0" },
			numa:  func(i int) int { return i / 2 },
			pcie:  socketPair(2, nvml.TOPOLOGY_SINGLE),
		}, nil
	}
	n, err := strconv.Atoi(name)
	if err != nil || n < 0 || n > 64 {
		return profileSpec{}, fmt.Errorf("%w %q: want one of %v or a GPU count 0-64", ErrProfile, name, Profiles())
	}
	return profileSpec{
		gpu: gpus.A100_PCIE_40GB, n: n, idleW: 35, maxW: 250,
		busID: func(i int) string { return fmt.Sprintf("0000:%02x:00.0", 0x10+i) },
		numa:  func(int) int { return 0 },
		pcie:  func(int, int) nvml.GpuTopologyLevel { return nvml.TOPOLOGY_HOSTBRIDGE },
	}, nil
}

// socketPair returns a PCIe ancestry where GPUs [k*per, (k+1)*per) share a
// CPU socket at level same, and GPUs on different sockets are SYS.
func socketPair(per int, same nvml.GpuTopologyLevel) func(i, j int) nvml.GpuTopologyLevel {
	return func(i, j int) nvml.GpuTopologyLevel {
		if i/per == j/per {
			return same
		}
		return nvml.TOPOLOGY_SYSTEM
	}
}

// Simulation is a simulated machine: go-nvml mock devices with filled-in
// topology and telemetry, whose utilization comes from reported busy time.
// It is safe for concurrent use.
type Simulation struct {
	// Profile is the profile name it was built from.
	Profile string
	server  *server.Server
	spec    profileSpec
	now     func() time.Time
	mu      sync.Mutex
	devs    []*simDevice
	index   map[nvml.Device]int
}

type simDevice struct {
	busy     map[uint32]time.Duration // cumulative busy time per process
	mem      map[uint32]uint64        // memory per process
	winStart time.Time
	winBusy  map[uint32]time.Duration // busy at winStart
	util     uint32                   // SM % of the last window
	procUtil map[uint32]uint32
	utilAt   time.Time
}

// NewSimulation builds the named profile. now is its clock (time.Now if nil).
func NewSimulation(profile string, now func() time.Time) (*Simulation, error) {
	spec, err := lookupProfile(profile)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	s := &Simulation{Profile: profile, spec: spec, now: now, index: map[nvml.Device]int{}}
	s.server, err = server.New(
		server.WithGPUs(gpus.Multiple(spec.n, spec.gpu)...),
		server.WithDriverVersion("550.54.15"),
		server.WithNVMLVersion("12.550.54.15"),
		server.WithCUDADriverVersion(12040),
	)
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", profile, err)
	}
	t0 := now()
	for i, d := range s.server.Devices {
		sd := &simDevice{busy: map[uint32]time.Duration{}, mem: map[uint32]uint64{},
			winStart: t0, winBusy: map[uint32]time.Duration{}, procUtil: map[uint32]uint32{}, utilAt: t0}
		s.devs = append(s.devs, sd)
		s.index[d] = i
		s.fill(i, d.(*server.Device))
	}
	s.server.DeviceGetNvLinkRemoteDeviceTypeFunc = func(d nvml.Device, link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		i, ok := s.index[d]
		if !ok {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		ls := s.linksOf(i)
		if link < 0 || link >= len(ls) {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if ls[link].toSwitch {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
	}
	return s, nil
}

// NVML returns the simulated library (the filled-in mock server).
func (s *Simulation) NVML() NVML { return s.server }

// Len is the number of simulated GPUs (0 for nil).
func (s *Simulation) Len() int {
	if s == nil {
		return 0
	}
	return len(s.devs)
}

func (s *Simulation) linksOf(i int) []simLink {
	if s.spec.links == nil {
		return nil
	}
	return s.spec.links(i, s.spec.busID)
}

// fill implements the calls the stock mock device panics on.
func (s *Simulation) fill(i int, d *server.Device) {
	d.UUID = "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("troupe-simulated/%s/%d", s.Profile, i))).String()
	d.PciBusID = s.spec.busID(i)
	cfg := d.Config
	links := s.linksOf(i)
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: cfg.PciDeviceId}
		setCString(p.BusId[:], "0000"+d.PciBusID) // 8-digit domain, as the driver reports
		setCString(p.BusIdLegacy[:], d.PciBusID)
		return p, nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return s.spec.numa(i), nvml.SUCCESS }
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if len(links) == 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if link < 0 || link >= len(links) {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		if link < 0 || link >= len(links) {
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		var p nvml.PciInfo
		setCString(p.BusId[:], "0000"+links[link].remote)
		return p, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		j, ok := s.index[other]
		if !ok {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if i == j {
			return nvml.TOPOLOGY_INTERNAL, nvml.SUCCESS
		}
		return s.spec.pcie(i, j), nvml.SUCCESS
	}
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return uint32(s.spec.maxW * 1000), nvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		u := s.refresh(i)
		return nvml.Utilization{Gpu: u, Memory: u / 2}, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		u := float64(s.refresh(i))
		w := s.spec.idleW + (s.spec.maxW-s.spec.idleW)*u/100
		return uint32(w * 1000), nvml.SUCCESS
	}
	d.GetTemperatureFunc = func(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
		if sensor != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return 30 + s.refresh(i)*45/100, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		total := d.MemoryInfo.Total
		var used uint64
		for _, b := range s.devs[i].mem {
			used += b
		}
		used = min(used, total)
		return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sd := s.devs[i]
		pids := map[uint32]bool{}
		for p := range sd.busy {
			pids[p] = true
		}
		for p, b := range sd.mem {
			if b > 0 {
				pids[p] = true
			}
		}
		out := make([]nvml.ProcessInfo, 0, len(pids))
		for p := range pids {
			out = append(out, nvml.ProcessInfo{Pid: p, UsedGpuMemory: sd.mem[p],
				GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Pid < out[b].Pid })
		return out, nvml.SUCCESS
	}
	d.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		s.refresh(i)
		s.mu.Lock()
		defer s.mu.Unlock()
		sd := s.devs[i]
		ts := uint64(sd.utilAt.UnixMicro())
		var out []nvml.ProcessUtilizationSample
		if ts > lastSeen {
			for p, u := range sd.procUtil {
				if u > 0 {
					out = append(out, nvml.ProcessUtilizationSample{Pid: p, TimeStamp: ts, SmUtil: u, MemUtil: u / 2})
				}
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND // what NVML says when no samples are newer
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Pid < out[b].Pid })
		return out, nvml.SUCCESS
	}
}

// refresh closes the utilization window if it is old enough and returns the
// SM percentage of the last closed window.
func (s *Simulation) refresh(i int) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	sd := s.devs[i]
	now := s.now()
	el := now.Sub(sd.winStart)
	if el < simWindow {
		return sd.util
	}
	var total time.Duration
	clear(sd.procUtil)
	for p, b := range sd.busy {
		d := b - sd.winBusy[p]
		total += d
		sd.procUtil[p] = pct(d, el)
		sd.winBusy[p] = b
	}
	sd.util = pct(total, el)
	sd.winStart, sd.utilAt = now, now
	return sd.util
}

// pct is busy/elapsed as a percentage capped at 100 (work reported late can
// land in a later window than the one it ran in).
func pct(busy, elapsed time.Duration) uint32 {
	if elapsed <= 0 || busy <= 0 {
		return 0
	}
	p := (busy*100 + elapsed/2) / elapsed
	return uint32(min(p, 100))
}

func (s *Simulation) check(index int) error {
	if s == nil || index < 0 || index >= len(s.devs) {
		return fmt.Errorf("%w: index %d (simulated machine has %d)", ErrNoDevice, index, s.Len())
	}
	return nil
}

// AddBusy records that GPU index ran work of this process for d.
func (s *Simulation) AddBusy(index int, d time.Duration) error {
	return s.AddProcessBusy(index, uint32(os.Getpid()), d)
}

// AddProcessBusy records that process pid kept GPU index busy for d (for
// worker processes reporting through their node).
func (s *Simulation) AddProcessBusy(index int, pid uint32, d time.Duration) error {
	if err := s.check(index); err != nil {
		return fmt.Errorf("add busy time: %w", err)
	}
	if d < 0 {
		return fmt.Errorf("add busy time on GPU %d: negative duration %v", index, d)
	}
	s.mu.Lock()
	s.devs[index].busy[pid] += d
	s.mu.Unlock()
	return nil
}

// ErrSimulatedOOM reports memory declared beyond a simulated GPU's total.
var ErrSimulatedOOM = errors.New("gpu: simulated GPU out of memory")

// SetProcessMemory declares the GPU memory process pid holds on GPU index
// (0 releases it). Like a real allocation it fails when the GPU's memory
// would be exceeded.
func (s *Simulation) SetProcessMemory(index int, pid uint32, bytes uint64) error {
	if err := s.check(index); err != nil {
		return fmt.Errorf("set process memory: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var others uint64
	for p, b := range s.devs[index].mem {
		if p != pid {
			others += b
		}
	}
	if total := s.spec.gpu.MemoryMB << 20; others+bytes > total {
		return fmt.Errorf("set memory of process %d on GPU %d to %d bytes: %w (%d of %d bytes held by others)",
			pid, index, bytes, ErrSimulatedOOM, others, total)
	}
	if bytes == 0 {
		delete(s.devs[index].mem, pid)
	} else {
		s.devs[index].mem[pid] = bytes
	}
	return nil
}
