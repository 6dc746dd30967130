// Package metrics is a troupe node's Prometheus instrumentation: one
// registry per node served at /metrics, with GPU gauges (read from the GPU
// sampler at scrape time), under troupe's names and also under the NVIDIA
// DCGM exporter's names and labels so that its stock Grafana dashboards
// work; actor and node counts by state; actor calls per type and method
// with their latency (gathered from the worker processes at scrape time);
// and raft leadership, term and commit index. Other runtime packages set
// the non-GPU metrics through the Registry's setters, so they never import
// the Prometheus client themselves.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"troupe/gpu"
	"troupe/runtime/transport"
	"troupe/runtime/worker"
)

// Namespace prefixes every troupe metric.
const Namespace = "troupe"

// Registry holds a node's metrics. The zero value is not usable; call New.
// Its methods are safe for concurrent use.
type Registry struct {
	node       string
	reg        *prometheus.Registry
	actors     *prometheus.GaugeVec
	nodes      *prometheus.GaugeVec
	raftLeader prometheus.Gauge
	raftCommit prometheus.Gauge
	raftTerm   prometheus.Gauge
	// gossipRejected is the node's count of rejected gossip input
	// (SetGossipRejected), exported as a counter.
	gossipRejected atomic.Uint64
}

// ErrRegister reports a collector that could not be registered (for
// example GPUs registered twice).
var ErrRegister = errors.New("metrics: register collector")

// New returns a registry for node, with the Go runtime and process
// collectors and the actor, node and raft metrics (all labelled node).
func New(node string) *Registry {
	nl := prometheus.Labels{"node": node}
	r := &Registry{node: node, reg: prometheus.NewRegistry()}
	r.actors = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "actors", ConstLabels: nl,
		Help: "Actors of the cluster by state (PENDING, ALIVE, RESTARTING, DEAD), as this node's copy of the state shows them.",
	}, []string{"state"})
	r.nodes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "nodes", ConstLabels: nl,
		Help: "Nodes of the cluster by state (alive, suspect, draining, dead, drained), as this node's copy of the state shows them.",
	}, []string{"state"})
	r.raftLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "raft", Name: "leader", ConstLabels: nl,
		Help: "1 if this node is the raft leader, else 0.",
	})
	r.raftCommit = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "raft", Name: "commit_index", ConstLabels: nl,
		Help: "Raft commit index seen by this node.",
	})
	r.raftTerm = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "raft", Name: "term", ConstLabels: nl,
		Help: "Current raft term seen by this node.",
	})
	gossipRejected := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "gossip", Name: "rejected_total", ConstLabels: nl,
		Help: "Gossip packets and streams this node rejected: not decryptable with the cluster key, or malformed (their log lines are rate-limited).",
	}, func() float64 { return float64(r.gossipRejected.Load()) })
	r.reg.MustRegister(r.actors, r.nodes, r.raftLeader, r.raftCommit, r.raftTerm, gossipRejected,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Node is the node label value.
func (r *Registry) Node() string { return r.node }

// Prometheus returns the underlying registry, for registering more
// collectors.
func (r *Registry) Prometheus() *prometheus.Registry { return r.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg, ErrorHandling: promhttp.ContinueOnError})
}

// SetActorCount sets the number of actors in state.
func (r *Registry) SetActorCount(state string, n int) {
	r.actors.WithLabelValues(state).Set(float64(n))
}

// SetActorCounts replaces all actor counts: states missing from counts are
// dropped, so a state that emptied does not linger.
func (r *Registry) SetActorCounts(counts map[string]int) {
	r.actors.Reset()
	for s, n := range counts {
		r.SetActorCount(s, n)
	}
}

// SetNodeCounts replaces the node counts by state.
func (r *Registry) SetNodeCounts(counts map[string]int) {
	r.nodes.Reset()
	for s, n := range counts {
		r.nodes.WithLabelValues(s).Set(float64(n))
	}
}

// CallSource returns the calls served by a node's actors, cumulative per
// actor type and method (cluster.Node.WorkerStats sums them over its
// worker processes).
type CallSource func(ctx context.Context) []worker.CallStats

