package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"troupe/gpu"
	"troupe/runtime/cluster"
	"troupe/runtime/dashboard"
	"troupe/runtime/metrics"
)

func init() {
	register(command{name: "dashboard", summary: "serve the web dashboard and /metrics for this machine's GPUs", run: runDashboard})
}

// web is a node's HTTP side: the dashboard at / and Prometheus at /metrics,
// over this machine's GPU sampler and, on a cluster node, the cluster's
// nodes and actors as this node's server copy sees them.
type web struct {
	local *dashboard.LocalSource
	attr  *gpu.Attribution
	reg   *metrics.Registry
	node  *cluster.Node // nil for a machine outside any cluster

	mu       sync.Mutex
	assigned map[string]bool // actors put into attr
}

// newWeb opens this machine's GPUs (simulated when simulate names a
// profile) and starts sampling them until ctx ends.
func newWeb(ctx context.Context, name, simulate string, node *cluster.Node) (*web, error) {
	inv, err := gpu.Open(gpu.Options{Simulate: simulate})
	if err != nil {
		return nil, err
	}
	attr := gpu.NewAttribution()
	s := gpu.NewSampler(inv, gpu.SamplerConfig{Attribution: attr})
	s.SampleOnce()
	go func() {
		s.Run(ctx)
		inv.Close()
	}()
	w := &web{local: dashboard.NewLocalSource(inv, s, attr), attr: attr, reg: metrics.New(name), node: node, assigned: map[string]bool{}}
	w.local.Node = name
	if err := w.reg.RegisterGPUs(s); err != nil {
		return nil, err
	}
	if node != nil { // keep metrics and attribution fresh between page polls
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				w.refresh()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return w, nil
}

// State implements dashboard.StateSource.
func (w *web) State(ctx context.Context) (dashboard.State, error) {
	st, err := w.local.State(ctx)
	if err != nil || w.node == nil {
		return st, err
	}
	cs := w.node.Status()
	if len(cs.Nodes) == 0 { // a worker keeps no state copy: show itself
		return st, nil
	}
	st.Nodes = st.Nodes[:0]
	for _, n := range cs.Nodes {
		st.Nodes = append(st.Nodes, dashboard.Node{Name: n.ID, Address: n.Address, Leader: n.ID == cs.Leader,
			Alive: n.State == "alive", CPUs: int(n.Total.CPUs()), GPUs: len(n.GPUs), SimulatedGPUs: simulatedLabel(n.Labels)})
	}
	st.Actors = st.Actors[:0]
	for _, a := range cs.Actors {
		name := a.Name
		if name == "" {
			name = a.ID
		}
		st.Actors = append(st.Actors, dashboard.Actor{Name: name, Type: a.Class, Node: a.Node, State: a.State, GPUs: a.GPUs})
	}
	return st, nil
}

// refresh brings the metrics and this node's GPU attribution up to date
// with the committed state.
func (w *web) refresh() {
	cs := w.node.Status()
	w.reg.SetActorCounts(cs.ActorsByState)
	w.reg.SetRaft(cs.Leader == w.node.ID(), cs.Term, cs.AppliedIndex)
	w.mu.Lock()
	defer w.mu.Unlock()
	live := map[string]bool{}
	for _, a := range cs.Actors {
		if a.Node != w.node.ID() || a.State != "ALIVE" || len(a.GPUs) == 0 {
			continue
		}
		name := a.Name
		if name == "" {
			name = a.ID
		}
		live[name] = true
		if w.assigned[name] {
			continue
		}
		frac := a.Resources.GPUs
		if frac > 1 {
			frac = 1
		}
		for _, g := range a.GPUs {
			w.attr.Assign(g, gpu.Holder{Actor: name, Fraction: frac})
		}
		w.assigned[name] = true
	}
	for name := range w.assigned {
		if !live[name] {
			w.attr.Release(name)
			delete(w.assigned, name)
		}
	}
}

// handler serves the dashboard at / and metrics at /metrics.
func (w *web) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", w.reg.Handler())
	mux.Handle("/", dashboard.New(w, dashboard.Options{}))
	return mux
}

// serve listens on addr and serves until ctx ends.
func (w *web) serve(ctx context.Context, addr string, log *slog.Logger) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("dashboard: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: w.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("dashboard server stopped", "err", err)
		}
	}()
	return l.Addr().String(), nil
}

func runDashboard(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8265", "HTTP address to serve the dashboard (/) and Prometheus metrics (/metrics) on")
	simGPUs := fs.String("simulate-gpus", os.Getenv("TROUPE_SIMULATE_GPUS"), "simulated GPUs: a count or a profile ("+strings.Join(gpu.Profiles(), ", ")+"); default TROUPE_SIMULATE_GPUS")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: troupe dashboard [flags]\n\nServes the web dashboard and Prometheus metrics for this machine's GPUs until\ninterrupted. A cluster node serves the same pages for the cluster with\n'troupe start --http ADDR'.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return errUsage
	}
	host, _ := os.Hostname()
	w, err := newWeb(ctx, host, *simGPUs, nil)
	if err != nil {
		return err
	}
	addr, err := w.serve(ctx, *listen, slog.Default())
	if err != nil {
		return err
	}
	fmt.Printf("dashboard: http://%s/  metrics: http://%s/metrics  (Ctrl-C to stop)\n", addr, addr)
	<-ctx.Done()
	return nil
}

// simulatedLabel names a node's simulated GPUs for the dashboard ("" for
// real ones), from the label troupe start sets.
func simulatedLabel(labels map[string]string) string {
	if labels["troupe.gpus"] == "simulated" {
		return "simulated"
	}
	return ""
}
