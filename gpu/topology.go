package gpu

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// LinkLevel is how two GPUs are connected, best first after LinkNVLink.
// The PCIe levels follow NVML's GetTopologyCommonAncestor (the nearest
// common ancestor of the two devices in the PCIe tree).
type LinkLevel int

// Link levels. LinkUnknown means the topology query failed for the pair.
const (
	LinkUnknown     LinkLevel = iota // query failed: no score
	LinkSelf                         // the same GPU
	LinkNVLink                       // one or more NVLinks (direct or through NVSwitch)
	LinkBoard                        // PCIe, same multi-GPU board (TOPOLOGY_INTERNAL)
	LinkSwitch                       // PCIe, a single switch (TOPOLOGY_SINGLE, "PIX")
	LinkMultiSwitch                  // PCIe, several switches (TOPOLOGY_MULTIPLE, "PXB")
	LinkHostBridge                   // PCIe, through a host bridge (TOPOLOGY_HOSTBRIDGE, "PHB")
	LinkNUMANode                     // same CPU / NUMA node, across host bridges (TOPOLOGY_NODE, "NODE")
	LinkSystem                       // across CPUs (TOPOLOGY_SYSTEM, "SYS")
)

// Scores of DESIGN.md (go-gpuallocator's scale).
const (
	scoreNVLinkPerLink = 100
	scoreBoard         = 60
	scoreSwitch        = 50
	scoreMultiSwitch   = 40
	scoreHostBridge    = 30
	scoreNUMANode      = 20
	scoreSystem        = 10
)

var levelNames = [...]string{"?", "X", "NV", "BRD", "PIX", "PXB", "PHB", "NODE", "SYS"}

// String returns the nvidia-smi "topo -m" style abbreviation.
func (l LinkLevel) String() string {
	if l < 0 || int(l) >= len(levelNames) {
		return "?"
	}
	return levelNames[l]
}

// MarshalText makes levels readable in JSON.
func (l LinkLevel) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses what MarshalText wrote; an unknown name is an error.
func (l *LinkLevel) UnmarshalText(b []byte) error {
	for i, n := range levelNames {
		if n == string(b) {
			*l = LinkLevel(i)
			return nil
		}
	}
	return fmt.Errorf("gpu: unknown link level %q", b)
}

// levelFromNVML maps NVML's common-ancestor level to a LinkLevel.
func levelFromNVML(t nvml.GpuTopologyLevel) LinkLevel {
	switch t {
	case nvml.TOPOLOGY_INTERNAL:
		return LinkBoard
	case nvml.TOPOLOGY_SINGLE:
		return LinkSwitch
	case nvml.TOPOLOGY_MULTIPLE:
		return LinkMultiSwitch
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return LinkHostBridge
	case nvml.TOPOLOGY_NODE:
		return LinkNUMANode
	case nvml.TOPOLOGY_SYSTEM:
		return LinkSystem
	}
	return LinkUnknown
}

// Link describes the connection between one pair of GPUs.
type Link struct {
	// Level is the best connection: LinkNVLink when NVLinks > 0, else the
	// PCIe level (kept in PCIe too).
	Level LinkLevel `json:"level"`
	// NVLinks is the number of NVLinks between the pair. Through an
	// NVSwitch it is the number of links both GPUs have into the switches
	// they share (for each shared switch the smaller of the two counts).
	NVLinks int `json:"nvlinks,omitempty"`
	// ViaNVSwitch reports that the NVLinks go through NVSwitches.
	ViaNVSwitch bool `json:"via_nvswitch,omitempty"`
	// PCIe is the PCIe common-ancestor level (LinkUnknown if the query failed).
	PCIe LinkLevel `json:"pcie"`
}

// Score is the pair's topology score: 100 per NVLink, else the PCIe level's.
func (l Link) Score() int {
	if l.NVLinks > 0 {
		return scoreNVLinkPerLink * l.NVLinks
	}
	switch l.PCIe {
	case LinkBoard:
		return scoreBoard
	case LinkSwitch:
		return scoreSwitch
	case LinkMultiSwitch:
		return scoreMultiSwitch
	case LinkHostBridge:
		return scoreHostBridge
	case LinkNUMANode:
		return scoreNUMANode
	case LinkSystem:
		return scoreSystem
	}
	return 0
}

// String is the nvidia-smi style cell: "NV18", "PIX", "SYS", "X".
func (l Link) String() string {
	if l.Level == LinkNVLink {
		return fmt.Sprintf("NV%d", l.NVLinks)
	}
	return l.Level.String()
}

// Topology is the pairwise interconnect of a node's GPUs, indexed by GPU
// index (position in the inventory).
type Topology struct {
	// Links[i][j] is the connection of GPUs i and j (Level LinkSelf on the
	// diagonal).
	Links [][]Link `json:"links"`
	// Scores[i][j] is Links[i][j].Score(), 0 on the diagonal.
	Scores [][]int `json:"scores"`
}

// newTopology builds the score matrix from the links.
func newTopology(links [][]Link) *Topology {
	t := &Topology{Links: links, Scores: make([][]int, len(links))}
	for i := range links {
		t.Scores[i] = make([]int, len(links))
		for j := range links[i] {
			if i != j {
				t.Scores[i][j] = links[i][j].Score()
			}
		}
	}
	return t
}

