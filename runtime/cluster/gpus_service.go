package cluster

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/gpu"
	"troupe/runtime/transport"
	"troupe/scheduler"
)

// The GPU service shows every node's GPUs. Each node samples its own GPUs
// (a gpu.Sampler the daemon attaches with ServeGPUs) and keeps the history
// in memory; nothing is shipped while nobody looks. A view is pulled on
// demand: the node a client contacts (a server, or a worker forwarding to
// one) reads the committed placements, fans one Node call out to every
// registered node that is not dead, in parallel with a per-node timeout,
// and merges the answers. The placements give the attribution (which
// actor of which job holds which GPU, and its fraction); each node adds the
// measured share from its per-process utilization (the actor's worker
// process). A node that does not answer is listed with the error instead
// of its GPUs, so one slow node never blanks the view.

// GPUServiceName is the gRPC service name of the GPU views.
const GPUServiceName = "troupe.GPUs"

// gpuNodeTimeout bounds one node's answer in a cluster view.
const gpuNodeTimeout = 2 * time.Second

// GPUSource is what a node serves its GPU view from; *gpu.Sampler
// implements it.
type GPUSource interface {
	Devices() []gpu.DeviceInfo
	Latest() []gpu.Sample
	History(index int) []gpu.Sample
	Interval() time.Duration
}

// GPUPoint is one history sample: Unix milliseconds and the SM and memory
// utilization percentages (nil when the query failed).
type GPUPoint struct {
	T   int64   `msgpack:"t" json:"t"`
	SM  *uint32 `msgpack:"sm" json:"sm"`
	Mem *uint32 `msgpack:"mem" json:"mem"`
}

// NodeGPUs is one node's GPUs.
type NodeGPUs struct {
	Node    string `msgpack:"node" json:"node"`
	Address string `msgpack:"addr,omitempty" json:"address,omitempty"`
	// Profile names the simulated profile ("" for real GPUs).
	Profile string `msgpack:"profile,omitempty" json:"profile,omitempty"`
	// Simulated marks a node whose GPUs are simulated.
	Simulated bool `msgpack:"sim" json:"simulated"`
	// IntervalMillis is the node's sampling interval.
	IntervalMillis int64            `msgpack:"interval,omitempty" json:"interval_ms,omitempty"`
	Devices        []gpu.DeviceInfo `msgpack:"devices" json:"devices"`
	// Samples are the latest samples, one per device in Devices' order,
	// with Actors attributed from the committed placements.
	Samples []gpu.Sample `msgpack:"samples" json:"samples"`
	// History, when asked for, holds per device the points newer than
	// the request's HistorySince for this node, oldest first.
	History [][]GPUPoint `msgpack:"history,omitempty" json:"history,omitempty"`
	// Error says why the node's GPUs are missing (unreachable, no GPU
	// sampler running there).
	Error string `msgpack:"err,omitempty" json:"error,omitempty"`
}

// ClusterGPUs is every node's GPUs, sorted by node ID.
type ClusterGPUs struct {
	// ReportedBy is the server that gathered the view.
	ReportedBy string     `msgpack:"by" json:"reported_by"`
	Time       time.Time  `msgpack:"time" json:"time"`
	Nodes      []NodeGPUs `msgpack:"nodes" json:"nodes"`
}

// ClusterGPUsRequest asks for every node's GPUs.
type ClusterGPUsRequest struct {
	// History asks for the sample history too.
	History bool `msgpack:"history,omitempty"`
	// HistorySince, per node ID, limits the history to points newer than
	// that Unix millisecond time (a poller passes the newest it has).
	HistorySince map[string]int64 `msgpack:"since,omitempty"`
	// Nodes, if set, limits the view to these node IDs.
	Nodes []string `msgpack:"nodes,omitempty"`
	Hops  int      `msgpack:"hops,omitempty"`
}

// NodeGPUsRequest asks one node for its GPUs.
type NodeGPUsRequest struct {
	History      bool  `msgpack:"history,omitempty"`
	HistorySince int64 `msgpack:"since,omitempty"`
	// Holders are the committed placements on the node per GPU index; nil
	// keeps the node's own attribution.
	Holders map[int][]gpu.Holder `msgpack:"holders,omitempty"`
}

