package scheduler

import (
	"fmt"
	"math/bits"
)

// Link scores of a GPU pair on the go-gpuallocator scale. A caller building a
// topology matrix from NVML uses ScoreNVLink times the number of NVLinks
// between the pair, or one of the PCIe scores for the closest common
// ancestor.
const (
	ScoreNVLink           = 100 // per NVLink between the pair
	ScorePCIeSameBoard    = 60  // same board (multi-GPU card)
	ScorePCIeSingleSwitch = 50  // behind one PCIe switch
	ScorePCIeMultiSwitch  = 40  // across several PCIe switches
	ScorePCIeHostBridge   = 30  // through the host bridge
	ScoreSameCPU          = 20  // same CPU socket (NUMA node)
	ScoreCrossCPU         = 10  // across CPU sockets
)

// MaxGPUsPerNode bounds a node's GPU count (per-node GPU sets are bitmasks).
const MaxGPUsPerNode = 64

// NodeID names a node uniquely in the cluster.
type NodeID string

// NodeState is a node's liveness as committed through raft.
type NodeState uint8

// Node states. Only NodeAlive nodes receive new placements.
const (
	// NodeAlive: healthy and schedulable.
	NodeAlive NodeState = 1
	// NodeSuspect: missed gossip probes; keeps its actors, gets no new ones.
	NodeSuspect NodeState = 2
	// NodeDead: gone; its actors and bundles were released for re-placement.
	NodeDead NodeState = 3
	// NodeDraining: being stopped gracefully; keeps its actors, gets no new ones.
	NodeDraining NodeState = 4
)

