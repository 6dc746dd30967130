package gpu

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"troupe/gpu/busy"
)

// BusyFeed moves the busy time and memory that compute backends recorded
// (this process's meter and the ledgers of worker processes) into a
// Simulation, so its utilization follows the work. Call Pull before each
// sample (SamplerConfig.BeforeSample). It is safe for concurrent use.
type BusyFeed struct {
	sim  *Simulation
	node string
	// Meter is this process's meter (nil: none).
	meter *busy.Meter
	// dir is the worker ledger directory ("" for none).
	dir   string
	owned bool // dir was created by NewBusyFeed and is removed by Close

	mu   sync.Mutex
	last map[busy.Record]int64 // busy ns seen, keyed by the record with values zeroed
	mem  map[feedSlot]uint64   // memory last declared per (GPU, pid)
}

type feedSlot struct {
	gpu int
	pid uint32
}

// BusyFeedOptions configure NewBusyFeed.
type BusyFeedOptions struct {
	// Node is this node's ID: records of other nodes (several nodes in one
	// test process) are ignored; records with no node are taken.
	Node string
	// Meter is read on every Pull (ProcessMeter() in a node process).
	Meter *busy.Meter
	// LedgerDir, if set, is the directory of worker ledgers; it is created
	// afresh (mode 0700; stale ledgers of an earlier process are removed)
	// and removed by Close. Only one feed may use a directory.
	LedgerDir string
}

// NewBusyFeed returns a feed into sim.
func NewBusyFeed(sim *Simulation, o BusyFeedOptions) (*BusyFeed, error) {
	if sim == nil || sim.server == nil {
		return nil, fmt.Errorf("busy feed: no simulated GPUs to feed")
	}
	f := &BusyFeed{sim: sim, node: o.Node, meter: o.Meter, dir: o.LedgerDir,
		last: map[busy.Record]int64{}, mem: map[feedSlot]uint64{}}
	if f.dir != "" {
		err := os.Mkdir(f.dir, 0o700)
		if errors.Is(err, os.ErrExist) {
			// Left by an earlier process with this PID (killed before it
			// cleaned up): its ledgers are stale.
			if !busy.PrivateDir(f.dir) {
				return nil, fmt.Errorf("busy feed: ledger directory %s exists and is not a private directory of this user", f.dir)
			}
			if err = os.RemoveAll(f.dir); err == nil {
				err = os.Mkdir(f.dir, 0o700)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("busy feed: ledger directory: %w", err)
		}
		f.owned = true
	}
	if f.meter != nil { // count only work done from now on
		for _, r := range f.meter.Snapshot() {
			k := r
			k.BusyNanos, k.MemoryBytes = 0, 0
			f.last[k] = r.BusyNanos
		}
	}
	return f, nil
}

// Pull reads the meter and the ledgers and reports what changed since the
// last Pull. Errors (a malformed ledger, memory beyond a simulated GPU) are
// returned after everything else was fed.
func (f *BusyFeed) Pull() error {
	var recs []busy.Record
	var errs []error
	if f.meter != nil {
		recs = f.meter.Snapshot()
	}
	if f.dir != "" {
		rs, err := busy.ReadLedgers(f.dir)
		recs = append(recs, rs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	mem := map[feedSlot]uint64{}
	for _, r := range recs {
		if r.Node != "" && r.Node != f.node {
			continue
		}
		if r.GPU < 0 || r.GPU >= f.sim.Len() {
			continue // not one of this node's GPUs
		}
		k := r
		k.BusyNanos, k.MemoryBytes = 0, 0
		if d := r.BusyNanos - f.last[k]; d > 0 {
			if err := f.sim.AddProcessBusy(r.GPU, r.PID, time.Duration(d)); err != nil {
				errs = append(errs, err)
			}
		}
		f.last[k] = r.BusyNanos
		if r.MemoryBytes > 0 {
			mem[feedSlot{r.GPU, r.PID}] += uint64(r.MemoryBytes)
		}
	}
	for s, b := range mem {
		if f.mem[s] != b {
			if err := f.sim.SetProcessMemory(s.gpu, s.pid, b); err != nil {
				errs = append(errs, err)
				continue
			}
			f.mem[s] = b
		}
	}
	for s := range f.mem {
		if _, ok := mem[s]; !ok {
			f.sim.SetProcessMemory(s.gpu, s.pid, 0) // released (or the process ended)
			delete(f.mem, s)
		}
	}
	return errors.Join(errs...)
}

// Close removes the ledger directory if NewBusyFeed created it.
func (f *BusyFeed) Close() error {
	if f.owned {
		return os.RemoveAll(f.dir)
	}
	return nil
}
