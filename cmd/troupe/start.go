package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"troupe/cmd/internal/cli"
	"troupe/gpu"
	"troupe/runtime/cluster"
	"troupe/runtime/dashboard"
	"troupe/runtime/gpuagent"
	"troupe/runtime/security"
	"troupe/runtime/transport"
	"troupe/scheduler"
)

const startHelp = `Starts a node and runs until interrupted (SIGINT/SIGTERM drain it) or
stopped with 'troupe stop'.

  troupe start --head --data-dir D              first server; writes D/token if no token is given
  troupe start --join ADDR [--server] ...       a worker (or, with --server, a raft server) joins
  troupe start --server --bootstrap-expect 3 --data-dir D [--join ADDR]
                                                three servers form raft once all three gossip

Ports: a node serves gRPC on its --bind port P (default 7370), gossips
(memberlist, TCP+UDP) on P+1 and, on servers, speaks raft (TCP) on P+2;
--gossip-port and --raft-port override the last two. Every gRPC call,
gossip message and raft connection is authenticated by the cluster token
(--token or TROUPE_TOKEN; the head generates one when none is given).
Drivers connect with TROUPE_ADDRESS=HOST:P and TROUPE_TOKEN.

TLS: every TCP connection (gRPC, raft, job uploads and logs, worker and
object ports) is TLS with certificates from the cluster CA, which the head
makes in D/tls (servers with --bootstrap-expect derive it from the token).
Other nodes get a certificate from the node they join; they trust its CA
because that node proves it holds the token, or, with --ca-hash sha256:…
(printed by the head and by troupe status), only if the CA has that hash.
Bring your own with --tls-ca/--tls-cert/--tls-key (troupe tls ca create,
troupe tls cert create); --insecure turns TLS off.

Every node samples its GPUs (troupe gpus --address shows them all). The head
serves the web dashboard (every node's GPUs, nodes, actors) and Prometheus
/metrics on 127.0.0.1:8265; --http ADDR moves it (any node), --http off
turns it off. Beyond loopback it requires the cluster token (Authorization:
Bearer TOKEN, or basic auth with the token as the password).
`