// callScrapeTimeout bounds how long a scrape waits for the call counts.
const callScrapeTimeout = 3 * time.Second

// RegisterCalls exports the calls src reports as troupe_actor_calls_total
// (labelled class, method and outcome ok or error) and the histogram
// troupe_actor_call_duration_seconds (class, method), read at scrape time.
func (r *Registry) RegisterCalls(src CallSource) error {
	if err := r.reg.Register(&callCollector{node: r.node, src: src}); err != nil {
		return fmt.Errorf("%w: calls of node %s: %v", ErrRegister, r.node, err)
	}
	return nil
}

var (
	descCalls = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "actor", "calls_total"),
		"Actor method calls served by this node's worker processes, by actor type, method and outcome (ok or error).",
		[]string{"node", "class", "method", "outcome"}, nil)
	descCallSeconds = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "actor", "call_duration_seconds"),
		"How long actor methods ran in this node's worker processes (argument decoding and result encoding included), by actor type and method.",
		[]string{"node", "class", "method"}, nil)
)

type callCollector struct {
	node string
	src  CallSource
}

func (c *callCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descCalls; ch <- descCallSeconds }

func (c *callCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), callScrapeTimeout)
	defer cancel()
	for _, cs := range c.src(ctx) {
		ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(cs.OK), c.node, cs.Class, cs.Method, "ok")
		ch <- prometheus.MustNewConstMetric(descCalls, prometheus.CounterValue, float64(cs.Errors), c.node, cs.Class, cs.Method, "error")
		buckets := make(map[float64]uint64, len(worker.CallBuckets))
		for i, ub := range worker.CallBuckets {
			if i < len(cs.Buckets) {
				buckets[ub] = cs.Buckets[i]
			}
		}
		h, err := prometheus.NewConstHistogram(descCallSeconds, cs.OK+cs.Errors, cs.Seconds, buckets, c.node, cs.Class, cs.Method)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descCallSeconds, err)
			continue
		}
		ch <- h
	}
}

// AuthSource returns the connections accepted and refused by the
// authenticated listeners of a node and its worker processes.
type AuthSource func(ctx context.Context) transport.AuthStats

// RegisterAuth exports what src reports as troupe_connections_accepted_total
// and troupe_connections_refused_total (labelled reason: bad_token,
// no_token, junk, tls, peer, overloaded), read at scrape time. A flood of
// unauthenticated junk shows here, not in the logs (logged at a rate
// limit).
func (r *Registry) RegisterAuth(src AuthSource) error {
	if err := r.reg.Register(&authCollector{node: r.node, src: src}); err != nil {
		return fmt.Errorf("%w: connections of node %s: %v", ErrRegister, r.node, err)
	}
	return nil
}

var (
	descAccepted = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "connections", "accepted_total"),
		"Connections to this node's and its workers' call and object ports (and HTTP requests beyond loopback) that passed authentication.",
		[]string{"node"}, nil)
	descRefused = prometheus.NewDesc(prometheus.BuildFQName(Namespace, "connections", "refused_total"),
		"Connections (and HTTP requests beyond loopback) refused by authentication, by reason: bad_token, no_token, junk (no troupe handshake), tls, peer (a local socket peer of another user), overloaded.",
		[]string{"node", "reason"}, nil)
)

type authCollector struct {
	node string
	src  AuthSource
}

func (c *authCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descAccepted; ch <- descRefused }

func (c *authCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), callScrapeTimeout)
	defer cancel()
	s := c.src(ctx)
	ch <- prometheus.MustNewConstMetric(descAccepted, prometheus.CounterValue, float64(s.Accepted), c.node)
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"bad_token", s.BadToken}, {"no_token", s.NoToken}, {"junk", s.Junk}, {"tls", s.TLS}, {"peer", s.Peer}, {"overloaded", s.Overloaded}} {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(r.n), c.node, r.reason)
	}
}

// SetGossipRejected records the node's count of rejected gossip input
// (cluster.Node.GossipRejected).
func (r *Registry) SetGossipRejected(n uint64) { r.gossipRejected.Store(n) }