// String returns the state's lower-case name.
func (s NodeState) String() string {
	switch s {
	case NodeAlive:
		return "alive"
	case NodeSuspect:
		return "suspect"
	case NodeDead:
		return "dead"
	case NodeDraining:
		return "draining"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// GPUInfo describes one GPU of a node as reported at registration.
type GPUInfo struct {
	// Index is the device index the actor will be given (for example in
	// CUDA_VISIBLE_DEVICES). Indices are distinct and listed in increasing
	// order.
	Index int `msgpack:"i"`
	// UUID is the device UUID (stable across reboots and renumbering).
	UUID string `msgpack:"u"`
	// Model is the product name, for display.
	Model string `msgpack:"m,omitempty"`
	// MemoryBytes is the device memory, for display.
	MemoryBytes int64 `msgpack:"mem,omitempty"`
}

// GPU is one GPU of a node with its free fraction (1 = entirely free).
type GPU struct {
	GPUInfo `msgpack:",inline"`
	// Free is the unallocated fraction of this GPU, in [0, 1].
	Free float64 `msgpack:"f"`
}

// NodeInfo is what a node advertises when it registers.
type NodeInfo struct {
	// ID is the unique node name.
	ID NodeID `msgpack:"id"`
	// Address is where the node's gRPC server listens (host:port).
	Address string `msgpack:"addr"`
	// Labels are arbitrary key/values matched by label selectors.
	Labels map[string]string `msgpack:"labels,omitempty"`
	// Resources are the node's CPU, memory and custom resources. Its GPUs
	// field is ignored: the GPU count is len(GPUs).
	Resources Resources `msgpack:"res"`
	// GPUs lists the node's devices in increasing Index order.
	GPUs []GPUInfo `msgpack:"gpus,omitempty"`
	// Topology is the pairwise link score matrix, len(GPUs) × len(GPUs),
	// symmetric, indexed by position in GPUs (diagonal ignored). Nil means
	// unknown: every pair scores the same.
	Topology [][]int `msgpack:"topo,omitempty"`
}

// Validate checks a registration for shape errors.
func (ni NodeInfo) Validate() error {
	if ni.ID == "" {
		return fmt.Errorf("%w: node with empty ID", ErrInvalid)
	}
	r := ni.Resources
	r.GPUs = 0
	if err := r.Validate(); err != nil {
		return fmt.Errorf("node %s resources: %w", ni.ID, err)
	}
	n := len(ni.GPUs)
	if n > MaxGPUsPerNode {
		return fmt.Errorf("%w: node %s has %d GPUs, at most %d supported", ErrInvalid, ni.ID, n, MaxGPUsPerNode)
	}
	for i, g := range ni.GPUs {
		if g.Index < 0 || (i > 0 && g.Index <= ni.GPUs[i-1].Index) {
			return fmt.Errorf("%w: node %s GPU indices must be non-negative and increasing (position %d has %d)", ErrInvalid, ni.ID, i, g.Index)
		}
	}
	if ni.Topology != nil {
		if len(ni.Topology) != n {
			return fmt.Errorf("%w: node %s topology has %d rows for %d GPUs", ErrInvalid, ni.ID, len(ni.Topology), n)
		}
		for i, row := range ni.Topology {
			if len(row) != n {
				return fmt.Errorf("%w: node %s topology row %d has %d entries for %d GPUs", ErrInvalid, ni.ID, i, len(row), n)
			}
			for j, v := range row {
				if v < 0 || v > 1<<20 {
					return fmt.Errorf("%w: node %s topology score [%d][%d]=%d out of range", ErrInvalid, ni.ID, i, j, v)
				}
				if i != j && ni.Topology[j][i] != v {
					return fmt.Errorf("%w: node %s topology not symmetric at [%d][%d]", ErrInvalid, ni.ID, i, j)
				}
			}
		}
	}
	return nil
}

// Node is a registered node with its committed state and free resources.
type Node struct {
	// ID is the unique node name.
	ID NodeID `msgpack:"id"`
	// Address is the node's gRPC address.
	Address string `msgpack:"addr"`
	// Labels are the node's labels.
	Labels map[string]string `msgpack:"labels,omitempty"`
	// State is the node's liveness.
	State NodeState `msgpack:"state"`
	// Total is everything the node has (GPUs = number of devices).
	Total Resources `msgpack:"total"`
	// Free is what is not allocated to actors or placement-group bundles
	// (GPUs = sum of the per-GPU free fractions).
	Free Resources `msgpack:"free"`
	// GPUs lists the devices with their free fractions.
	GPUs []GPU `msgpack:"gpus,omitempty"`
	// Topology is the pairwise link score matrix (see NodeInfo.Topology).
	Topology [][]int `msgpack:"topo,omitempty"`
	// UpdatedAt is the timestamp (Unix nanoseconds, from the command) of the
	// last state change.
	UpdatedAt int64 `msgpack:"at"`
	// Cause says why the node is draining, suspect or dead ("" when alive).
	Cause string `msgpack:"cause,omitempty"`
	// Drained marks a dead node that was draining when it went: it left on
	// purpose (troupe stop) rather than failing.
	Drained bool `msgpack:"drained,omitempty"`
}

// schedulable reports whether n takes new placements.
func (n *Node) schedulable() bool { return n.State == NodeAlive }

// score returns the link score between GPU slots i and j.
func (n *Node) score(i, j int) int {
	if n.Topology == nil {
		return 0
	}
	return n.Topology[i][j]
}

// slot returns the position in n.GPUs of the device with index idx, or -1.
func (n *Node) slot(idx int) int {
	if idx < len(n.GPUs) && n.GPUs[idx].Index == idx {
		return idx // the common case: indices 0..n-1
	}
	for i := range n.GPUs {
		if n.GPUs[i].Index == idx {
			return i
		}
	}
	return -1
}

// wholeFreeMask returns the bitmask of slots whose GPU is entirely free.
func (n *Node) wholeFreeMask() uint64 {
	var m uint64
	for i := range n.GPUs {
		if n.GPUs[i].Free >= 1 {
			m |= 1 << uint(i)
		}
	}
	return m
}

// wholeFree returns the number of entirely free GPUs.
func (n *Node) wholeFree() int { return bits.OnesCount64(n.wholeFreeMask()) }

// hasPartial reports whether some GPU is partly allocated and partly free.
func (n *Node) hasPartial() bool {
	for i := range n.GPUs {
		if f := n.GPUs[i].Free; f > 0 && f < 1 {
			return true
		}
	}
	return false
}

// clone returns a deep copy of n. The topology matrix and labels are
// shared: they are never modified in place (a re-registration replaces them).
func (n *Node) clone() *Node {
	c := *n
	c.Total = n.Total.Clone()
	c.Free = n.Free.Clone()
	c.GPUs = append([]GPU(nil), n.GPUs...)
	return &c
}

// newNode builds a fully free node from a registration.
func newNode(ni NodeInfo, at int64) *Node {
	n := &Node{ID: ni.ID, Address: ni.Address, State: NodeAlive, UpdatedAt: at}
	if ni.Labels != nil {
		n.Labels = make(map[string]string, len(ni.Labels))
		for k, v := range ni.Labels {
			n.Labels[k] = v
		}
	}
	n.Total = ni.Resources.Clone()
	n.Total.GPUs = float64(len(ni.GPUs))
	n.Free = n.Total.Clone()
	for _, g := range ni.GPUs {
		n.GPUs = append(n.GPUs, GPU{GPUInfo: g, Free: 1})
	}
	if ni.Topology != nil {
		n.Topology = make([][]int, len(ni.Topology))
		for i := range ni.Topology {
			n.Topology[i] = append([]int(nil), ni.Topology[i]...)
		}
	}
	return n
}

// GPUAlloc is a share of one GPU given to an actor or reserved by a bundle.
type GPUAlloc struct {
	// Index is the device index (GPUInfo.Index).
	Index int `msgpack:"i"`
	// Fraction is the share of the device, in (0, 1].
	Fraction float64 `msgpack:"f"`
}

// GPUIndices returns the device indices of allocs, in order.
func GPUIndices(allocs []GPUAlloc) []int {
	out := make([]int, len(allocs))
	for i, a := range allocs {
		out[i] = a.Index
	}
	return out
}

// checkGPUAllocs validates that allocs is a well-formed way to give req.GPUs
// from the devices in pool (a device index → free fraction lookup): distinct
// indices, whole devices for whole requests, one device for a fraction, and
// enough free on each.
func checkGPUAllocs(req Resources, allocs []GPUAlloc, free func(idx int) (float64, bool)) error {
	whole := req.wholeGPUs()
	switch {
	case whole > 0:
		if len(allocs) != whole {
			return fmt.Errorf("%w: %d GPUs requested, %d allocated", ErrConflict, whole, len(allocs))
		}
	case req.fractionalGPU():
		if len(allocs) != 1 || allocs[0].Fraction != q(req.GPUs) {
			return fmt.Errorf("%w: %g of a GPU requested, allocation %v does not match", ErrConflict, req.GPUs, allocs)
		}
	default:
		if len(allocs) != 0 {
			return fmt.Errorf("%w: no GPU requested but %d allocated", ErrConflict, len(allocs))
		}
	}
	for i, a := range allocs {
		if whole > 0 && a.Fraction != 1 {
			return fmt.Errorf("%w: whole-GPU request got fraction %g of GPU %d", ErrConflict, a.Fraction, a.Index)
		}
		for _, b := range allocs[:i] {
			if b.Index == a.Index {
				return fmt.Errorf("%w: GPU %d allocated twice", ErrConflict, a.Index)
			}
		}
		f, ok := free(a.Index)
		if !ok {
			return fmt.Errorf("%w: no GPU with index %d", ErrConflict, a.Index)
		}
		if a.Fraction > f+1e-9 {
			return fmt.Errorf("%w: GPU %d has %g free, %g needed", ErrConflict, a.Index, f, a.Fraction)
		}
	}
	return nil
}
