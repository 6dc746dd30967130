package busy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Busy accounting: how simulated GPUs learn about real work.
//
// A compute backend bound to a GPU (see Metered) adds the wall time of
// every op it runs, and the device memory it allocates, to a Counter
// of this process's Meter, keyed by (node, GPU index, actor). The node
// that owns the simulated GPUs reads the counters before each sample with
// a BusyFeed and reports the increase as busy time of the process on that
// GPU (Simulation.AddProcessBusy) and the memory as the process's GPU
// memory, so the simulated SM utilization is the fraction of the last
// window the actors on that GPU kept their backends busy.
//
// Actors run in the node process (embedded cluster, tests) or in worker
// processes the node started. Worker processes publish their counters as a
// small JSON ledger file, <LedgerDir(node pid)>/<worker pid>.json, rewritten
// at most every ledgerFlush while they change; the node creates that
// directory and reads it (a worker finds it through its parent PID, so no
// protocol or environment change is needed).

// Key names whose work a Counter measures.
type Key struct {
	// Node is the node the GPU belongs to ("" means any node that reads
	// the meter: a single-node process).
	Node string `json:"node,omitempty"`
	// GPU is the device index on that node.
	GPU int `json:"gpu"`
	// Actor is the actor doing the work (informational).
	Actor string `json:"actor,omitempty"`
}

// Counter accumulates the busy time and the device memory of one key.
// It is safe for concurrent use; adding is one atomic operation.
type Counter struct {
	key  Key
	busy atomic.Int64 // nanoseconds, cumulative
	mem  atomic.Int64 // bytes currently held
	m    *Meter
}

// Key returns what the counter measures.
func (c *Counter) Key() Key { return c.key }

// AddBusy records d more busy time (negative d is ignored).
func (c *Counter) AddBusy(d time.Duration) {
	if d <= 0 {
		return
	}
	c.busy.Add(int64(d))
	c.m.changed.Store(true)
}

// AddMemory records delta more (or, negative, fewer) bytes of device
// memory held.
func (c *Counter) AddMemory(delta int64) {
	if delta == 0 {
		return
	}
	c.mem.Add(delta)
	c.m.changed.Store(true)
}

// Busy returns the cumulative busy time.
func (c *Counter) Busy() time.Duration { return time.Duration(c.busy.Load()) }

// Memory returns the bytes currently held.
func (c *Counter) Memory() int64 { return c.mem.Load() }

// Record is one counter's cumulative values, as a meter's snapshot or
// a worker's ledger reports them.
type Record struct {
	Key
	// PID is the process the work ran in.
	PID uint32 `json:"pid"`
	// BusyNanos is the cumulative busy time in nanoseconds.
	BusyNanos int64 `json:"busy_ns"`
	// MemoryBytes is the device memory held now.
	MemoryBytes int64 `json:"memory_bytes"`
}

// Meter holds the busy counters of one process. It is safe for
// concurrent use.
type Meter struct {
	pid     uint32
	mu      sync.Mutex
	byKey   map[Key]*Counter
	changed atomic.Bool

	ledgerOnce sync.Once
	ledgerDir  func() string // where to publish (nil or "": nowhere)
}

// NewMeter returns an empty meter attributing its work to this process.
func NewMeter() *Meter {
	return &Meter{pid: uint32(os.Getpid()), byKey: map[Key]*Counter{}}
}

var processMeter = func() *Meter {
	m := NewMeter()
	m.ledgerDir = func() string {
		dir := LedgerDir(os.Getppid())
		if !PrivateDir(dir) {
			return "" // the parent is no node with simulated GPUs
		}
		return dir
	}
	return m
}()

// ProcessMeter returns this process's meter. In a worker process whose
// node collects busy time (its ledger directory exists), the first counter
// also starts publishing the meter there.
func ProcessMeter() *Meter { return processMeter }

// Counter returns the counter of k, creating it.
func (m *Meter) Counter(k Key) *Counter {
	m.mu.Lock()
	c := m.byKey[k]
	if c == nil {
		c = &Counter{key: k, m: m}
		m.byKey[k] = c
	}
	m.mu.Unlock()
	if m.ledgerDir != nil {
		m.ledgerOnce.Do(func() {
			if dir := m.ledgerDir(); dir != "" {
				go m.publish(dir)
			}
		})
	}
	return c
}

