package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"troupe/runtime/security"
	"troupe/scheduler"
)

// Role is what a node does in the cluster.
type Role string

// Roles.
const (
	// RoleHead is the first server: it bootstraps a one-server raft cluster
	// that later servers join.
	RoleHead Role = "head"
	// RoleServer is a raft voter.
	RoleServer Role = "server"
	// RoleWorker runs actors and gossips but holds no raft state.
	RoleWorker Role = "worker"
)

// isServer reports whether the role runs raft.
func (r Role) isServer() bool { return r == RoleHead || r == RoleServer }

// Default ports: a node's gRPC port, with gossip on the next port and raft
// on the one after, unless configured otherwise.
const (
	DefaultGRPCPort = 7370
	// gossip = gRPC port + 1, raft = gRPC port + 2
)

// Timing is the set of timers of raft and memberlist.
type Timing struct {
	// Raft heartbeat and election timeout; a follower notices a dead leader
	// after between one and two of these.
	RaftTimeout time.Duration
	// Memberlist probe interval and timeout; failure detection takes a few
	// probe intervals plus the suspicion timeout.
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	SuspicionMult  int
	GossipInterval time.Duration
	// Reconcile is how often the leader compares membership with the
	// committed node list (events trigger it sooner).
	Reconcile time.Duration
}

// LANTiming is the default: a fast LAN, leader failover well under 2 s,
// failure detection in about 3 s.
func LANTiming() Timing { return lanTiming }

var lanTiming = Timing{RaftTimeout: 300 * time.Millisecond, ProbeInterval: 500 * time.Millisecond, ProbeTimeout: 300 * time.Millisecond,
	SuspicionMult: 3, GossipInterval: 100 * time.Millisecond, Reconcile: time.Second}

// FastTiming shortens the timers for loopback clusters (tests, one
// machine): failure detection in about 1 s.
func FastTiming() Timing { return fastTiming }

var fastTiming = Timing{RaftTimeout: 300 * time.Millisecond, ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond,
	SuspicionMult: 2, GossipInterval: 50 * time.Millisecond, Reconcile: 250 * time.Millisecond}

// Config configures a node.
type Config struct {
	// NodeID is the node's unique name. Empty: read from DataDir/node-id,
	// or generated and saved there.
	NodeID string
	// Role is head, server or worker.
	Role Role
	// DataDir holds the raft log, snapshots, the node ID and the token.
	// Required for servers.
	DataDir string
	// BindAddr is the gRPC address ("host:port"); the host must be an IP
	// address other nodes can reach (or set Advertise).
	BindAddr string
	// Advertise is the host other nodes use to reach this one: an IP
	// address, or a name resolved once at start; default: BindAddr's host.
	Advertise string
	// GossipPort and RaftPort default to the gRPC port + 1 and + 2.
	GossipPort, RaftPort int
	// Token is the cluster token (required).
	Token string
	// TLS secures the node's TCP connections (security.ResolveNode); TLS
	// is on unless TLS.Insecure.
	TLS security.TLS
	// Join lists gRPC addresses of existing nodes.
	Join []string
	// BootstrapExpect, for servers, forms the raft cluster once that many
	// servers with the same setting have found each other.
	BootstrapExpect int
	// Resources, GPUs, Topology and Labels are what the node advertises.
	Resources scheduler.Resources
	GPUs      []scheduler.GPUInfo
	Topology  [][]int
	Labels    map[string]string
	// Timing defaults to LANTiming.
	Timing Timing
	// ApplyTimeout bounds how long a write retries while there is no
	// leader before it fails with ErrNoLeader (default 5 s).
	ApplyTimeout time.Duration
	// JoinTimeout bounds how long Start retries reaching Join addresses
	// (default 30 s).
	JoinTimeout time.Duration
	// Logger receives the node's logs (default slog.Default()).
	Logger *slog.Logger
}

// ErrConfig: the node configuration is invalid.
var ErrConfig = errors.New("invalid node configuration")

// resolved holds the addresses computed from a Config.
type resolved struct {
	host                           string
	grpcPort, gossipPort, raftPort int
}

func (r resolved) grpcAddr() string   { return net.JoinHostPort(r.host, strconv.Itoa(r.grpcPort)) }
func (r resolved) gossipAddr() string { return net.JoinHostPort(r.host, strconv.Itoa(r.gossipPort)) }
func (r resolved) raftAddr() string   { return net.JoinHostPort(r.host, strconv.Itoa(r.raftPort)) }

