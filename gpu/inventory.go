// Package gpu is troupe's view of GPUs: the NVML inventory of a node's
// devices (identity, memory, PCI/NUMA placement), the pairwise interconnect
// topology and its placement scores, periodic utilization sampling with
// per-actor attribution, and simulated GPU profiles for machines without
// GPUs. It is the devices half only: the compute backends the models run
// on are in gpu/compute, which never imports this package.
//
// A machine without the NVML library has no GPUs: Open returns an empty
// inventory, not an error. A device whose single query fails is kept, with
// that field missing (nil) and the reason in its Errors map.
package gpu

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// EnvSimulate names the environment variable that selects a simulated GPU
// profile (same values as --simulate-gpus).
const EnvSimulate = "TROUPE_SIMULATE_GPUS"

// ComputeCapability is a CUDA compute capability such as 9.0.
type ComputeCapability struct {
	Major int `json:"major"`
	Minor int `json:"minor"`
}

// String formats it as "9.0".
func (c ComputeCapability) String() string { return fmt.Sprintf("%d.%d", c.Major, c.Minor) }

// DeviceInfo is the static description of one GPU. Pointer fields are nil
// when their query failed; Errors then says why.
type DeviceInfo struct {
	Index             int                `json:"index"`
	UUID              string             `json:"uuid,omitempty"`
	Name              string             `json:"name,omitempty"`
	MemoryTotal       *uint64            `json:"memory_total_bytes,omitempty"`
	ComputeCapability *ComputeCapability `json:"compute_capability,omitempty"`
	PCIBusID          string             `json:"pci_bus_id,omitempty"`
	NUMANode          *int               `json:"numa_node,omitempty"`
	PowerLimitWatts   *float64           `json:"power_limit_watts,omitempty"`
	// Simulated marks a device of a simulated profile, never real hardware.
	Simulated bool `json:"simulated"`
	// Errors maps a missing field to the NVML error that hid it.
	Errors map[string]string `json:"errors,omitempty"`
}

// Process is one process using a GPU.
type Process struct {
	PID        uint32  `json:"pid"`
	MemoryUsed uint64  `json:"memory_used_bytes"`
	SMUtil     *uint32 `json:"sm_util_percent,omitempty"`
}

// Sample is the dynamic state of one GPU at one time. Pointer fields are nil
// when their query failed; Errors says why.
type Sample struct {
	Index        int       `json:"index"`
	Time         time.Time `json:"time"`
	SMUtil       *uint32   `json:"sm_util_percent,omitempty"`
	MemUtil      *uint32   `json:"mem_util_percent,omitempty"`
	MemoryUsed   *uint64   `json:"memory_used_bytes,omitempty"`
	MemoryTotal  *uint64   `json:"memory_total_bytes,omitempty"`
	PowerWatts   *float64  `json:"power_watts,omitempty"`
	TemperatureC *uint32   `json:"temperature_celsius,omitempty"`
	Processes    []Process `json:"processes,omitempty"`
	// Actors holding this GPU (filled by a Sampler with an Attribution).
	Actors    []Holder          `json:"actors,omitempty"`
	Simulated bool              `json:"simulated"`
	Errors    map[string]string `json:"errors,omitempty"`
}

// Options configure Open.
type Options struct {
	// Simulate names a simulated profile (see Profiles); empty means the
	// real GPUs through NVML.
	Simulate string
	// Now is the clock (time.Now if nil); tests inject a fixed one.
	Now func() time.Time
}

// Inventory is a node's GPUs: static descriptions and topology read once,
// dynamic state read on each Sample call. It is safe for concurrent use.
type Inventory struct {
	lib       NVML
	devs      []nvml.Device
	info      []DeviceInfo
	topo      *Topology
	sim       *Simulation
	now       func() time.Time
	mu        sync.Mutex
	lastSeen  []uint64 // per device: newest process-utilization timestamp seen
	closeOnce sync.Once
}

// Open returns the inventory of this machine's GPUs, or of the simulated
// profile named in opts. No NVML library (or no driver) means an empty
// inventory and a nil error.
func Open(opts Options) (*Inventory, error) {
	if opts.Simulate != "" {
		sim, err := NewSimulation(opts.Simulate, opts.Now)
		if err != nil {
			return nil, err
		}
		return newInventory(sim.NVML(), sim, opts.Now)
	}
	lib := nvml.New()
	return newInventory(lib, nil, opts.Now)
}

