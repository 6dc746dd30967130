// Package gpuagent is a node's GPU side: it finds the GPUs a node offers
// the scheduler (NodeGPUs) and samples them while the node runs (Start)
// for the node's GPU service, the dashboard and /metrics. With simulated
// GPUs it also feeds them the busy time that the actors' compute backends
// report, in this process and in the ledgers of the node's worker
// processes, so their utilization follows the work.
package gpuagent

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"troupe/gpu"
	"troupe/gpu/busy"
)

// Agent samples this machine's GPUs until the context given to Start ends.
type Agent struct {
	inv     *gpu.Inventory
	sampler *gpu.Sampler
	attr    *gpu.Attribution
}

// Options configure Start.
type Options struct {
	// Node is the node ID busy records are matched against.
	Node string
	// Simulate names a simulated profile or count ("" for real GPUs).
	Simulate string
	// Interval is the sampling interval (default 1 s).
	Interval time.Duration
	// Ledgers makes worker processes' busy time count (a node daemon); off
	// for a process that starts no workers (tests, troupe dashboard).
	Ledgers bool
	Log     *slog.Logger
}

// Start opens the GPUs, takes a first sample, and samples them until ctx
// ends, when it closes them.
func Start(ctx context.Context, o Options) (*Agent, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	inv, err := gpu.Open(gpu.Options{Simulate: o.Simulate})
	if err != nil {
		return nil, err
	}
	a := &Agent{inv: inv, attr: gpu.NewAttribution()}
	cfg := gpu.SamplerConfig{Interval: o.Interval, Attribution: a.attr}
	var feed *gpu.BusyFeed
	if sim := inv.Simulation(); sim != nil {
		fo := gpu.BusyFeedOptions{Node: o.Node, Meter: busy.ProcessMeter()}
		if o.Ledgers {
			fo.LedgerDir = busy.LedgerDir(os.Getpid())
		}
		if feed, err = gpu.NewBusyFeed(sim, fo); err != nil {
			inv.Close()
			return nil, err
		}
		var warnOnce sync.Once
		cfg.BeforeSample = func() {
			if err := feed.Pull(); err != nil {
				warnOnce.Do(func() { o.Log.Warn("simulated GPUs: busy time", "err", err) })
			}
		}
	}
	a.sampler = gpu.NewSampler(inv, cfg)
	a.sampler.SampleOnce()
	go func() {
		a.sampler.Run(ctx)
		if feed != nil {
			feed.Close()
		}
		inv.Close()
	}()
	return a, nil
}

// Inventory is the GPUs sampled.
func (a *Agent) Inventory() *gpu.Inventory { return a.inv }

// Sampler is the sampler, for the node's GPU service (cluster.Node.ServeGPUs)
// and /metrics.
func (a *Agent) Sampler() *gpu.Sampler { return a.sampler }

// Attribution says which actors hold each GPU; the samples carry it.
func (a *Agent) Attribution() *gpu.Attribution { return a.attr }

// Profile names the simulated profile ("" for real GPUs).
func (a *Agent) Profile() string { return a.inv.Profile() }
