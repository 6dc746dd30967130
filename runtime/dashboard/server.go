package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"troupe/gpu"
	"troupe/runtime/cluster"
	"troupe/runtime/gpuagent"
	"troupe/runtime/metrics"
	"troupe/runtime/transport"
	"troupe/runtime/worker"
)

// Server is a machine's or a cluster node's HTTP side: the dashboard at /
// and Prometheus metrics at /metrics, over the machine's GPU agent and, on
// a node, the cluster's nodes, actors and every node's GPUs (gathered
// through the GPU service). It is the StateSource of its page.
type Server struct {
	local *LocalSource
	attr  *gpu.Attribution
	reg   *metrics.Registry
	node  *cluster.Node // nil for a machine outside any cluster
	run   string        // ServerOptions.RunDir

	mu       sync.Mutex
	assigned map[string]bool // "actor@gpu" put into attr
	// The cluster's GPU history, merged from the points each poll brings
	// (only those newer than since[node] are shipped).
	hist  map[string][]Point // "node/index" → points, oldest first
	since map[string]int64   // node → newest point held (Unix ms)
}

// maxHistory bounds the points kept per GPU (5 minutes at 1 s).
const maxHistory = 300

// ServerOptions configure NewServer.
type ServerOptions struct {
	// NoDCGM leaves the DCGM-named GPU gauges out of /metrics (where
	// NVIDIA's dcgm-exporter runs too).
	NoDCGM bool
	// RunDir is a training run whose timeline the page shows
	// (Options.RunDir).
	RunDir string
}