func runStart(ctx context.Context, args []string) error {
	fs := newFlagSet("start", "[flags]", startHelp)
	head := fs.Bool("head", false, "start the first server: bootstraps a one-server raft cluster")
	server := fs.Bool("server", false, "with --join: join as a raft server (voter) instead of a worker")
	join := fs.String("join", "", "gRPC address(es) HOST:PORT of existing nodes, comma-separated")
	joinTimeout := fs.Duration("join-timeout", 30*time.Second, "give up when no --join address answers for this long")
	expect := fs.Int("bootstrap-expect", 0, "servers: form raft once this many servers (with the same setting) gossip")
	dataDir := fs.String("data-dir", "", "directory for raft state, node ID and token (required for servers)")
	bind := fs.String("bind", "127.0.0.1:7370", "gRPC address HOST:PORT this node listens on")
	advertise := fs.String("advertise", "", "host other nodes use to reach this node (default: --bind's host)")
	gossipPort := fs.Int("gossip-port", 0, "memberlist port (default: gRPC port + 1)")
	raftPort := fs.Int("raft-port", 0, "raft port on servers (default: gRPC port + 2)")
	token := fs.String("token", "", "cluster token (default: TROUPE_TOKEN, or D/token; generated on a new head)")
	nodeID := fs.String("node-id", "", "node name (default: saved in D/node-id, or generated)")
	resources := fs.String("resources", "", "override or add resources: cpu=N,memory=SIZE,NAME=N,...")
	labels := fs.String("labels", "", "node labels key=value,...")
	simGPUs := fs.String("simulate-gpus", os.Getenv("TROUPE_SIMULATE_GPUS"), "simulated GPUs: a count or a profile ("+strings.Join(gpu.Profiles(), ", ")+"); default TROUPE_SIMULATE_GPUS")
	fast := fs.Bool("fast-timers", false, "shortened raft and gossip timers for clusters on one machine (tests)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	dcgm := fs.Bool("dcgm-metrics", true, "also export the GPU gauges under the DCGM exporter's names and labels on /metrics (false where NVIDIA's dcgm-exporter runs too)")
	insecure := fs.Bool("insecure", false, "turn TLS off: plaintext TCP between nodes (the token is still checked); for networks you trust")
	tlsCA := fs.String("tls-ca", "", "your own CA certificate (PEM) instead of the cluster CA; with --tls-cert and --tls-key")
	tlsCert := fs.String("tls-cert", "", "this node's certificate (PEM), signed by --tls-ca (troupe tls cert create)")
	tlsKey := fs.String("tls-key", "", "this node's private key (PEM) for --tls-cert")
	caHash := fs.String("ca-hash", os.Getenv(security.EnvCAHash), "pin the cluster CA when joining: sha256:HEX as printed by the head (default TROUPE_CA_HASH); without it the CA is trusted because the node proves it holds the token")
	tlsSAN := fs.String("tls-san", "", "extra DNS names or IPs for this node's certificate, comma-separated")
	httpAddr := fs.String("http", "", "serve the web dashboard (/) and Prometheus metrics (/metrics) on this HTTP address; default: "+defaultDashboard+" on the head, off elsewhere; \"off\" turns it off")
	if help, err := cli.ParseFlags(fs, args); help || err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: %w", *logLevel, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))

	cfg := cluster.Config{NodeID: *nodeID, DataDir: *dataDir, BindAddr: *bind, Advertise: *advertise, GossipPort: *gossipPort,
		RaftPort: *raftPort, BootstrapExpect: *expect, Logger: log, JoinTimeout: *joinTimeout,
		TLS: security.TLS{Insecure: *insecure, CAFile: *tlsCA, CertFile: *tlsCert, KeyFile: *tlsKey, CAHash: *caHash, SANs: splitList(*tlsSAN)}}
	switch {
	case *head && (*server || *join != "" || *expect > 0):
		return fmt.Errorf("--head starts a new cluster: it takes no --server, --join or --bootstrap-expect")
	case *head:
		cfg.Role = cluster.RoleHead
	case *server || *expect > 0:
		cfg.Role = cluster.RoleServer
	default:
		cfg.Role = cluster.RoleWorker
	}
	if cfg.Role == cluster.RoleWorker && *join == "" {
		return fmt.Errorf("a worker needs --join ADDR (or start a server with --head or --bootstrap-expect)")
	}
	for _, a := range strings.Split(*join, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Join = append(cfg.Join, a)
		}
	}
	if *fast {
		cfg.Timing = cluster.FastTiming()
	}
	tok, err := security.Token(*token, *dataDir)
	generated := false
	if errors.Is(err, security.ErrNoToken) && cfg.Role == cluster.RoleHead && *dataDir != "" {
		tok, err = security.NewToken()
		generated = true
	}
	if err != nil {
		return err
	}
	cfg.Token = tok
	if *dataDir != "" {
		// Keep the token beside the raft state so a restart needs no flag.
		if err := security.SaveToken(*dataDir, tok); err != nil {
			return err
		}
	}
	if err := nodeResources(&cfg, *resources, *simGPUs, log); err != nil {
		return err
	}
	if cfg.Labels, err = mergeLabels(cfg.Labels, *labels); err != nil {
		return err
	}

	n, err := cluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("troupe node %s (%s) started: grpc %s\n", n.ID(), cfg.Role, n.Addr())
	if generated {
		fmt.Printf("generated a cluster token and wrote it to %s (mode 0600).\nOther nodes and drivers need it:\n  export TROUPE_TOKEN=$(cat %s)\n",
			security.TokenFile(*dataDir), security.TokenFile(*dataDir))
	}
	fmt.Printf("drivers and the CLI connect with: TROUPE_ADDRESS=%s\n", n.Addr())
	if h := n.CAHash(); h != "" {
		fmt.Printf("TLS on; cluster CA hash: %s\n  joiners may pin it: --ca-hash %s (or TROUPE_CA_HASH)\n", h, h)
	} else {
		fmt.Println("TLS off (--insecure): traffic between nodes is plaintext")
	}
	go warnOvercommit(ctx, n, log)
	// Every node samples its GPUs for the cluster's GPU views (troupe gpus,
	// the head's dashboard); simulated ones follow the actors' work.
	wctx, stopWeb := context.WithCancel(context.Background())
	defer stopWeb()
	agent, err := gpuagent.Start(wctx, gpuagent.Options{Node: n.ID(), Simulate: *simGPUs, Ledgers: true, Log: log})
	if err != nil {
		log.Warn("GPU sampling off", "err", err)
	} else {
		n.ServeGPUs(agent.Sampler(), agent.Profile())
	}
	if listen := dashboardAddr(*httpAddr, cfg.Role); listen != "" && agent != nil {
		w, err := dashboard.NewServer(wctx, n.ID(), agent, n, dashboard.ServerOptions{NoDCGM: !*dcgm})
		if err == nil {
			var addr string
			if addr, err = w.Serve(wctx, listen, transport.HTTPAuth{Token: cfg.Token}, log); err == nil {
				fmt.Printf("dashboard: http://%s/  metrics: http://%s/metrics\n", addr, addr)
			}
		}
		if err != nil {
			log.Warn("dashboard not served", "err", err)
		}
	}
	select {
	case <-ctx.Done():
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := n.Drain(dctx, "interrupted"); err != nil {
			log.Warn("drain", "err", err)
		}
		cancel()
	case <-n.StopRequested():
	}
	return n.Shutdown()
}

