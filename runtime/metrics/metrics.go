// Package metrics is a troupe node's Prometheus instrumentation: one
// registry per node served at /metrics, with GPU gauges (read from the GPU
// sampler at scrape time), actor counts by state, actor call rates and
// latencies, and raft leadership and commit index. Other runtime packages
// set the non-GPU metrics through the Registry's setters, so they never
// import the Prometheus client themselves.
package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"troupe/gpu"
)

// Namespace prefixes every troupe metric.
const Namespace = "troupe"

// Registry holds a node's metrics. The zero value is not usable; call New.
// Its methods are safe for concurrent use.
type Registry struct {
	node        string
	reg         *prometheus.Registry
	actors      *prometheus.GaugeVec
	calls       *prometheus.CounterVec
	callLatency *prometheus.HistogramVec
	raftLeader  prometheus.Gauge
	raftCommit  prometheus.Gauge
	raftTerm    prometheus.Gauge
}

// ErrRegister reports a collector that could not be registered (for
// example GPUs registered twice).
var ErrRegister = errors.New("metrics: register collector")

// New returns a registry for node, with the Go runtime and process
// collectors and the actor, call and raft metrics (all labelled node).
func New(node string) *Registry {
	nl := prometheus.Labels{"node": node}
	r := &Registry{node: node, reg: prometheus.NewRegistry()}
	r.actors = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "actors", ConstLabels: nl,
		Help: "Actors on this node by state (pending, alive, restarting, dead).",
	}, []string{"state"})
	r.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "actor_calls_total", ConstLabels: nl,
		Help: "Actor method calls served, by method and outcome (ok or error).",
	}, []string{"method", "outcome"})
	r.callLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "actor_call_duration_seconds", ConstLabels: nl,
		Help: "Latency of actor method calls, by method.",
		// 50 µs .. ~100 s: actor calls range from in-process pings to
		// training steps.
		Buckets: prometheus.ExponentialBuckets(50e-6, 4, 11),
	}, []string{"method"})
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
	r.reg.MustRegister(r.actors, r.calls, r.callLatency, r.raftLeader, r.raftCommit, r.raftTerm,
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

// ObserveCall records one actor call of method that took d; err decides
// the outcome label.
func (r *Registry) ObserveCall(method string, d time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	r.calls.WithLabelValues(method, outcome).Inc()
	r.callLatency.WithLabelValues(method).Observe(d.Seconds())
}

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

// RegisterGPUs adds gauges for the GPUs of src, labelled node, gpu (index),
// uuid, actor (the holders' names joined by "+", empty if none) and
// simulated ("true"/"false").
func (r *Registry) RegisterGPUs(src GPUSource) error {
	if err := r.reg.Register(newGPUCollector(r.node, src)); err != nil {
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

type gpuCollector struct {
	node string
	src  GPUSource
}

func newGPUCollector(node string, src GPUSource) *gpuCollector {
	return &gpuCollector{node: node, src: src}
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSMUtil, descMemUtil, descMemUsed, descMemTotal, descPower, descPowerMax, descTemp, descHolder, descHolderSM, descInfo} {
		ch <- d
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
	}
}