// normalize fills defaults and checks the configuration.
func (c *Config) normalize() (resolved, error) {
	var r resolved
	switch c.Role {
	case RoleHead, RoleServer, RoleWorker:
	case "":
		c.Role = RoleWorker
	default:
		return r, fmt.Errorf("%w: role %q (want head, server or worker)", ErrConfig, c.Role)
	}
	if c.Token == "" {
		return r, fmt.Errorf("%w: no cluster token (--token or TROUPE_TOKEN)", ErrConfig)
	}
	if c.Role.isServer() && c.DataDir == "" {
		return r, fmt.Errorf("%w: a %s needs --data-dir", ErrConfig, c.Role)
	}
	if c.Role == RoleHead && c.BootstrapExpect > 1 {
		return r, fmt.Errorf("%w: --head bootstraps a single server; use --bootstrap-expect on every server instead", ErrConfig)
	}
	if c.Role == RoleWorker && c.BootstrapExpect > 0 {
		return r, fmt.Errorf("%w: --bootstrap-expect needs --server", ErrConfig)
	}
	if c.Role != RoleHead && len(c.Join) == 0 && c.BootstrapExpect == 0 {
		return r, fmt.Errorf("%w: a %s needs --join ADDR (or --bootstrap-expect)", ErrConfig, c.Role)
	}
	if c.BindAddr == "" {
		c.BindAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultGRPCPort))
	}
	host, port, err := net.SplitHostPort(c.BindAddr)
	if err != nil {
		return r, fmt.Errorf("%w: bind address %q: %v", ErrConfig, c.BindAddr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65533 {
		return r, fmt.Errorf("%w: bind address %q: port must be 1..65533", ErrConfig, c.BindAddr)
	}
	r.host, r.grpcPort = host, p
	if c.Advertise != "" {
		r.host = c.Advertise
	}
	if net.ParseIP(r.host) == nil && r.host != "" {
		// A name (a container's or pod's DNS name): gossip and raft carry
		// addresses, so it is resolved once, here.
		ip, err := resolveHost(r.host)
		if err != nil {
			return r, fmt.Errorf("%w: advertised host: %v", ErrConfig, err)
		}
		r.host = ip
	}
	if ip := net.ParseIP(r.host); ip == nil || ip.IsUnspecified() {
		return r, fmt.Errorf("%w: %q is not an address other nodes can reach; set --advertise", ErrConfig, r.host)
	}
	r.gossipPort, r.raftPort = c.GossipPort, c.RaftPort
	if r.gossipPort == 0 {
		r.gossipPort = p + 1
	}
	if r.raftPort == 0 {
		r.raftPort = p + 2
	}
	if c.Timing == (Timing{}) {
		c.Timing = LANTiming()
	}
	if c.ApplyTimeout <= 0 {
		c.ApplyTimeout = 5 * time.Second
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DataDir != "" {
		if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
			return r, fmt.Errorf("data dir: %w", err)
		}
	}
	if c.NodeID == "" {
		id, err := loadNodeID(c.DataDir)
		if err != nil {
			return r, err
		}
		c.NodeID = id
	}
	if strings.ContainsAny(c.NodeID, " \t\n/") || len(c.NodeID) > 64 {
		return r, fmt.Errorf("%w: node ID %q: at most 64 characters, no spaces or slashes", ErrConfig, c.NodeID)
	}
	return r, nil
}

// resolveHost returns the address a host name resolves to, preferring
// IPv4 (what container networks hand out), within 10 s.
func resolveHost(host string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", host, err)
	}
	for _, a := range addrs {
		if a.IP.To4() != nil {
			return a.IP.String(), nil
		}
	}
	if len(addrs) == 0 {
		return "", fmt.Errorf("resolve %q: no addresses", host)
	}
	return addrs[0].IP.String(), nil
}

// loadNodeID reads the node ID saved in dir, or makes and saves a new one.
func loadNodeID(dir string) (string, error) {
	if dir != "" {
		if b, err := os.ReadFile(filepath.Join(dir, "node-id")); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				return id, nil
			}
		}
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	id := "node-" + hex.EncodeToString(b[:])
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "node-id"), []byte(id+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("save node id: %w", err)
		}
	}
	return id, nil
}
