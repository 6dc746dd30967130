package main

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"troupe/gpu"
	"troupe/gpu/busy"
)

// gpuAgent samples this machine's GPUs for the node's GPU service, the
// dashboard and /metrics. With simulated GPUs it also feeds them the busy
// time the actors' compute backends report (in this process, and from the
// ledgers of the node's worker processes), so their utilization follows
// the work.
type gpuAgent struct {
	inv     *gpu.Inventory
	sampler *gpu.Sampler
	attr    *gpu.Attribution
}

// gpuAgentOptions configure startGPUAgent.
type gpuAgentOptions struct {
	// Node is the node ID busy records are matched against.
	Node string
	// Simulate names a simulated profile or count ("" for real GPUs).
	Simulate string
	// Interval is the sampling interval (default 1 s).
	Interval time.Duration
	// Ledgers makes worker processes' busy time count (a node daemon);
	// off for a process that starts no workers (tests, troupe dashboard).
	Ledgers bool
	Log     *slog.Logger
}

// startGPUAgent opens the GPUs and samples them until ctx ends.
func startGPUAgent(ctx context.Context, o gpuAgentOptions) (*gpuAgent, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	inv, err := gpu.Open(gpu.Options{Simulate: o.Simulate})
	if err != nil {
		return nil, err
	}
	a := &gpuAgent{inv: inv, attr: gpu.NewAttribution()}
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