// gpuServer is what the GPU service's handlers call.
type gpuServer interface {
	node(ctx context.Context, r *NodeGPUsRequest) (*NodeGPUs, error)
	cluster(ctx context.Context, r *ClusterGPUsRequest) (*ClusterGPUs, error)
}

var gpuDesc = grpc.ServiceDesc{
	ServiceName: GPUServiceName,
	HandlerType: (*gpuServer)(nil),
	Methods: []grpc.MethodDesc{
		transport.UnaryMethod(GPUServiceName, "Node", gpuServer.node),
		transport.UnaryMethod(GPUServiceName, "Cluster", gpuServer.cluster),
	},
	Metadata: "troupe/runtime/cluster/gpus_service.go",
}

// gpuService is one node's GPU service.
type gpuService struct {
	n *Node

	mu      sync.RWMutex
	src     GPUSource
	profile string
}

// ServeGPUs makes the node serve its GPUs from src (a running sampler);
// profile names the simulated profile ("" for real GPUs). Until it is
// called the node answers with an error saying it samples no GPUs.
func (n *Node) ServeGPUs(src GPUSource, profile string) {
	if n.ctx.Err() != nil {
		return // shut down
	}
	s := n.gpus
	s.mu.Lock()
	s.src, s.profile = src, profile
	s.mu.Unlock()
}

// GPUs returns every node's GPUs, gathered by this node (see ClusterGPUs).
func (n *Node) GPUs(ctx context.Context, r *ClusterGPUsRequest) (*ClusterGPUs, error) {
	if n.ctx.Err() != nil {
		return nil, fmt.Errorf("GPUs: node %s is shut down", n.cfg.NodeID)
	}
	return n.gpus.cluster(ctx, r)
}

// ClusterGPUs returns every node's GPUs as the contacted node gathers
// them. With history set, each GPU carries its sample history.
func (c *Client) ClusterGPUs(ctx context.Context, history bool) (*ClusterGPUs, error) {
	out := new(ClusterGPUs)
	if err := c.InvokeService(ctx, GPUServiceName, "Cluster", &ClusterGPUsRequest{History: history}, out); err != nil {
		return nil, err
	}
	return out, nil
}

// node answers for this node's GPUs.
func (s *gpuService) node(ctx context.Context, r *NodeGPUsRequest) (*NodeGPUs, error) {
	s.mu.RLock()
	src, profile := s.src, s.profile
	s.mu.RUnlock()
	out := &NodeGPUs{Node: s.n.cfg.NodeID, Address: s.n.r.grpcAddr(), Profile: profile}
	if src == nil {
		out.Error = "this node samples no GPUs (started without a GPU sampler)"
		return out, nil
	}
	out.IntervalMillis = src.Interval().Milliseconds()
	out.Devices = src.Devices()
	out.Simulated = profile != ""
	latest := src.Latest()
	byIndex := map[int]gpu.Sample{}
	for _, smp := range latest {
		byIndex[smp.Index] = smp
	}
	for _, d := range out.Devices {
		if d.Simulated {
			out.Simulated = true
		}
		smp, ok := byIndex[d.Index]
		if !ok {
			smp = gpu.Sample{Index: d.Index, Simulated: d.Simulated, Errors: map[string]string{"sample": "not sampled yet"}}
		}
		if r.Holders != nil {
			smp.Actors = gpu.MeasureHolders(s.withPIDs(r.Holders[d.Index]), smp.Processes)
		}
		out.Samples = append(out.Samples, smp)
		if r.History {
			pts := []GPUPoint{}
			for _, h := range src.History(d.Index) {
				if t := h.Time.UnixMilli(); t > r.HistorySince {
					pts = append(pts, GPUPoint{T: t, SM: h.SMUtil, Mem: h.MemUtil})
				}
			}
			out.History = append(out.History, pts)
		}
	}
	return out, ctx.Err()
}