func mergeLabels(base map[string]string, flagVal string) (map[string]string, error) {
	extra, err := parseLabels(flagVal)
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = map[string]string{}
	}
	for k, v := range extra {
		base[k] = v
	}
	return base, nil
}

// nodeResources fills the node's CPUs, memory, custom resources and GPUs.
func nodeResources(cfg *cluster.Config, resFlag, simulate string, log *slog.Logger) error {
	cpu, mem, custom, err := parseResources(resFlag)
	if err != nil {
		return err
	}
	r := scheduler.Resources{MilliCPU: int64(goruntime.NumCPU()) * 1000, MemoryBytes: gpu.HostMemory(), Custom: custom}
	if cpu != nil {
		r.MilliCPU = int64(*cpu * 1000)
	}
	if mem != nil {
		r.MemoryBytes = *mem
	}
	cfg.Resources = r
	cfg.Labels = map[string]string{machineLabel: machineKey()}
	var detected []string
	if cpu == nil {
		detected = append(detected, "cpu")
	}
	if mem == nil {
		detected = append(detected, "memory")
	}
	if len(detected) > 0 {
		cfg.Labels[detectedLabel] = strings.Join(detected, ",")
	}
	gpus, topo, simulated, err := gpuagent.NodeGPUs(cfg.BindAddr, simulate)
	if err != nil {
		return err
	}
	if simulate == "" && err == nil && len(gpus) == 0 {
		log.Info("no GPUs found (NVML unavailable or no devices); use --simulate-gpus to simulate some")
	}
	cfg.GPUs, cfg.Topology = gpus, topo
	if simulated {
		gpuagent.MarkSimulated(cfg.Labels)
	}
	return nil
}

// Node labels that let the cluster see nodes sharing a machine.
const (
	// machineLabel identifies the machine a node runs on (host name and
	// machine ID).
	machineLabel = "troupe.machine"
	// detectedLabel lists the resources a node took from its machine
	// (cpu, memory) rather than from --resources.
	detectedLabel = "troupe.detected"
)

// machineKey names this machine: its host name and /etc/machine-id.
// Containers of one image share a machine ID but not a host name.
func machineKey() string {
	host, _ := os.Hostname()
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			id := strings.TrimSpace(string(b))
			return host + "/" + id[:min(12, len(id))]
		}
	}
	return host
}

// overcommitWarnings finds alive nodes that share a machine and each
// offer all of its CPUs or memory (nothing in --resources said
// otherwise): the scheduler would place on them together several times
// what the machine has.
func overcommitWarnings(nodes []cluster.NodeView) []string {
	var out []string
	for _, o := range overcommits(nodes) {
		out = append(out, o.msg)
	}
	return out
}

// overcommit is one machine shared by nodes that each offer all of it.
type overcommit struct {
	nodes []string
	msg   string
}

func overcommits(nodes []cluster.NodeView) []overcommit {
	groups := map[string][]cluster.NodeView{}
	var keys []string
	for _, n := range nodes {
		m := n.Labels[machineLabel]
		if m == "" || n.Labels[detectedLabel] == "" || n.State == "dead" || n.State == cluster.NodeDrained {
			continue
		}
		if groups[m] == nil {
			keys = append(keys, m)
		}
		groups[m] = append(groups[m], n)
	}
	sort.Strings(keys)
	var out []overcommit
	for _, m := range keys {
		g := groups[m]
		if len(g) < 2 {
			continue
		}
		ids := make([]string, len(g))
		for i, n := range g {
			ids[i] = n.ID
		}
		host, _, _ := strings.Cut(m, "/")
		out = append(out, overcommit{nodes: ids, msg: fmt.Sprintf("%d nodes on machine %s (%s) each offer all of its %s (%g CPUs, %s memory): together the scheduler may place %d times what the machine has; give each node its share with --resources cpu=N,memory=SIZE",
			len(g), host, strings.Join(ids, ", "), g[0].Labels[detectedLabel], g[0].Total.CPUs(), fmtBytes(g[0].Total.MemoryBytes), len(g))})
	}
	return out
}

// warnOvercommit logs overcommitWarnings that concern node n, once its
// registration is committed.
func warnOvercommit(ctx context.Context, n *cluster.Node, log *slog.Logger) {
	for range 20 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := n.List(lctx, &cluster.ListRequest{Kind: cluster.ListNodes, Limit: cluster.MaxListLimit})
		cancel()
		if err != nil {
			continue
		}
		registered := false
		for _, nv := range resp.Nodes {
			registered = registered || nv.ID == n.ID()
		}
		if !registered {
			continue
		}
		for _, o := range overcommits(resp.Nodes) {
			if slices.Contains(o.nodes, n.ID()) {
				log.Warn(o.msg)
			}
		}
		return
	}
}
