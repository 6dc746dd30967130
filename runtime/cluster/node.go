package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/pki"
	"troupe/runtime/transport"
	"troupe/scheduler"

	"troupe/runtime/api"
)

// Node is a running node daemon.
type Node struct {
	cfg Config
	r   resolved
	log *slog.Logger

	members *members
	ml      *memberlist.Memberlist
	grpcSrv *grpc.Server
	grpcLn  net.Listener
	peers   *peerPool

	// TLS (tls.go), set before the node listens.
	sec    transport.Security
	ident  *pki.Identity // nil with TLS.Insecure
	tlsDir string
	pki    *pki.Server

	// Servers only.
	raft     *raft.Raft
	fsm      *scheduler.FSM
	logStore *walStore
	trans    *raft.NetworkTransport
	planner  scheduler.Planner

	workers *workerSet // the job worker processes this node runs

	// The gRPC services the node serves besides raft and gossip, built in
	// Start (services.go).
	control *controlImpl // Control: info, apply, actors
	jobs    *jobManager  // Jobs: submitted drivers, leases, logs
	groups  *groupImpl   // placement groups
	gpus    *gpuService  // GPU views
	list    *listImpl    // State: troupe list
	nodeSvc *nodeImpl    // Node: what the leader asks of this node (kill.go)

	// leaderReady: this server leads and its barrier passed (its state
	// holds every committed entry); caughtUp: this server has caught up
	// with the leader since it started (caughtup.go).
	leaderReady atomic.Bool
	caughtUp    atomic.Bool

	junk  *gossipJunk // rejected gossip: counted, logged at a rate limit (set before memberlist starts)
	binMu sync.Mutex  // serializes job binary uploads

	trigger chan struct{} // pokes the leader's reconcile
	placeCh chan *placeReq

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startedAt time.Time

	stopOnce     sync.Once
	stopReq      chan struct{} // closed when a Stop RPC asked the node to stop
	shutdownOnce sync.Once
	shutdownErr  error
	raftDown     chan struct{} // closed as Shutdown stops raft: await gives up
}

// Start starts a node: listeners, raft (servers), gossip, joining the
// cluster, and registration of the node's resources through raft.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	r, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, r: r, log: cfg.Logger.With("node", cfg.NodeID), trigger: make(chan struct{}, 1),
		placeCh: make(chan *placeReq), stopReq: make(chan struct{}), raftDown: make(chan struct{}), startedAt: time.Now()}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.workers = newWorkerSet(n)
	n.newServices()
	if err := n.setupTLS(ctx); err != nil {
		return nil, err
	}
	n.peers = newPeerPool(transport.Options{Security: n.sec})
	n.members = &members{byID: map[string]*member{}, changed: n.poke, log: n.log.Warn}
	meta := memberMeta{ID: cfg.NodeID, Role: cfg.Role, GRPC: r.grpcAddr(), Expect: cfg.BootstrapExpect}
	if cfg.Role.isServer() {
		meta.Raft = r.raftAddr()
	}
	if n.members.meta, err = meta.encode(); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			n.Shutdown()
		}
	}()
	// The gRPC port first: when another node holds it (and so, usually,
	// the ports after it), the error names the port the user chose.
	bind := net.JoinHostPort(hostOf(cfg.BindAddr), strconv.Itoa(r.grpcPort))
	if n.grpcLn, err = net.Listen("tcp", bind); err != nil {
		return nil, portError("gRPC", "--bind HOST:PORT", bind, err)
	}
	if cfg.Role.isServer() {
		if err := n.startRaft(); err != nil {
			return nil, err
		}
	}
	n.grpcSrv = transport.NewServer(transport.Options{Security: n.sec, Public: pki.PublicMethods})
	n.registerServices(n.grpcSrv)
	n.grpcSrv.RegisterService(&pki.ServiceDesc, n.pki)
	n.jobs.start() // its loop ends with the node
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.grpcSrv.Serve(n.grpcLn) }()

	if n.ml, err = n.newMemberlist(r); err != nil {
		return nil, err
	}
	if len(cfg.Join) > 0 {
		if err := n.join(ctx, n.cfg.Join, n.cfg.JoinTimeout); err != nil {
			return nil, err
		}
	}
	// From now on the node rejoins by itself whenever it misses part of
	// the cluster: after a partition, or, restarted without --join,
	// through the peers it saved (they may be restarting too).
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.rejoinLoop() }()
	if cfg.DataDir != "" {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.savePeersLoop() }()
	}
	if n.raft != nil {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.leaderLoop() }()
		if cfg.BootstrapExpect > 0 {
			n.wg.Add(1)
			go func() { defer n.wg.Done(); n.bootstrapExpect() }()
		}
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.registerLoop() }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.workerLoop() }()
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.fenceLoop() }()
	ok = true
	n.log.Info("node started", "role", cfg.Role, "grpc", r.grpcAddr(), "gossip", r.gossipAddr(), "raft", n.raftAddrOrNone())
	return n, nil
}