// withPIDs sets each holder's PID to its job's worker process on this
// node (the process NVML reports on the GPU), or this process when the
// node runs actors in-process (no worker for the job).
func (s *gpuService) withPIDs(hs []gpu.Holder) []gpu.Holder {
	if len(hs) == 0 {
		return nil
	}
	out := append([]gpu.Holder(nil), hs...)
	w := s.n.workers
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range out {
		job := scheduler.JobID(out[i].Job)
		if job == "" {
			job = anonymousJob
		}
		if p := w.procs[job]; p != nil {
			out[i].PID = uint32(p.PID())
		} else if len(w.procs) == 0 {
			out[i].PID = uint32(os.Getpid())
		}
	}
	return out
}

// cluster gathers every node's GPUs: on a server from its state copy, on
// a worker through a server.
func (s *gpuService) cluster(ctx context.Context, r *ClusterGPUsRequest) (*ClusterGPUs, error) {
	n := s.n
	if n.raft == nil {
		if r.Hops >= maxHops {
			return nil, status.Error(codes.Unavailable, "no server reachable")
		}
		addr := n.anyServer()
		if addr == "" {
			return nil, status.Error(codes.Unavailable, "this worker knows no live server")
		}
		cc, err := n.peers.get(addr)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "dial server %s: %v", addr, err)
		}
		fwd := *r
		fwd.Hops++
		out := new(ClusterGPUs)
		return out, cc.Invoke(ctx, "/"+GPUServiceName+"/Cluster", &fwd, out)
	}
	type target struct {
		id, addr string
		holders  map[int][]gpu.Holder
	}
	var targets []target
	only := map[string]bool{}
	for _, id := range r.Nodes {
		only[id] = true
	}
	n.fsm.Read(func(st *scheduler.State) {
		for _, nd := range st.Nodes() {
			if nd.State == scheduler.NodeDead || (len(only) > 0 && !only[string(nd.ID)]) {
				continue
			}
			holders := map[int][]gpu.Holder{}
			for _, a := range st.ActorsOn(nd.ID) {
				if a.State == scheduler.ActorDead || len(a.GPUs) == 0 {
					continue
				}
				name := a.Spec.Name
				if name == "" {
					name = string(a.Spec.ID)
				}
				for _, g := range a.GPUs {
					holders[g.Index] = append(holders[g.Index], gpu.Holder{Actor: name, Job: string(a.Spec.JobID), Fraction: g.Fraction})
				}
			}
			for _, hs := range holders {
				sort.Slice(hs, func(i, j int) bool { return hs[i].Actor < hs[j].Actor })
			}
			targets = append(targets, target{id: string(nd.ID), addr: nd.Address, holders: holders})
		}
	})
	out := &ClusterGPUs{ReportedBy: n.cfg.NodeID, Time: time.Now().UTC(), Nodes: make([]NodeGPUs, len(targets))}
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &NodeGPUsRequest{History: r.History, HistorySince: r.HistorySince[t.id], Holders: t.holders}
			ng, err := s.ask(ctx, t.id, t.addr, req)
			if err != nil {
				ng = &NodeGPUs{Error: err.Error()}
			}
			ng.Node, ng.Address = t.id, t.addr
			out.Nodes[i] = *ng
		}()
	}
	wg.Wait()
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	return out, ctx.Err()
}

// ask calls one node's Node method (this node's directly).
func (s *gpuService) ask(ctx context.Context, id, addr string, req *NodeGPUsRequest) (*NodeGPUs, error) {
	if id == s.n.cfg.NodeID {
		return s.node(ctx, req)
	}
	if addr == "" {
		return nil, fmt.Errorf("node %s has no address", id)
	}
	cc, err := s.n.peers.get(addr)
	if err != nil {
		return nil, fmt.Errorf("node %s at %s: %w", id, addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, gpuNodeTimeout)
	defer cancel()
	out := new(NodeGPUs)
	if err := cc.Invoke(ctx, "/"+GPUServiceName+"/Node", req, out); err != nil {
		return nil, fmt.Errorf("node %s at %s: %w", id, addr, err)
	}
	return out, nil
}