// SetRaft records this node's raft view.
func (r *Registry) SetRaft(leader bool, term, commitIndex uint64) {
	v := 0.0
	if leader {
		v = 1
	}
	r.raftLeader.Set(v)
	r.raftTerm.Set(float64(term))
	r.raftCommit.Set(float64(commitIndex))
}

// GPUSource is what the GPU collector reads at scrape time; *gpu.Sampler
// implements it, so a scrape costs no NVML query.
type GPUSource interface {
	Devices() []gpu.DeviceInfo
	Latest() []gpu.Sample
}

// GPUOptions configure RegisterGPUs.
type GPUOptions struct {
	// SkipDCGM leaves out the DCGM-named copies of the gauges (for a node
	// where NVIDIA's dcgm-exporter runs too).
	SkipDCGM bool
}

// RegisterGPUs adds gauges for the GPUs of src, labelled node, gpu (index),
// uuid, actor (the holders' names joined by "+", empty if none) and
// simulated ("true"/"false"), and, unless o.SkipDCGM, the same readings
// under the DCGM exporter's names (DCGM_FI_DEV_GPU_UTIL, ..._FB_USED, ...)
// and labels (gpu, UUID, device, modelName, Hostname = the node ID,
// pci_bus_id).
func (r *Registry) RegisterGPUs(src GPUSource, o GPUOptions) error {
	c := newGPUCollector(r.node, src)
	c.dcgm = !o.SkipDCGM
	if err := r.reg.Register(c); err != nil {
		return fmt.Errorf("%w: GPUs of node %s: %v", ErrRegister, r.node, err)
	}
	return nil
}

var gpuLabels = []string{"node", "gpu", "uuid", "actor", "simulated"}

func gpuDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "gpu", name), help, append(append([]string{}, gpuLabels...), extra...), nil)
}

var (
	descSMUtil   = gpuDesc("sm_utilization_ratio", "Fraction of the last sample period in which a kernel ran (NVML utilization.gpu / 100).")
	descMemUtil  = gpuDesc("memory_utilization_ratio", "Fraction of the last sample period in which device memory was read or written.")
	descMemUsed  = gpuDesc("memory_used_bytes", "Device memory in use.")
	descMemTotal = gpuDesc("memory_total_bytes", "Device memory in total.")
	descPower    = gpuDesc("power_watts", "Power draw.")
	descPowerMax = gpuDesc("power_limit_watts", "Enforced power limit.")
	descTemp     = gpuDesc("temperature_celsius", "GPU die temperature.")
	descHolder   = gpuDesc("actor_fraction", "Share of the GPU placed for one actor (one series per holder).", "job")
	descHolderSM = gpuDesc("actor_sm_utilization_ratio", "Measured SM utilization of one actor's process on the GPU (when its PID identifies it).", "job")
	descInfo     = gpuDesc("info", "Static GPU description; always 1.", "name", "pci_bus_id")
)

// The DCGM exporter's names and labels for the same readings, so NVIDIA's
// Grafana dashboard (grafana.com 12239) works on troupe's /metrics.
// DCGM_FI_PROF_GR_ENGINE_ACTIVE, a profiling metric, is approximated by
// NVML's utilization.gpu (the share of time a kernel ran); clocks and
// tensor-pipe activity are not sampled.
var dcgmLabels = []string{"gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id", "simulated"}

func dcgmDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, dcgmLabels, nil)
}