// portError explains a port that could not be bound: in use (by another
// troupe node or program) or not permitted, and which flag picks another.
func portError(what, flag, addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s port: %s is already in use (another troupe node on this machine? each node needs its own gRPC port P and P+1, P+2): choose another with %s", what, addr, flag)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s port: not permitted to listen on %s (ports below 1024 need root): choose another with %s", what, addr, flag)
	}
	return fmt.Errorf("%s listen %s: %w", what, addr, err)
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

func (n *Node) raftAddrOrNone() string {
	if n.cfg.Role.isServer() {
		return n.r.raftAddr()
	}
	return "none (worker)"
}

// ID returns the node's ID.
func (n *Node) ID() string { return n.cfg.NodeID }

// Addr returns the node's gRPC address.
func (n *Node) Addr() string { return n.r.grpcAddr() }

// StopRequested is closed when a Stop RPC has drained the node; the daemon
// should then call Shutdown.
func (n *Node) StopRequested() <-chan struct{} { return n.stopReq }

// startRaft opens the stores and starts raft; a head node with no state
// bootstraps a one-server configuration.
func (n *Node) startRaft() error {
	dir := filepath.Join(n.cfg.DataDir, "raft")
	if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o700); err != nil {
		return fmt.Errorf("raft dir: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: newLogWriter(n.log, "raft"), DisableTime: true})
	ws, err := openWAL(filepath.Join(dir, "wal"), hlog.Named("wal"))
	if err != nil {
		return fmt.Errorf("raft log %s: %w", dir, err)
	}
	n.logStore = ws
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("raft snapshots %s: %w", dir, err)
	}
	raftBind := net.JoinHostPort(hostOf(n.cfg.BindAddr), strconv.Itoa(n.r.raftPort))
	ln, err := net.Listen("tcp", raftBind)
	if err != nil {
		return portError("raft", "--raft-port", raftBind, err)
	}
	adv, err := net.ResolveTCPAddr("tcp", n.r.raftAddr())
	if err != nil {
		ln.Close()
		return fmt.Errorf("raft address: %w", err)
	}
	stream := newAuthStreamLayer(ln, adv, n.sec, n.log)
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: 4, Timeout: 5 * time.Second, Logger: hlog.Named("transport")})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.NodeID)
	rc.Logger = hlog
	t := n.cfg.Timing.RaftTimeout
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = t, t, t/2
	rc.CommitTimeout = 5 * time.Millisecond
	rc.MaxAppendEntries = 512
	rc.BatchApplyCh = true
	rc.SnapshotThreshold = 16384
	rc.TrailingLogs = 10240
	n.fsm = scheduler.NewFSM()
	n.planner = scheduler.Planner{}

	existing, err := raft.HasExistingState(ws, ws, snaps)
	if err != nil {
		return fmt.Errorf("raft state: %w", err)
	}
	if n.raft, err = raft.NewRaft(rc, raftFSM{n.fsm}, ws, ws, snaps, n.trans); err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	if n.cfg.Role == RoleHead && !existing {
		boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: n.trans.LocalAddr()}}}
		if err := n.raft.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("bootstrap raft: %w", err)
		}
		n.log.Info("bootstrapped a new one-server raft cluster")
	} else if existing {
		n.log.Info("raft state found in data dir: rejoining with it", "dir", dir)
	}
	return nil
}

