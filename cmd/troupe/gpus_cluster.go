package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"troupe/gpu"
	"troupe/runtime/cluster"
	"troupe/runtime/security"
)

// clusterGPUsOptions are the flags of `troupe gpus --address`.
type clusterGPUsOptions struct {
	addr, token, dataDir string
	once, json           bool
	interval             time.Duration
}

// runClusterGPUs shows every node's GPUs of the cluster at o.addr: one
// snapshot (--once, --json) or a live view redrawn in place at every tick.
func runClusterGPUs(ctx context.Context, env gpusEnv, o clusterGPUsOptions) error {
	tok, err := security.Token(o.token, o.dataDir)
	if err != nil {
		return err
	}
	c, err := cluster.NewClientTLS(o.addr, tok, security.FromEnv())
	if err != nil {
		return err
	}
	defer c.Close()
	fetch := func() (*cluster.ClusterGPUs, error) {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return c.ClusterGPUs(fctx, false)
	}
	if o.once || o.json {
		view, err := fetch()
		if err != nil {
			return fmt.Errorf("GPUs of the cluster at %s: %w", o.addr, err)
		}
		if o.json {
			return writeJSON(env.stdout, jsonGPUView(view))
		}
		_, err = io.WriteString(env.stdout, renderClusterGPUs(view))
		return err
	}
	ticker := env.ticker
	if ticker == nil {
		ticker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	tick, stop := ticker(o.interval)
	defer stop()
	for {
		var frame string
		view, err := fetch()
		switch {
		case err == nil:
			frame = renderClusterGPUs(view)
		case ctx.Err() != nil:
			return nil // Ctrl-C is the normal way out
		default:
			frame = fmt.Sprintf("troupe gpus — cluster at %s — %s\n\nunreachable: %v\n", o.addr,
				env.now().UTC().Format("2006-01-02 15:04:05 UTC"), err)
		}
		fmt.Fprint(env.stdout, "\x1b[H\x1b[2J"+frame+fmt.Sprintf("\nrefreshing every %v, Ctrl-C to quit\n", o.interval))
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
	}
}

// renderClusterGPUs draws the cluster view: a summary line, which nodes
// have simulated GPUs, then one table per node (GPU, utilization bar,
// memory, power, temperature and the actors holding each GPU).
func renderClusterGPUs(v *cluster.ClusterGPUs) string {
	var b strings.Builder
	gpus, busy := 0, 0
	var sims []string
	for _, n := range v.Nodes {
		gpus += len(n.Devices)
		for _, s := range n.Samples {
			if s.SMUtil != nil && *s.SMUtil > 0 {
				busy++
			}
		}
		if n.Simulated {
			p := n.Profile
			if p == "" {
				p = "simulated"
			}
			sims = append(sims, n.Node+" ("+p+")")
		}
	}
	fmt.Fprintf(&b, "troupe gpus — cluster (via %s) — %d node(s), %d GPU(s), %d busy — %s\n", v.ReportedBy, len(v.Nodes), gpus, busy,
		v.Time.UTC().Format("2006-01-02 15:04:05 UTC"))
	if len(sims) > 0 {
		fmt.Fprintf(&b, "SIMULATED GPUs on %s: not real hardware; utilization follows the actors' compute time\n", strings.Join(sims, ", "))
	}
	for _, n := range v.Nodes {
		b.WriteString("\n")
		fmt.Fprintf(&b, "NODE %s", n.Node)
		if n.Address != "" {
			fmt.Fprintf(&b, " (%s)", n.Address)
		}
		if n.Error != "" {
			fmt.Fprintf(&b, " — GPUs unavailable: %s\n", n.Error)
			continue
		}
		fmt.Fprintf(&b, " — %d GPU(s)", len(n.Devices))
		if n.Simulated {
			fmt.Fprintf(&b, ", SIMULATED %s", n.Profile)
		}
		b.WriteString("\n")
		if len(n.Devices) == 0 {
			b.WriteString("  no GPUs\n")
			continue
		}
		writeGPURows(&b, n.Devices, n.Samples)
	}
	if len(v.Nodes) == 0 {
		b.WriteString("\nNo nodes registered.\n")
	}
	return b.String()
}

// jsonGPUView gives nodes without GPUs empty lists rather than null, so
// scripts can iterate over every node's devices and samples.
func jsonGPUView(v *cluster.ClusterGPUs) *cluster.ClusterGPUs {
	out := *v
	out.Nodes = append([]cluster.NodeGPUs(nil), v.Nodes...)
	for i := range out.Nodes {
		n := &out.Nodes[i]
		if n.Devices == nil {
			n.Devices = []gpu.DeviceInfo{}
		}
		if n.Samples == nil {
			n.Samples = []gpu.Sample{}
		}
	}
	if out.Nodes == nil {
		out.Nodes = []cluster.NodeGPUs{}
	}
	return &out
}