// Snapshot returns every counter's cumulative values, sorted by node, GPU
// and actor.
func (m *Meter) Snapshot() []Record {
	m.mu.Lock()
	out := make([]Record, 0, len(m.byKey))
	for k, c := range m.byKey {
		out = append(out, Record{Key: k, PID: m.pid, BusyNanos: c.busy.Load(), MemoryBytes: c.mem.Load()})
	}
	m.mu.Unlock()
	sortRecords(out)
	return out
}

func sortRecords(rs []Record) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.PID != b.PID {
			return a.PID < b.PID
		}
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		if a.GPU != b.GPU {
			return a.GPU < b.GPU
		}
		return a.Actor < b.Actor
	})
}

// ledgerFlush is how often a worker process rewrites its ledger while its
// counters change (well under the 1 s sampling interval).
const ledgerFlush = 200 * time.Millisecond

// publish rewrites the ledger file while the counters change, for the
// lifetime of the process.
func (m *Meter) publish(dir string) {
	for {
		if m.changed.Swap(false) {
			if err := m.WriteLedger(dir); err != nil && errors.Is(err, os.ErrNotExist) {
				return // the node went away and removed its directory
			}
		}
		time.Sleep(ledgerFlush)
	}
}

// LedgerDir is the directory where the node process nodePID collects the
// busy-time ledgers of its worker processes.
func LedgerDir(nodePID int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("troupe-gpu-busy-%d", nodePID))
}

// WriteLedger writes the meter's snapshot to dir/<pid>.json atomically
// (a temporary file renamed into place).
func (m *Meter) WriteLedger(dir string) error {
	b, err := json.Marshal(m.Snapshot())
	if err != nil {
		return fmt.Errorf("busy ledger: %w", err)
	}
	name := filepath.Join(dir, strconv.FormatUint(uint64(m.pid), 10)+".json")
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("busy ledger: %w", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("busy ledger: %w", err)
	}
	return nil
}

// ErrLedger reports a malformed busy ledger.
var ErrLedger = errors.New("busy: malformed ledger")

// maxLedgerRecords bounds one ledger (a process has a few actors on a few
// GPUs; anything near this is not a ledger).
const maxLedgerRecords = 4096

// ParseLedger decodes a ledger written by WriteLedger for process pid:
// every record must name that process, a GPU index in [0, 64) and
// non-negative values.
func ParseLedger(b []byte, pid uint32) ([]Record, error) {
	var rs []Record
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, fmt.Errorf("%w of process %d: %v", ErrLedger, pid, err)
	}
	if len(rs) > maxLedgerRecords {
		return nil, fmt.Errorf("%w of process %d: %d records (at most %d)", ErrLedger, pid, len(rs), maxLedgerRecords)
	}
	for _, r := range rs {
		switch {
		case r.PID != pid:
			return nil, fmt.Errorf("%w: file of process %d has a record of process %d", ErrLedger, pid, r.PID)
		case r.GPU < 0 || r.GPU >= 64:
			return nil, fmt.Errorf("%w of process %d: GPU index %d", ErrLedger, pid, r.GPU)
		case r.BusyNanos < 0 || r.MemoryBytes < 0:
			return nil, fmt.Errorf("%w of process %d: negative busy time or memory on GPU %d", ErrLedger, pid, r.GPU)
		}
	}
	return rs, nil
}

// ReadLedgers reads every worker ledger in dir. Files of processes that
// no longer exist are removed after reading (their memory is released);
// malformed files are skipped and reported in the joined error.
func ReadLedgers(dir string) ([]Record, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("busy ledgers: %w", err)
	}
	var out []Record
	var errs []error
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		pid, err := strconv.ParseUint(name, 10, 32)
		if err != nil || pid == 0 {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rs, err := ParseLedger(b, uint32(pid))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !processAlive(int(pid)) {
			os.Remove(path)
			for i := range rs {
				rs[i].MemoryBytes = 0 // an ended process holds no memory
			}
		}
		out = append(out, rs...)
	}
	sortRecords(out)
	return out, errors.Join(errs...)
}

// PrivateDir reports whether dir is a directory of this process's user
// that others cannot read or write (a ledger directory someone else made
// in the shared temporary directory is not used).
func PrivateDir(dir string) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm()&0o077 != 0 {
		return false
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) != os.Getuid() {
		return false
	}
	return true
}

// processAlive reports whether process pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
