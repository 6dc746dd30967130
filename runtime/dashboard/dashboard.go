// Package dashboard serves troupe's web dashboard: one page (HTML, CSS and
// JavaScript embedded with go:embed; no build step, no external assets)
// that polls a JSON endpoint and draws the cluster's nodes, actors and the
// utilization of every GPU over time, updating live.
//
// The page reads GET api/state, a State. Whoever mounts the handler
// provides a StateSource: LocalSource implements it over one machine's GPU
// inventory and sampler, so the dashboard works without a cluster; Server
// implements it over a cluster node (the nodes, actors and every node's
// GPUs) and serves the page with Prometheus /metrics, for troupe start and
// troupe dashboard.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"runtime"
	"time"

	"troupe/gpu"
)

//go:embed static
var static embed.FS

// State is the JSON document of GET api/state.
type State struct {
	Time time.Time `json:"time"`
	// PollMillis tells the page how often to poll.
	PollMillis int     `json:"poll_ms"`
	Nodes      []Node  `json:"nodes"`
	Actors     []Actor `json:"actors"`
	GPUs       []GPU   `json:"gpus"`
}

// Node is one cluster node.
type Node struct {
	Name    string `json:"name"`
	Address string `json:"address,omitempty"`
	Leader  bool   `json:"leader"`
	Alive   bool   `json:"alive"`
	CPUs    int    `json:"cpus"`
	GPUs    int    `json:"gpus"`
	// SimulatedGPUs names the simulated GPU profile, empty for real GPUs.
	SimulatedGPUs string `json:"simulated_gpus,omitempty"`
}

// Actor is one actor.
type Actor struct {
	Name  string `json:"name"`
	Type  string `json:"type,omitempty"`
	Job   string `json:"job,omitempty"`
	Node  string `json:"node"`
	State string `json:"state"`
	GPUs  []int  `json:"gpus,omitempty"`
}

// GPU is one GPU with its recent history.
type GPU struct {
	Node            string       `json:"node"`
	Index           int          `json:"index"`
	UUID            string       `json:"uuid"`
	Name            string       `json:"name"`
	Simulated       bool         `json:"simulated"`
	SMUtil          *uint32      `json:"sm_util_percent"`
	MemUtil         *uint32      `json:"mem_util_percent"`
	MemoryUsed      *uint64      `json:"memory_used_bytes"`
	MemoryTotal     *uint64      `json:"memory_total_bytes"`
	PowerWatts      *float64     `json:"power_watts"`
	PowerLimitWatts *float64     `json:"power_limit_watts"`
	TemperatureC    *uint32      `json:"temperature_celsius"`
	Actors          []gpu.Holder `json:"actors"`
	History         []Point      `json:"history"`
}

// Point is one history sample: time in Unix milliseconds and the SM and
// memory utilization percentages (null when the query failed).
type Point struct {
	T   int64   `json:"t"`
	SM  *uint32 `json:"sm"`
	Mem *uint32 `json:"mem"`
}

// StateSource produces the dashboard's state.
type StateSource interface {
	State(ctx context.Context) (State, error)
}

// Options configure the handler.
type Options struct {
	// Poll is how often the page polls (default 1 s).
	Poll time.Duration
	// RunDir, if set, is a training run's output directory on this
	// machine: GET api/training serves the per-step timeline of its
	// metrics.jsonl and the page draws it, live.
	RunDir string
}

// New returns the dashboard handler: "/" the page, "/app.js" and
// "/style.css" its assets, "/api/state" the JSON state. URLs in the page
// are relative, so it can be mounted under a prefix with http.StripPrefix.
func New(src StateSource, opts Options) http.Handler {
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	assets, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(assets))
	if opts.RunDir != "" {
		mux.HandleFunc("GET /api/training", serveTraining(opts.RunDir))
	}
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		st, err := src.State(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		if st.PollMillis == 0 {
			st.PollMillis = int(opts.Poll / time.Millisecond)
		}
		if st.Nodes == nil {
			st.Nodes = []Node{}
		}
		if st.Actors == nil {
			st.Actors = []Actor{}
		}
		if st.GPUs == nil {
			st.GPUs = []GPU{}
		}
		if err := json.NewEncoder(w).Encode(st); err != nil {
			// The client went away mid-response; nothing to tell it.
			return
		}
	})
	return mux
}

// LocalSource is a StateSource over one machine's GPUs: one node, the
// actors recorded in Attribution, and the Sampler's history.
type LocalSource struct {
	Node        string
	Inventory   *gpu.Inventory
	Sampler     *gpu.Sampler
	Attribution *gpu.Attribution
	// Now is the clock (time.Now if nil).
	Now func() time.Time
}

// NewLocalSource returns a LocalSource named after this host.
func NewLocalSource(inv *gpu.Inventory, s *gpu.Sampler, attr *gpu.Attribution) *LocalSource {
	host, err := os.Hostname()
	if err != nil {
		host = "local"
	}
	return &LocalSource{Node: host, Inventory: inv, Sampler: s, Attribution: attr}
}

// State implements StateSource.
func (l *LocalSource) State(ctx context.Context) (State, error) {
	if l.Inventory == nil || l.Sampler == nil {
		return State{}, fmt.Errorf("local dashboard state: no GPU inventory or sampler")
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	st := State{Time: now().UTC(), PollMillis: int(l.Sampler.Interval() / time.Millisecond)}
	st.Nodes = []Node{{Name: l.Node, Leader: true, Alive: true, CPUs: runtime.NumCPU(),
		GPUs: l.Inventory.Len(), SimulatedGPUs: l.Inventory.Profile()}}
	latest := l.Sampler.Latest()
	actorGPUs := map[string]*Actor{}
	var order []string
	for _, d := range l.Inventory.Devices() {
		g := GPU{Node: l.Node, Index: d.Index, UUID: d.UUID, Name: d.Name, Simulated: d.Simulated,
			MemoryTotal: d.MemoryTotal, PowerLimitWatts: d.PowerLimitWatts, History: []Point{}}
		if d.Index < len(latest) {
			s := latest[d.Index]
			g.SMUtil, g.MemUtil, g.MemoryUsed = s.SMUtil, s.MemUtil, s.MemoryUsed
			g.PowerWatts, g.TemperatureC = s.PowerWatts, s.TemperatureC
			if s.MemoryTotal != nil {
				g.MemoryTotal = s.MemoryTotal
			}
		}
		g.Actors = l.Attribution.Holders(d.Index)
		if g.Actors == nil {
			g.Actors = []gpu.Holder{}
		}
		for _, h := range g.Actors {
			a := actorGPUs[h.Actor]
			if a == nil {
				a = &Actor{Name: h.Actor, Job: h.Job, Node: l.Node, State: "alive"}
				actorGPUs[h.Actor] = a
				order = append(order, h.Actor)
			}
			a.GPUs = append(a.GPUs, d.Index)
		}
		for _, s := range l.Sampler.History(d.Index) {
			g.History = append(g.History, Point{T: s.Time.UnixMilli(), SM: s.SMUtil, Mem: s.MemUtil})
		}
		st.GPUs = append(st.GPUs, g)
	}
	for _, name := range order {
		st.Actors = append(st.Actors, *actorGPUs[name])
	}
	return st, ctx.Err()
}