// Len is the number of GPUs.
func (t *Topology) Len() int {
	if t == nil {
		return 0
	}
	return len(t.Links)
}

// Score is the topology score of GPUs i and j; 0 for i == j or an index out
// of range.
func (t *Topology) Score(i, j int) int {
	if t == nil || i < 0 || j < 0 || i >= len(t.Scores) || j >= len(t.Scores) {
		return 0
	}
	return t.Scores[i][j]
}

// Link is the connection of GPUs i and j (LinkUnknown out of range).
func (t *Topology) Link(i, j int) Link {
	if t == nil || i < 0 || j < 0 || i >= len(t.Links) || j >= len(t.Links) {
		return Link{}
	}
	return t.Links[i][j]
}

// SetScore sums the pairwise scores of a set of GPUs: what a multi-GPU
// actor placed on that set gets. Invalid indices contribute nothing.
func (t *Topology) SetScore(indices []int) int {
	s := 0
	for a := range indices {
		for b := a + 1; b < len(indices); b++ {
			s += t.Score(indices[a], indices[b])
		}
	}
	return s
}

// String renders the matrix like `nvidia-smi topo -m`, followed by scores.
func (t *Topology) String() string {
	var b strings.Builder
	n := t.Len()
	b.WriteString("      ")
	for j := 0; j < n; j++ {
		fmt.Fprintf(&b, "%6s", fmt.Sprintf("GPU%d", j))
	}
	b.WriteString("\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%-6s", fmt.Sprintf("GPU%d", i))
		for j := 0; j < n; j++ {
			fmt.Fprintf(&b, "%6s", t.Links[i][j].String())
		}
		b.WriteString("    score")
		for j := 0; j < n; j++ {
			fmt.Fprintf(&b, "%5d", t.Scores[i][j])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// discoverTopology queries NVLinks and PCIe ancestry for every pair.
// Failed queries leave the pair's level LinkUnknown rather than failing the
// whole inventory.
func discoverTopology(lib NVML, devs []nvml.Device, busIDs []string) *Topology {
	n := len(devs)
	byBus := make(map[string]int, n)
	for i, id := range busIDs {
		if id != "" {
			byBus[id] = i
		}
	}
	direct := make([][]int, n)
	// switchLinks[i][bus] counts GPU i's links into the NVSwitch at bus.
	switchLinks := make([]map[string]int, n)
	for i, d := range devs {
		direct[i] = make([]int, n)
		switchLinks[i] = map[string]int{}
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			st, ret := call(func() (nvml.EnableState, nvml.Return) { return d.GetNvLinkState(l) })
			if ret == nvml.ERROR_NOT_SUPPORTED && l == 0 {
				break // no NVLink on this device
			}
			if ret != nvml.SUCCESS || st != nvml.FEATURE_ENABLED {
				continue
			}
			pci, ret := call(func() (nvml.PciInfo, nvml.Return) { return d.GetNvLinkRemotePciInfo(l) })
			if ret != nvml.SUCCESS {
				continue
			}
			remote := busIDOf(pci)
			kind, kret := call(func() (nvml.IntNvLinkDeviceType, nvml.Return) {
				return lib.DeviceGetNvLinkRemoteDeviceType(d, l)
			})
			j, isGPU := byBus[remote]
			switch {
			case kret == nvml.SUCCESS && kind == nvml.NVLINK_DEVICE_TYPE_SWITCH:
				switchLinks[i][remote]++
			case isGPU && j != i:
				direct[i][j]++
			case !isGPU && (kret != nvml.SUCCESS || kind != nvml.NVLINK_DEVICE_TYPE_GPU):
				// Not one of our GPUs and not known to be a GPU: on NVSwitch
				// systems the remote end of every link is a switch.
				switchLinks[i][remote]++
			}
		}
	}
	links := make([][]Link, n)
	for i := range links {
		links[i] = make([]Link, n)
	}
	for i := 0; i < n; i++ {
		links[i][i] = Link{Level: LinkSelf, PCIe: LinkSelf}
		for j := i + 1; j < n; j++ {
			di, dj := devs[i], devs[j]
			lvl, ret := call(func() (nvml.GpuTopologyLevel, nvml.Return) { return di.GetTopologyCommonAncestor(dj) })
			pcie := LinkUnknown
			if ret == nvml.SUCCESS {
				pcie = levelFromNVML(lvl)
			}
			// Each side counts the direct links it sees; take the smaller so a
			// link reported by one end only is not double counted.
			nv := min(direct[i][j], direct[j][i])
			if nv == 0 && (direct[i][j] > 0 || direct[j][i] > 0) {
				nv = max(direct[i][j], direct[j][i])
			}
			via := false
			if nv == 0 {
				for sw, a := range switchLinks[i] {
					if b := switchLinks[j][sw]; b > 0 {
						nv += min(a, b)
						via = true
					}
				}
			}
			l := Link{Level: pcie, PCIe: pcie, NVLinks: nv, ViaNVSwitch: via}
			if nv > 0 {
				l.Level = LinkNVLink
			}
			links[i][j], links[j][i] = l, l
		}
	}
	return newTopology(links)
}