// NewServer serves the GPUs that agent samples, named name, and, with a
// node (nil outside a cluster), the cluster. With a node it keeps the
// metrics and the GPU attribution fresh until ctx ends.
func NewServer(ctx context.Context, name string, agent *gpuagent.Agent, node *cluster.Node, o ServerOptions) (*Server, error) {
	w := &Server{local: NewLocalSource(agent.Inventory(), agent.Sampler(), agent.Attribution()), attr: agent.Attribution(), reg: metrics.New(name), node: node,
		assigned: map[string]bool{}, hist: map[string][]Point{}, since: map[string]int64{}}
	w.local.Node = name
	w.run = o.RunDir
	if err := w.reg.RegisterGPUs(agent.Sampler(), metrics.GPUOptions{SkipDCGM: o.NoDCGM}); err != nil {
		return nil, err
	}
	// Refused connections: this process's (the dashboard beyond loopback)
	// and, on a node, its workers' call and object ports. The workers'
	// counts go with them when they exit.
	err := w.reg.RegisterAuth(func(ctx context.Context) transport.AuthStats {
		s := transport.ProcessAuthStats()
		if node != nil {
			reports, _, _ := node.WorkerStats(ctx)
			for _, r := range reports {
				if r.Stats != nil && r.Stats.Auth != nil {
					s = s.Add(*r.Stats.Auth)
				}
			}
		}
		return s
	})
	if err != nil {
		return nil, err
	}
	if node != nil {
		err := w.reg.RegisterCalls(func(ctx context.Context) []worker.CallStats {
			_, calls, _ := node.WorkerStats(ctx)
			return calls
		})
		if err != nil {
			return nil, err
		}
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

// State implements StateSource.
func (w *Server) State(ctx context.Context) (State, error) {
	st, err := w.local.State(ctx)
	if err != nil || w.node == nil {
		return st, err
	}
	profiles := map[string]string{}
	if gpus, err := w.clusterGPUs(ctx); err == nil {
		st.GPUs, profiles = gpus.GPUs, gpus.profiles
	} else {
		slog.Debug("dashboard: cluster GPUs unavailable, showing this node's", "err", err)
	}
	cs := w.node.Status()
	if len(cs.Nodes) == 0 { // a worker keeps no state copy: show itself
		return st, nil
	}
	st.Nodes = st.Nodes[:0]
	for _, n := range cs.Nodes {
		sim := profiles[n.ID]
		if sim == "" {
			sim = simulatedLabel(n.Labels)
		}
		st.Nodes = append(st.Nodes, Node{Name: n.ID, Address: n.Address, Leader: n.ID == cs.Leader,
			Alive: n.State == "alive", CPUs: int(n.Total.CPUs()), GPUs: len(n.GPUs), SimulatedGPUs: sim})
	}
	jobs := map[string]string{} // actor → job, as the GPU attribution knows it
	for _, g := range st.GPUs {
		for _, h := range g.Actors {
			jobs[g.Node+"/"+h.Actor] = h.Job
		}
	}
	st.Actors = st.Actors[:0]
	for _, a := range cs.Actors {
		name := a.Name
		if name == "" {
			name = a.ID
		}
		st.Actors = append(st.Actors, Actor{Name: name, Type: a.Class, Job: jobs[a.Node+"/"+name], Node: a.Node, State: a.State, GPUs: a.GPUs})
	}
	return st, nil
}

// clusterView is every node's GPUs.
type clusterView struct {
	GPUs     []GPU
	profiles map[string]string // node → simulated profile
}

// clusterGPUs gathers every node's GPUs through the GPU service and merges
// the new history points into the ones held.
func (w *Server) clusterGPUs(ctx context.Context) (clusterView, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	since := make(map[string]int64, len(w.since))
	for k, v := range w.since {
		since[k] = v
	}
	view, err := w.node.GPUs(ctx, &cluster.ClusterGPUsRequest{History: true, HistorySince: since})
	if err != nil {
		return clusterView{}, err
	}
	out := clusterView{GPUs: []GPU{}, profiles: map[string]string{}}
	seen := map[string]bool{}
	for _, n := range view.Nodes {
		if n.Error != "" {
			continue
		}
		if n.Simulated {
			out.profiles[n.Node] = n.Profile
		}
		newest := w.since[n.Node]
		for i, d := range n.Devices {
			key := fmt.Sprintf("%s/%d", n.Node, d.Index)
			seen[key] = true
			h := w.hist[key]
			if i < len(n.History) {
				for _, p := range n.History[i] {
					if len(h) > 0 && p.T <= h[len(h)-1].T {
						continue
					}
					h = append(h, Point{T: p.T, SM: p.SM, Mem: p.Mem})
					newest = max(newest, p.T)
				}
			}
			if len(h) > maxHistory {
				h = append([]Point(nil), h[len(h)-maxHistory:]...)
			}
			w.hist[key] = h
			g := GPU{Node: n.Node, Index: d.Index, UUID: d.UUID, Name: d.Name, Simulated: d.Simulated,
				MemoryTotal: d.MemoryTotal, PowerLimitWatts: d.PowerLimitWatts, Actors: []gpu.Holder{},
				History: append([]Point(nil), h...)}
			if i < len(n.Samples) {
				s := n.Samples[i]
				g.SMUtil, g.MemUtil, g.MemoryUsed = s.SMUtil, s.MemUtil, s.MemoryUsed
				g.PowerWatts, g.TemperatureC = s.PowerWatts, s.TemperatureC
				if s.MemoryTotal != nil {
					g.MemoryTotal = s.MemoryTotal
				}
				if s.Actors != nil {
					g.Actors = s.Actors
				}
			}
			out.GPUs = append(out.GPUs, g)
		}
		w.since[n.Node] = newest
	}
	for key := range w.hist { // GPUs of nodes gone (or unreachable) drop out
		if !seen[key] {
			delete(w.hist, key)
		}
	}
	for node := range w.since { // their history is gone: ask for all of it again
		if !nodeListed(view, node) {
			delete(w.since, node)
		}
	}
	return out, nil
}

func nodeListed(v *cluster.ClusterGPUs, node string) bool {
	for _, n := range v.Nodes {
		if n.Node == node && n.Error == "" {
			return true
		}
	}
	return false
}

// refresh brings the metrics and this node's GPU attribution up to date
// with the committed state.
func (w *Server) refresh() {
	cs := w.node.Status()
	w.reg.SetActorCounts(cs.ActorsByState)
	nodes := map[string]int{}
	for _, n := range cs.Nodes {
		nodes[n.State]++
	}
	w.reg.SetNodeCounts(nodes)
	w.reg.SetRaft(cs.Leader == w.node.ID(), cs.Term, cs.AppliedIndex)
	w.reg.SetGossipRejected(w.node.GossipRejected())
	// This node's placements per GPU, as the GPU service attributes them
	// (a worker, holding no state, learns them through a server).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	view, err := w.node.GPUs(ctx, &cluster.ClusterGPUsRequest{Nodes: []string{w.node.ID()}})
	cancel()
	if err != nil || len(view.Nodes) != 1 || view.Nodes[0].Error != "" {
		return // keep the attribution until the next try
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	live := map[string]bool{} // "actor@gpu"
	for _, s := range view.Nodes[0].Samples {
		for _, h := range s.Actors {
			k := h.Actor + "@" + strconv.Itoa(s.Index)
			live[k] = true
			if !w.assigned[k] {
				w.attr.Assign(s.Index, gpu.Holder{Actor: h.Actor, Job: h.Job, Fraction: h.Fraction, PID: h.PID})
				w.assigned[k] = true
			}
		}
	}
	for k := range w.assigned {
		if live[k] {
			continue
		}
		// Gone from a GPU: release the actor everywhere; what is still
		// live is assigned again on the next refresh.
		actor := k[:strings.LastIndex(k, "@")]
		w.attr.Release(actor)
		for k2 := range w.assigned {
			if strings.HasPrefix(k2, actor+"@") {
				delete(w.assigned, k2)
			}
		}
	}
}

// Handler serves the dashboard at / and metrics at /metrics.
func (w *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", w.reg.Handler())
	mux.Handle("/", New(w, Options{RunDir: w.run}))
	return mux
}

// Serve listens on addr and serves Handler until ctx ends; it returns the
// address listened on. Bound beyond loopback, it requires auth (the token
// or basic auth) on every page, /metrics included, and refuses to start
// without one (transport.ErrOpenHTTP).
func (w *Server) Serve(ctx context.Context, addr string, auth transport.HTTPAuth, log *slog.Logger) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("dashboard: listen %s: %w", addr, err)
	}
	h, err := auth.Guard(w.Handler(), l.Addr())
	if err != nil {
		l.Close()
		return "", fmt.Errorf("dashboard: %w (pass --token, or --basic-auth USER:PASSWORD)", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
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

// simulatedLabel names a node's simulated GPUs for the dashboard ("" for
// real ones), from its labels.
func simulatedLabel(labels map[string]string) string {
	if gpuagent.IsSimulated(labels) {
		return "simulated"
	}
	return ""
}