var (
	dcgmGPUUtil     = dcgmDesc("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
	dcgmMemCopyUtil = dcgmDesc("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).")
	dcgmFBUsed      = dcgmDesc("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
	dcgmFBFree      = dcgmDesc("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
	dcgmPower       = dcgmDesc("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")
	dcgmPowerLimit  = dcgmDesc("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Current Power limit for the device (in W).")
	dcgmTemp        = dcgmDesc("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
	dcgmGREngine    = dcgmDesc("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active (0-1; approximated by NVML utilization.gpu).")
)

type gpuCollector struct {
	node string
	src  GPUSource
	dcgm bool
}

func newGPUCollector(node string, src GPUSource) *gpuCollector {
	return &gpuCollector{node: node, src: src}
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSMUtil, descMemUtil, descMemUsed, descMemTotal, descPower, descPowerMax, descTemp, descHolder, descHolderSM, descInfo} {
		ch <- d
	}
	if c.dcgm {
		for _, d := range []*prometheus.Desc{dcgmGPUUtil, dcgmMemCopyUtil, dcgmFBUsed, dcgmFBFree, dcgmPower, dcgmPowerLimit, dcgmTemp, dcgmGREngine} {
			ch <- d
		}
	}
}

// collectDCGM sends one GPU's readings under the DCGM exporter's names.
func (c *gpuCollector) collectDCGM(ch chan<- prometheus.Metric, d gpu.DeviceInfo, s gpu.Sample) {
	lv := []string{strconv.Itoa(d.Index), d.UUID, "nvidia" + strconv.Itoa(d.Index), d.Name, c.node, d.PCIBusID, strconv.FormatBool(d.Simulated || s.Simulated)}
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lv...)
	}
	const mib = 1 << 20
	if s.SMUtil != nil {
		gauge(dcgmGPUUtil, float64(*s.SMUtil))
		gauge(dcgmGREngine, float64(*s.SMUtil)/100)
	}
	if s.MemUtil != nil {
		gauge(dcgmMemCopyUtil, float64(*s.MemUtil))
	}
	total := s.MemoryTotal
	if total == nil {
		total = d.MemoryTotal
	}
	if s.MemoryUsed != nil {
		gauge(dcgmFBUsed, float64(*s.MemoryUsed/mib))
		if total != nil && *total >= *s.MemoryUsed {
			gauge(dcgmFBFree, float64((*total-*s.MemoryUsed)/mib))
		}
	}
	if s.PowerWatts != nil {
		gauge(dcgmPower, *s.PowerWatts)
	}
	if d.PowerLimitWatts != nil {
		gauge(dcgmPowerLimit, *d.PowerLimitWatts)
	}
	if s.TemperatureC != nil {
		gauge(dcgmTemp, float64(*s.TemperatureC))
	}
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	devs := c.src.Devices()
	for _, s := range c.src.Latest() {
		if s.Index < 0 || s.Index >= len(devs) {
			continue
		}
		d := devs[s.Index]
		names := make([]string, len(s.Actors))
		for i, h := range s.Actors {
			names[i] = h.Actor
		}
		lv := []string{c.node, strconv.Itoa(d.Index), d.UUID, strings.Join(names, "+"), strconv.FormatBool(d.Simulated || s.Simulated)}
		gauge := func(desc *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append(append([]string{}, lv...), extra...)...)
		}
		// A field whose query failed is left out rather than reported as 0.
		if s.SMUtil != nil {
			gauge(descSMUtil, float64(*s.SMUtil)/100)
		}
		if s.MemUtil != nil {
			gauge(descMemUtil, float64(*s.MemUtil)/100)
		}
		if s.MemoryUsed != nil {
			gauge(descMemUsed, float64(*s.MemoryUsed))
		}
		if s.MemoryTotal != nil {
			gauge(descMemTotal, float64(*s.MemoryTotal))
		} else if d.MemoryTotal != nil {
			gauge(descMemTotal, float64(*d.MemoryTotal))
		}
		if s.PowerWatts != nil {
			gauge(descPower, *s.PowerWatts)
		}
		if d.PowerLimitWatts != nil {
			gauge(descPowerMax, *d.PowerLimitWatts)
		}
		if s.TemperatureC != nil {
			gauge(descTemp, float64(*s.TemperatureC))
		}
		for _, h := range s.Actors {
			hl := append([]string{}, lv...)
			hl[3] = h.Actor // one series per holder, labelled with that holder only
			ch <- prometheus.MustNewConstMetric(descHolder, prometheus.GaugeValue, h.Fraction, append(hl, h.Job)...)
			if h.SMUtil != nil {
				ch <- prometheus.MustNewConstMetric(descHolderSM, prometheus.GaugeValue, float64(*h.SMUtil)/100, append(hl, h.Job)...)
			}
		}
		gauge(descInfo, 1, d.Name, d.PCIBusID)
		if c.dcgm {
			c.collectDCGM(ch, d, s)
		}
	}
}