// NewInventory reads the devices of lib (real NVML or a test double).
// simulated marks every device as simulated.
func NewInventory(lib NVML, simulated bool, now func() time.Time) (*Inventory, error) {
	var sim *Simulation
	if simulated {
		sim = &Simulation{} // marker only: no busy tracking for foreign mocks
	}
	return newInventory(lib, sim, now)
}

func newInventory(lib NVML, sim *Simulation, now func() time.Time) (*Inventory, error) {
	if now == nil {
		now = time.Now
	}
	inv := &Inventory{lib: lib, sim: sim, now: now, topo: newTopology(nil)}
	ret := initLibrary(lib)
	if noGPUs(ret) {
		inv.lib = nil // nothing to shut down
		return inv, nil
	}
	if ret != nvml.SUCCESS {
		return nil, nvmlErr("initialize NVML", ret)
	}
	n, ret := call(lib.DeviceGetCount)
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, nvmlErr("count GPUs", ret)
	}
	busIDs := make([]string, 0, n)
	for i := 0; i < n; i++ {
		d, ret := call(func() (nvml.Device, nvml.Return) { return lib.DeviceGetHandleByIndex(i) })
		if ret != nvml.SUCCESS || d == nil {
			// Without a handle nothing can be read; keep the index visible.
			inv.devs = append(inv.devs, nil)
			inv.info = append(inv.info, DeviceInfo{Index: i, Simulated: sim != nil,
				Errors: map[string]string{"handle": retString(ret)}})
			busIDs = append(busIDs, "")
			continue
		}
		info := readInfo(i, d, sim != nil)
		inv.devs = append(inv.devs, d)
		inv.info = append(inv.info, info)
		busIDs = append(busIDs, info.PCIBusID)
	}
	inv.lastSeen = make([]uint64, n)
	inv.topo = discoverTopology(lib, nonNil(inv.devs), busIDs)
	return inv, nil
}

// nonNil replaces missing handles by a device whose every query fails, so
// topology discovery keeps indices aligned.
func nonNil(devs []nvml.Device) []nvml.Device {
	out := make([]nvml.Device, len(devs))
	for i, d := range devs {
		if d == nil {
			d = missingDevice{}
		}
		out[i] = d
	}
	return out
}

// missingDevice is an nvml.Device whose every call panics (caught by call).
type missingDevice struct{ nvml.Device }

func readInfo(i int, d nvml.Device, simulated bool) DeviceInfo {
	info := DeviceInfo{Index: i, Simulated: simulated}
	fail := func(field string, ret nvml.Return) {
		if info.Errors == nil {
			info.Errors = map[string]string{}
		}
		info.Errors[field] = retString(ret)
	}
	if s, ret := call(d.GetUUID); ret == nvml.SUCCESS {
		info.UUID = s
	} else {
		fail("uuid", ret)
	}
	if s, ret := call(d.GetName); ret == nvml.SUCCESS {
		info.Name = s
	} else {
		fail("name", ret)
	}
	if m, ret := call(d.GetMemoryInfo); ret == nvml.SUCCESS {
		info.MemoryTotal = &m.Total
	} else {
		fail("memory", ret)
	}
	if maj, mnr, ret := call2(d.GetCudaComputeCapability); ret == nvml.SUCCESS {
		info.ComputeCapability = &ComputeCapability{maj, mnr}
	} else {
		fail("compute_capability", ret)
	}
	if p, ret := call(d.GetPciInfo); ret == nvml.SUCCESS {
		info.PCIBusID = busIDOf(p)
	} else {
		fail("pci_bus_id", ret)
	}
	if n, ret := call(d.GetNumaNodeId); ret == nvml.SUCCESS {
		info.NUMANode = &n
	} else {
		fail("numa_node", ret)
	}
	if mw, ret := call(d.GetEnforcedPowerLimit); ret == nvml.SUCCESS {
		w := float64(mw) / 1000
		info.PowerLimitWatts = &w
	} else {
		fail("power_limit", ret)
	}
	return info
}

// Len is the number of GPUs.
func (inv *Inventory) Len() int { return len(inv.info) }

// Devices returns the static descriptions (a copy).
func (inv *Inventory) Devices() []DeviceInfo {
	out := make([]DeviceInfo, len(inv.info))
	copy(out, inv.info)
	return out
}

// Topology returns the pairwise link and score matrix.
func (inv *Inventory) Topology() *Topology { return inv.topo }

