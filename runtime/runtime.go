package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"

	"troupe/actors"
	"troupe/runtime/api"
	"troupe/runtime/client"
	rcollective "troupe/runtime/collective"
	"troupe/runtime/driver"
	"troupe/runtime/local"
	"troupe/runtime/objstore"
	"troupe/runtime/security"
	"troupe/runtime/wire"
	"troupe/runtime/worker"
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

// Status is a snapshot of a cluster for people and scripts (the same type
// as api.Status, which the embedded cluster and the driver return).
type Status = api.Status

// NodeStatus describes one node.
type NodeStatus = api.NodeStatus

// GPUStatus is one GPU of a node and how much of it is held.
type GPUStatus = api.GPUStatus

// ActorStatus describes one actor.
type ActorStatus = api.ActorStatus

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
	tls          security.TLS // TROUPE_INSECURE, TROUPE_CA_HASH, TROUPE_TLS_CA (tls.go)
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
// In a worker process (started by a node with TROUPE_WORKER set) Init
// serves the registered actor types to the cluster until the node tells
// the worker to exit, then returns ErrWorkerDone (or the error that ended
// serving), so main must return without running its driver code:
//
//	rt, err := runtime.Init(ctx)
//	if errors.Is(err, runtime.ErrWorkerDone) {
//		return // this process was a worker
//	}
//
// A main that treats every error alike (prints it, exits 1) still never
// runs driver code in a worker; the node only records the exit status.
// Register actor types before calling Init.
func Init(ctx context.Context, opts ...Option) (Runtime, error) {
	// The environment is read here, at the edge, and passed down.
	spin, err := wire.ParseSpin(os.Getenv(wire.SpinEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "troupe: %v; using the default %v\n", err, wire.DefaultSpin)
	}
	// "0" turns off the Unix-socket shortcut between processes of a host.
	noWireUnix, noObjectsUnix := os.Getenv(wire.UnixEnv) == "0", os.Getenv(objstore.LocalEnv) == "0"
	if env, ok := os.LookupEnv(worker.EnvVar); ok {
		wo := worker.Options{Spin: spin, NoObjectsUnix: noObjectsUnix, NoCollectiveUnix: os.Getenv(rcollective.UnixEnv) == "0"}
		if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
			wo.HeapFloor = -1 // the user tunes the collector
		}
		if err := worker.ServeProcess(ctx, env, os.Getenv(worker.HostEnvVar), wo); err != nil {
			return nil, fmt.Errorf("troupe worker: %w", err)
		}
		return nil, ErrWorkerDone
	}
	cfg := config{address: os.Getenv("TROUPE_ADDRESS"), token: os.Getenv(security.EnvToken), jobID: os.Getenv(client.EnvJobID),
		simulateGPUs: os.Getenv("TROUPE_SIMULATE_GPUS"), tls: security.FromEnv()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.address != "" {
		d, err := driver.Connect(ctx, driver.Config{Address: cfg.address, Token: cfg.token, JobID: cfg.jobID, TLS: cfg.tls,
			Spin: spin, NoWireUnix: noWireUnix, NoObjectsUnix: noObjectsUnix})
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	l, err := local.New(local.Config{SimulateGPUs: cfg.simulateGPUs, CPUs: cfg.cpus, OverrideCPUs: cfg.overrideCPUs,
		MemoryBytes: cfg.memoryBytes, OverrideMemory: cfg.overrideMem, Custom: cfg.customRes})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// ErrShutdown: the runtime was shut down. After Shutdown, spawns, lookups
// and calls fail with an error wrapping it, on either side of a process
// boundary.
var ErrShutdown = api.ErrShutdown

// The embedded cluster and the driver are what Init returns.
var (
	_ Runtime      = (*local.Cluster)(nil)
	_ groupBackend = (*local.Cluster)(nil)
	_ Runtime      = (*driver.Driver)(nil)
	_ groupBackend = (*driver.Driver)(nil)
)

// ErrWorkerDone is what Init returns in a worker process once the node has
// told the worker to exit: the process served its actors and must not run
// the driver code after Init (return from main).
var ErrWorkerDone = errors.New("runtime: this process served as a worker and is done")

// ErrNoClusterSupport: this build cannot join a remote cluster yet.
var ErrNoClusterSupport = fmt.Errorf("multi-node clusters are not available in this build")
