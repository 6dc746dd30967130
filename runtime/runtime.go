package runtime

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"troupe/actors"
	"troupe/runtime/worker"

	"troupe/runtime/cluster"

	"troupe/runtime/wire"
)

// Runtime is a connection to a cluster: the embedded local one or, with an
// address, a remote one. It is the actors.Runtime that Spawn and GetActor
// take.
type Runtime interface {
	actors.Runtime
	// Status reports the cluster's nodes and actors.
	Status(ctx context.Context) (Status, error)
	// Shutdown ends the connection; for the embedded cluster it kills every
	// actor and frees its resources.
	Shutdown(ctx context.Context) error
}

// Status is a snapshot of a cluster for people and scripts.
type Status struct {
	Nodes  []NodeStatus  `json:"nodes"`
	Actors []ActorStatus `json:"actors"`
}

// NodeStatus describes one node.
type NodeStatus struct {
	ID        string             `json:"id"`
	Address   string             `json:"address,omitempty"`
	Role      string             `json:"role"`  // "head", "server", "worker", "embedded"
	State     string             `json:"state"` // "alive", "suspect", "draining", "dead" (lost) or "drained" (left after troupe stop)
	Total     actors.ResourceSet `json:"total"`
	Used      actors.ResourceSet `json:"used"`
	GPUs      []GPUStatus        `json:"gpus,omitempty"`
	Simulated bool               `json:"simulated_gpus,omitempty"`
	Labels    map[string]string  `json:"labels,omitempty"`
}

// GPUStatus is one GPU of a node and how much of it is held.
type GPUStatus struct {
	Index int     `json:"index"`
	Used  float64 `json:"used"` // fraction held by actors, 0..1
}

// ActorStatus describes one actor.
type ActorStatus struct {
	ID        string             `json:"id"`
	Name      string             `json:"name,omitempty"`
	Type      string             `json:"type"`
	State     string             `json:"state"` // PENDING, ALIVE, DEAD
	Node      string             `json:"node,omitempty"`
	GPUs      []int              `json:"gpus,omitempty"`
	Resources actors.ResourceSet `json:"resources"`
	Restarts  int                `json:"restarts"`
	Death     string             `json:"death,omitempty"`
}

// Option configures Init.
type Option func(*config)

type config struct {
	address      string
	token        string // cluster token (TROUPE_TOKEN)
	jobID        string // the submitted job this driver runs as (TROUPE_JOB_ID)
	simulateGPUs string
	cpus         float64
	memoryBytes  int64
	customRes    map[string]float64
	overrideCPUs bool
	overrideMem  bool
}

// Address connects to the cluster at addr ("host:port") instead of starting
// an embedded one. TROUPE_ADDRESS sets it too.
func Address(addr string) Option { return func(c *config) { c.address = addr } }

// Token is the cluster token a driver presents (with Address).
// TROUPE_TOKEN sets it too.
func Token(tok string) Option { return func(c *config) { c.token = tok } }

// SimulateGPUs gives the embedded cluster simulated GPUs: a count such as
// "4" or a profile name. TROUPE_SIMULATE_GPUS sets it too.
func SimulateGPUs(profile string) Option { return func(c *config) { c.simulateGPUs = profile } }

// NodeCPUs overrides the embedded node's CPU count (default: the machine's).
func NodeCPUs(n float64) Option { return func(c *config) { c.cpus, c.overrideCPUs = n, true } }

// NodeMemory overrides the embedded node's memory (default: the machine's).
func NodeMemory(bytes int64) Option {
	return func(c *config) { c.memoryBytes, c.overrideMem = bytes, true }
}

// NodeResources adds custom resources to the embedded node, e.g. {"tpu": 2}.
func NodeResources(m map[string]float64) Option {
	return func(c *config) {
		if c.customRes == nil {
			c.customRes = map[string]float64{}
		}
		for k, v := range m {
			c.customRes[k] = v
		}
	}
}

// Init connects the program to a cluster. With no address (no Address
// option and no TROUPE_ADDRESS) it starts the embedded local cluster: one
// node in this process with the machine's CPUs and memory and its GPUs, or
// simulated GPUs when TROUPE_SIMULATE_GPUS names a count or profile.
//
// In a worker process (started by a node with TROUPE_WORKER set) Init does
// not return: it serves the registered actor types to the cluster until the
// node tells it to exit, then exits the process, so main's driver code
// never runs in a worker. Register actor types before calling Init.
func Init(ctx context.Context, opts ...Option) (Runtime, error) {
	// The environment is read here, at the edge, and passed down.
	if d, err := wire.ParseSpin(os.Getenv(wire.SpinEnv)); err != nil {
		fmt.Fprintf(os.Stderr, "troupe: %v; using the default %v\n", err, wire.DefaultSpin)
	} else {
		wire.SetSpin(d)
	}
	if env, ok := os.LookupEnv(worker.EnvVar); ok {
		if err := worker.ServeProcess(ctx, env, os.Getenv(worker.HostEnvVar)); err != nil {
			fmt.Fprintf(os.Stderr, "troupe worker: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	cfg := config{address: os.Getenv("TROUPE_ADDRESS"), token: os.Getenv("TROUPE_TOKEN"), jobID: os.Getenv(cluster.EnvJobID),
		simulateGPUs: os.Getenv("TROUPE_SIMULATE_GPUS")}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.address != "" {
		return newRemote(ctx, cfg)
	}
	return newLocal(cfg)
}

// ErrNoClusterSupport: this build cannot join a remote cluster yet.
var ErrNoClusterSupport = fmt.Errorf("multi-node clusters are not available in this build")

// machineMemory reads MemTotal from /proc/meminfo; 0 when unknown.
func machineMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