// join finds the gossip ports of the Join addresses over gRPC (which also
// checks the token: a wrong token fails here, clearly) and joins gossip,
// retrying until one of them answers or the timeout passes. Addresses that
// are this node itself are skipped (only those given: nothing to join).
//
// A node that cannot be reached is reported once at WARN, then every 10 s
// while retrying (backing off from 300 ms to 2 s), not at every attempt.
func (n *Node) join(ctx context.Context, addrs []string, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	delay := 300 * time.Millisecond
	var lastLog time.Time
	for {
		via, err := n.joinOnce(ctx, addrs)
		switch {
		case err == nil:
			n.log.Info("joined the cluster", "via", via)
			return nil
		case errors.Is(err, errOnlySelf):
			return nil
		case status.Code(errors.Unwrap(err)) == codes.Unauthenticated:
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: no node at %s answered within %v (is the address right, and a node running there?): %v",
				ErrJoin, strings.Join(addrs, ", "), timeout, err)
		}
		if lastLog.IsZero() || time.Since(lastLog) >= 10*time.Second {
			n.log.Warn("cannot reach the cluster yet: retrying", "join", strings.Join(addrs, ","), "elapsed", time.Since(start).Round(time.Second),
				"timeout", timeout, "err", err)
			lastLog = time.Now()
		} else {
			n.log.Debug("waiting to join", "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("join: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// ErrJoin: a starting node could not reach any of its join addresses
// within Config.JoinTimeout.
var ErrJoin = errors.New("cannot join the cluster")

func (n *Node) peerInfo(ctx context.Context, addr string) (*InfoResponse, error) {
	cc, err := n.peers.get(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp := new(InfoResponse)
	if err := cc.Invoke(ctx, "/"+ServiceName+"/Info", &InfoRequest{}, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// bootstrapExpect forms the raft cluster once BootstrapExpect servers with
// the same setting gossip with each other: each of them bootstraps the same
// configuration (sorted by ID), which raft accepts as one.
func (n *Node) bootstrapExpect() {
	want := n.cfg.BootstrapExpect
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		if addr, _ := n.raft.LeaderWithID(); addr != "" {
			return
		}
		var servers []raft.Server
		for id, m := range n.members.snapshot() {
			if m.state == memberlist.StateAlive && m.meta.Role.isServer() && m.meta.Expect == want && m.meta.Raft != "" {
				servers = append(servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(m.meta.Raft)})
			}
		}
		if len(servers) < want {
			continue
		}
		sortServers(servers)
		err := n.await(n.raft.BootstrapCluster(raft.Configuration{Servers: servers}))
		if errors.Is(err, raft.ErrCantBootstrap) {
			return // state already exists: this server is part of a cluster
		}
		if err != nil {
			n.log.Error("bootstrap-expect failed", "err", err)
			continue
		}
		n.log.Info("bootstrapped raft with the expected servers", "servers", len(servers))
		return
	}
}

// registerLoop commits this node's registration (retrying until a leader
// takes it).
func (n *Node) registerLoop() {
	labels := copyLabels(n.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[roleLabel] = string(n.cfg.Role)
	info := scheduler.NodeInfo{ID: scheduler.NodeID(n.cfg.NodeID), Address: n.r.grpcAddr(), Labels: labels,
		Resources: n.cfg.Resources, GPUs: n.cfg.GPUs, Topology: n.cfg.Topology}
	for attempt := 0; ; attempt++ {
		_, err := n.applyCommand(n.ctx, &scheduler.RegisterNode{Node: info, At: time.Now().UnixNano()})
		if err == nil {
			n.log.Info("node registered", "resources", n.cfg.Resources.String(), "gpus", len(n.cfg.GPUs))
			return
		}
		var we *api.Error
		if errors.As(err, &we) { // refused by the FSM: retrying will not help
			n.log.Error("node registration refused", "err", err)
			return
		}
		if attempt > 0 {
			n.log.Debug("registration waiting for a leader", "err", err)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) poke() {
	select {
	case n.trigger <- struct{}{}:
	default:
	}
}

// isLeader reports whether this node is the raft leader.
func (n *Node) isLeader() bool { return n.raft != nil && n.raft.State() == raft.Leader }

// leaderGRPC returns where to send writes: the leader's gRPC address on a
// server, any live server's on a worker ("" when unknown).
func (n *Node) leaderGRPC() string {
	if n.raft != nil {
		_, id := n.raft.LeaderWithID()
		if id == "" {
			return ""
		}
		if m, ok := n.members.get(string(id)); ok {
			return m.meta.GRPC
		}
		var addr string
		n.fsm.Read(func(s *scheduler.State) {
			if nd := s.Node(scheduler.NodeID(id)); nd != nil {
				addr = nd.Address
			}
		})
		return addr
	}
	return n.anyServer()
}

// anyServer returns the gRPC address of a live server (for workers).
func (n *Node) anyServer() string {
	best := ""
	for _, m := range n.members.snapshot() {
		if m.state == memberlist.StateAlive && m.meta.Role.isServer() && (best == "" || m.meta.GRPC < best) {
			best = m.meta.GRPC
		}
	}
	return best
}

// maxHops bounds forwarding: worker → server → leader.
const maxHops = 2

// errNotLeaderHere tells the forwarding node to retry: the request reached
// a node that is no longer the leader.
var errNotLeaderHere = status.Error(codes.Unavailable, "not the raft leader (retry)")

// onLeader runs local on the leader, or forwards with remote to the
// leader, retrying while there is none, for at most ApplyTimeout.
func (n *Node) onLeader(ctx context.Context, hops int, local func() error, remote func(cc *grpc.ClientConn) error) error {
	deadline := time.Now().Add(n.cfg.ApplyTimeout)
	var last error
	for {
		if n.isLeader() {
			err := local()
			if err == nil || !retriableLocal(err) {
				return err
			}
			last = err
		} else if hops >= maxHops {
			return errNotLeaderHere
		} else if addr := n.leaderGRPC(); addr != "" && addr != n.r.grpcAddr() {
			cc, err := n.peers.get(addr)
			if err == nil {
				err = remote(cc)
			}
			if err == nil || status.Code(err) != codes.Unavailable {
				return err
			}
			last = err
		}
		if time.Now().After(deadline) {
			if last == nil {
				last = errors.New("no leader known")
			}
			return transport.Status(codes.Unavailable, fmt.Errorf("%w after retrying for %v (last: %v)", ErrNoLeader, n.cfg.ApplyTimeout, last))
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func retriableLocal(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrEnqueueTimeout)
}

// applyLocal commits cmd on the leader.
func (n *Node) applyLocal(cmd []byte) (*ApplyResponse, error) {
	f := n.raft.Apply(cmd, n.cfg.ApplyTimeout)
	if err := n.await(f); err != nil {
		return nil, err
	}
	out := &ApplyResponse{Index: f.Index()}
	if r, ok := f.Response().(*scheduler.Response); ok && r != nil {
		out.Index = r.Index
		var be *scheduler.BatchError
		if errors.As(r.Err, &be) {
			for _, e := range be.Errs {
				out.BatchErrs = append(out.BatchErrs, api.Encode(e))
			}
		}
		out.Err = api.Encode(r.Err)
	}
	return out, nil
}

// Apply commits an encoded command through the leader (from this node or
// forwarded) and returns the outcome; ErrNoLeader only after the bounded
// retry.
func (n *Node) Apply(ctx context.Context, cmd []byte) (*ApplyResponse, error) {
	resp, err := n.apply(ctx, &ApplyRequest{Cmd: cmd})
	if err != nil {
		return nil, transport.FromStatus(err)
	}
	return resp, nil
}

func (n *Node) apply(ctx context.Context, r *ApplyRequest) (*ApplyResponse, error) {
	if len(r.Cmd) == 0 {
		return nil, status.Error(codes.InvalidArgument, "apply: empty command")
	}
	var out *ApplyResponse
	err := n.onLeader(ctx, r.Hops, func() error {
		node, end, kill := n.killTarget(r.Cmd)
		var err error
		out, err = n.applyLocal(r.Cmd)
		if err == nil && kill && out.Err == nil {
			n.endOn(ctx, node, &end) // kill.go: Kill returns once the actor is stopped
		}
		return err
	}, func(cc *grpc.ClientConn) error {
		out = new(ApplyResponse)
		return cc.Invoke(ctx, "/"+ServiceName+"/Apply", &ApplyRequest{Cmd: r.Cmd, Hops: r.Hops + 1}, out)
	})
	return out, err
}

// applyCommand encodes and commits c; the FSM's refusal is an error (a
// *api.Error wrapping the scheduler sentinel).
func (n *Node) applyCommand(ctx context.Context, c scheduler.Command) (uint64, error) {
	b, err := scheduler.EncodeCommand(c)
	if err != nil {
		return 0, err
	}
	resp, err := n.Apply(ctx, b)
	if err != nil {
		return 0, err
	}
	return resp.Index, resp.Err.AsError()
}

// Drain stops the node gracefully: it is marked draining through raft (no
// new placements), hands raft leadership to another server if it has it,
// stops its worker processes and leaves the gossip cluster, after which the leader marks it dead and
// its actors are restarted elsewhere or end as their restart policy says.
func (n *Node) Drain(ctx context.Context, reason string) error {
	if reason == "" {
		reason = "node stopped"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	if _, err := n.applyCommand(ctx, &scheduler.UpdateNodeState{Node: scheduler.NodeID(n.cfg.NodeID), State: scheduler.NodeDraining, Cause: reason, At: time.Now().UnixNano()}); err != nil {
		errs = append(errs, fmt.Errorf("mark draining: %w", err))
	}
	if n.isLeader() {
		cfg := n.raft.GetConfiguration()
		if cfg.Error() == nil && len(cfg.Configuration().Servers) > 1 {
			if err := n.await(n.raft.LeadershipTransfer()); err != nil {
				errs = append(errs, fmt.Errorf("leadership transfer: %w", err))
			}
		}
	}
	// Its actors stop before it leaves: the leader commits a drained node
	// dead as soon as it has left and restarts its actors elsewhere, and
	// they must not run twice. (The node is going away: nothing starts
	// here any more.)
	n.workers.stopAll()
	if n.ml != nil {
		if err := n.ml.Leave(2 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("leave gossip: %w", err))
		}
	}
	n.log.Info("node drained", "reason", reason)
	return errors.Join(errs...)
}

// Shutdown stops everything the node runs. It is safe to call twice.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() {
		n.workers.stopAll()
		n.cancel()
		var errs []error
		if n.grpcSrv != nil {
			done := make(chan struct{})
			go func() { n.grpcSrv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				n.grpcSrv.Stop()
			}
		} else if n.grpcLn != nil {
			n.grpcLn.Close()
		}
		if n.ml != nil {
			if err := n.ml.Shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("gossip shutdown: %w", err))
			}
		}
		close(n.raftDown)
		if n.raft != nil {
			if err := n.raft.Shutdown().Error(); err != nil {
				errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
			}
		}
		if n.trans != nil {
			n.trans.Close()
		}
		n.wg.Wait()
		if n.logStore != nil {
			if err := n.logStore.Close(); err != nil {
				errs = append(errs, fmt.Errorf("raft log close: %w", err))
			}
		}
		n.peers.close()
		n.shutdownErr = errors.Join(errs...)
		n.log.Info("node shut down")
	})
	return n.shutdownErr
}

// peerPool caches gRPC connections to other nodes.
type peerPool struct {
	opts  transport.Options
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newPeerPool(o transport.Options) *peerPool {
	return &peerPool{opts: o, conns: map[string]*grpc.ClientConn{}}
}

func (p *peerPool) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cc := p.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := transport.Dial(addr, p.opts)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = cc
	return cc, nil
}

func (p *peerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, cc := range p.conns {
		cc.Close()
		delete(p.conns, a)
	}
}