// Simulated reports whether the devices are simulated.
func (inv *Inventory) Simulated() bool { return inv.sim != nil }

// Simulation returns the simulated machine behind a simulated inventory
// (nil for real GPUs), to report busy time and memory into.
func (inv *Inventory) Simulation() *Simulation {
	if inv.sim == nil || inv.sim.server == nil {
		return nil
	}
	return inv.sim
}

// Profile names the simulated profile ("" for real GPUs).
func (inv *Inventory) Profile() string {
	if inv.sim == nil {
		return ""
	}
	return inv.sim.Profile
}

// Busy returns where compute backends report busy time: the simulation for
// simulated GPUs, a no-op for real ones (NVML measures them itself).
func (inv *Inventory) Busy() BusyReporter {
	if s := inv.Simulation(); s != nil {
		return s
	}
	return noBusy{}
}

// Close shuts NVML down. The inventory must not be used afterwards.
func (inv *Inventory) Close() error {
	var err error
	inv.closeOnce.Do(func() {
		if inv.lib == nil {
			return
		}
		if ret := initShutdown(inv.lib); ret != nvml.SUCCESS {
			err = nvmlErr("shut down NVML", ret)
		}
	})
	return err
}

func initShutdown(lib NVML) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = errPanic
		}
	}()
	return lib.Shutdown()
}

// ErrNoDevice reports a GPU index that is not in the inventory.
var ErrNoDevice = errors.New("gpu: no such GPU")

// Sample reads the dynamic state of every GPU now.
func (inv *Inventory) Sample() []Sample {
	out := make([]Sample, len(inv.info))
	for i := range inv.info {
		out[i] = inv.sampleOne(i)
	}
	return out
}

func (inv *Inventory) sampleOne(i int) Sample {
	s := Sample{Index: i, Time: inv.now(), Simulated: inv.sim != nil}
	d := inv.devs[i]
	fail := func(field string, ret nvml.Return) {
		if s.Errors == nil {
			s.Errors = map[string]string{}
		}
		s.Errors[field] = retString(ret)
	}
	if d == nil {
		fail("handle", nvml.ERROR_UNKNOWN)
		return s
	}
	if u, ret := call(d.GetUtilizationRates); ret == nvml.SUCCESS {
		s.SMUtil, s.MemUtil = &u.Gpu, &u.Memory
	} else {
		fail("utilization", ret)
	}
	if m, ret := call(d.GetMemoryInfo); ret == nvml.SUCCESS {
		s.MemoryUsed, s.MemoryTotal = &m.Used, &m.Total
	} else {
		fail("memory", ret)
	}
	if mw, ret := call(d.GetPowerUsage); ret == nvml.SUCCESS {
		w := float64(mw) / 1000
		s.PowerWatts = &w
	} else {
		fail("power", ret)
	}
	if t, ret := call(func() (uint32, nvml.Return) { return d.GetTemperature(nvml.TEMPERATURE_GPU) }); ret == nvml.SUCCESS {
		s.TemperatureC = &t
	} else {
		fail("temperature", ret)
	}
	procs, ret := call(d.GetComputeRunningProcesses)
	if ret != nvml.SUCCESS {
		fail("processes", ret)
		return s
	}
	inv.mu.Lock()
	seen := inv.lastSeen[i]
	inv.mu.Unlock()
	util := map[uint32]uint32{}
	samples, ret := call(func() ([]nvml.ProcessUtilizationSample, nvml.Return) { return d.GetProcessUtilization(seen) })
	switch ret {
	case nvml.SUCCESS:
		newest := seen
		for _, ps := range samples {
			if ps.TimeStamp >= newest {
				newest = ps.TimeStamp
			}
			util[ps.Pid] = ps.SmUtil // samples come oldest first; keep the latest
		}
		inv.mu.Lock()
		inv.lastSeen[i] = newest
		inv.mu.Unlock()
	case nvml.ERROR_NOT_FOUND:
		// No process ran kernels since the last call: utilization 0.
	default:
		fail("process_utilization", ret)
	}
	for _, p := range procs {
		pr := Process{PID: p.Pid, MemoryUsed: p.UsedGpuMemory}
		if ret == nvml.SUCCESS || ret == nvml.ERROR_NOT_FOUND {
			u := util[p.Pid]
			pr.SMUtil = &u
		}
		s.Processes = append(s.Processes, pr)
	}
	return s
}
