package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// memberMeta is what a node gossips about itself; it must stay under
// memberlist's 512-byte limit (checked in encode).
type memberMeta struct {
	ID     string `msgpack:"i"`
	Role   Role   `msgpack:"r"`
	GRPC   string `msgpack:"g"`
	Raft   string `msgpack:"f,omitempty"`
	Expect int    `msgpack:"e,omitempty"` // bootstrap-expect
}

func (m memberMeta) encode() ([]byte, error) {
	b, err := msgpack.Marshal(&m)
	if err != nil {
		return nil, fmt.Errorf("node meta: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: node meta is %d bytes, memberlist allows %d", ErrConfig, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

func decodeMeta(b []byte) (memberMeta, error) {
	var m memberMeta
	if err := msgpack.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("node meta: %w", err)
	}
	return m, nil
}

// gossipKey derives memberlist's AES-256 key from the cluster token, so a
// node without the token can neither read nor inject gossip.
func gossipKey(token string) []byte {
	k := sha256.Sum256([]byte("troupe-gossip:" + token))
	return k[:]
}

// member is the last known state of one gossip member.
type member struct {
	meta  memberMeta
	state memberlist.NodeStateType // StateAlive or StateDead (gone)
	since time.Time
}

// members tracks the gossip view from memberlist's events and pokes the
// node when something changed.
type members struct {
	mu      sync.Mutex
	byID    map[string]*member
	changed func()
	// revived, if set, is told the gRPC address of a member that gossip
	// sees alive again after it was gone (connections to it may be
	// backing off).
	revived func(grpcAddr string)
	meta    []byte
	log     func(msg string, args ...any)
}

// NodeMeta implements memberlist.Delegate.
func (m *members) NodeMeta(limit int) []byte { return m.meta }

// NotifyMsg implements memberlist.Delegate (no user messages).
func (m *members) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate.
func (m *members) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate.
func (m *members) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (m *members) MergeRemoteState(buf []byte, join bool) {}

func (m *members) set(n *memberlist.Node, st memberlist.NodeStateType) {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		m.log("ignoring gossip member with bad metadata", "member", n.Name, "err", err)
		return
	}
	m.mu.Lock()
	old := m.byID[n.Name]
	if old == nil || old.state != st || old.meta != meta {
		m.byID[n.Name] = &member{meta: meta, state: st, since: time.Now()}
	}
	back := old != nil && old.state != memberlist.StateAlive && st == memberlist.StateAlive
	m.mu.Unlock()
	if back && m.revived != nil {
		m.revived(meta.GRPC)
	}
	m.changed()
}

// NotifyJoin implements memberlist.EventDelegate.
func (m *members) NotifyJoin(n *memberlist.Node) { m.set(n, memberlist.StateAlive) }

// NotifyLeave implements memberlist.EventDelegate. It fires for graceful
// leaves and failures alike (memberlist does not say which in the event):
// a node that left gracefully marked itself draining through raft first,
// which is how the leader tells the two apart.
func (m *members) NotifyLeave(n *memberlist.Node) { m.set(n, memberlist.StateDead) }

// NotifyUpdate implements memberlist.EventDelegate.
func (m *members) NotifyUpdate(n *memberlist.Node) { m.set(n, n.State) }

// snapshot returns a copy of the view.
func (m *members) snapshot() map[string]member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]member, len(m.byID))
	for k, v := range m.byID {
		out[k] = *v
	}
	return out
}

func (m *members) get(id string) (member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.byID[id]
	if !ok {
		return member{}, false
	}
	return *v, true
}

// newMemberlist builds and starts the gossip layer.
func (n *Node) newMemberlist(r resolved) (*memberlist.Memberlist, error) {
	c := memberlist.DefaultLANConfig()
	c.Name = n.cfg.NodeID
	c.BindAddr = hostOf(n.cfg.BindAddr) // may be 0.0.0.0; others reach us at the advertised host
	c.BindPort = r.gossipPort
	c.AdvertiseAddr = r.host
	c.AdvertisePort = r.gossipPort
	c.SecretKey = gossipKey(n.cfg.Token)
	c.GossipVerifyIncoming, c.GossipVerifyOutgoing = true, true
	t := n.cfg.Timing
	c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult, c.GossipInterval = t.ProbeInterval, t.ProbeTimeout, t.SuspicionMult, t.GossipInterval
	// A node that died may come back under its name at a new address (a
	// container or pod restarted with a new IP): memberlist refuses the
	// new address as a conflict unless the old one has been dead this
	// long (its default, 0, refuses forever).
	c.DeadNodeReclaimTime = n.rejoinBase()
	c.Delegate = n.members
	c.Events = n.members
	n.members.revived = n.peers.resetBackoff
	lw := newLogWriter(n.log, "memberlist")
	n.junk = &gossipJunk{log: n.log, now: time.Now}
	lw.filter = n.junk.filter
	c.Logger = log.New(lw, "", 0)
	ml, err := memberlist.Create(c)
	if err != nil {
		// memberlist does not wrap its listen errors: probe the port to
		// say which flag to change when it is taken.
		addr := net.JoinHostPort(r.host, strconv.Itoa(r.gossipPort))
		if l, perr := net.Listen("tcp", addr); perr != nil {
			return nil, portError("gossip", "--gossip-port", addr, perr)
		} else {
			l.Close()
		}
		return nil, fmt.Errorf("gossip on %s:%s: %w", r.host, strconv.Itoa(r.gossipPort), err)
	}
	return ml, nil
}

// resetBackoff makes the next call to addr try to connect at once instead
// of waiting out gRPC's reconnect backoff (up to two minutes after a long
// partition).
func (p *peerPool) resetBackoff(addr string) {
	p.mu.Lock()
	cc := p.conns[addr]
	p.mu.Unlock()
	if cc != nil {
		cc.ResetConnectBackoff()
	}
}

// errOnlySelf: every join address turned out to be this node itself.
var errOnlySelf = errors.New("every join address is this node")

// joinOnce asks each address (in parallel) for its gossip address over
// gRPC, which also checks the token, and joins gossip through those that
// answered. An address that turns out to be this node (by node ID, so a
// DNS name or a second interface of this node counts too) is skipped;
// errOnlySelf when no other address was given. An unauthenticated answer
// is returned as such, so the caller can stop retrying.
func (n *Node) joinOnce(ctx context.Context, addrs []string) ([]string, error) {
	type answer struct {
		addr string
		info *InfoResponse
		err  error
	}
	answers := make([]answer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		answers[i].addr = addr
		if addr == n.r.grpcAddr() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.peers.resetBackoff(addr)
			answers[i].info, answers[i].err = n.peerInfo(ctx, addr)
		}()
	}
	wg.Wait()
	var gossip, via []string
	var errs []error
	for _, a := range answers {
		switch {
		case a.err != nil:
			if status.Code(a.err) == codes.Unauthenticated {
				return nil, fmt.Errorf("join %s: %w", a.addr, a.err)
			}
			errs = append(errs, fmt.Errorf("join %s: %w", a.addr, a.err))
		case a.info == nil, a.info.NodeID == n.cfg.NodeID: // this node
		default:
			gossip = append(gossip, a.info.GossipAddr)
			via = append(via, a.addr)
		}
	}
	if len(gossip) == 0 {
		if len(errs) == 0 {
			return nil, errOnlySelf
		}
		return nil, errors.Join(errs...)
	}
	if _, err := n.ml.Join(gossip); err != nil {
		return nil, fmt.Errorf("gossip join %v: %w", gossip, err)
	}
	return via, nil
}

// Rejoin intervals: a node missing part of its cluster retries joining
// every rejoinBase at first, doubling while it fails, up to four times
// that (10 s with LAN timers); a node that is alone (a worker without a
// server) keeps retrying every rejoinBase, since it can do nothing until
// it is back. An attempt is a few gRPC calls, and a partition's end should
// be noticed within seconds.
func (n *Node) rejoinBase() time.Duration {
	return max(5*n.cfg.Timing.ProbeInterval, 500*time.Millisecond)
}

// rejoinTargets returns the gRPC addresses a node should join through now,
// or none when its gossip view is whole. Memberlist heals a partition by
// itself only while both sides still gossip to the members they declared
// dead (GossipToTheDeadTime), so a node rejoins actively, as serf does:
// through every server it has seen that gossip says is gone, and, when it
// sees no live server besides itself (a worker) or no live member at all
// (a server), through its configured join addresses and saved peers too.
func rejoinTargets(self Role, selfID, selfAddr string, view map[string]member, join, saved []string) (targets []string, alone bool) {
	var out []string
	liveServer, liveOther := false, false
	for id, m := range view {
		if id == selfID {
			continue
		}
		alive := m.state == memberlist.StateAlive
		liveOther = liveOther || alive
		if m.meta.Role.isServer() {
			if alive {
				liveServer = true
			} else if m.meta.GRPC != "" {
				out = append(out, m.meta.GRPC)
			}
		}
	}
	alone = !liveOther || (!self.isServer() && !liveServer)
	if alone {
		out = append(append(out, join...), saved...)
	}
	sort.Strings(out)
	uniq := out[:0]
	for i, a := range out {
		if a != selfAddr && (i == 0 || a != out[i-1]) {
			uniq = append(uniq, a)
		}
	}
	return uniq, alone
}

// rejoinLoop keeps the node's gossip view whole: whenever it misses a
// server (or, alone, the whole cluster), it joins again through the
// addresses rejoinTargets names, with a backoff while nobody answers. It
// is what brings a node back after a network partition, and a node
// restarted without --join back through its saved peers.
func (n *Node) rejoinLoop() {
	base := n.rejoinBase()
	tick := time.NewTicker(base)
	defer tick.Stop()
	delay := base
	var next, warned time.Time
	missing := false
	for {
		targets, alone := rejoinTargets(n.cfg.Role, n.cfg.NodeID, n.r.grpcAddr(), n.members.snapshot(), n.cfg.Join, n.loadPeers())
		switch {
		case len(targets) == 0:
			if missing {
				n.log.Info("gossip view whole again")
			}
			missing, delay, next, warned = false, base, time.Time{}, time.Time{}
		case time.Now().Before(next):
		default:
			if !missing {
				n.log.Info("missing part of the cluster: rejoining", "via", targets)
			}
			missing = true
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			via, err := n.joinOnce(ctx, targets)
			cancel()
			switch {
			case err != nil && !alone:
				delay = min(2*delay, 4*base)
				n.log.Debug("rejoin failed", "via", targets, "err", err, "retry in", delay)
			case err != nil:
				// Alone, the node can do nothing but retry: say so once a
				// minute, not at every attempt.
				delay = base
				if warned.IsZero() || time.Since(warned) >= time.Minute {
					n.log.Warn("cannot reach any other node of the cluster: retrying", "via", targets, "every", base, "err", err)
					warned = time.Now()
				} else {
					n.log.Debug("rejoin failed", "via", targets, "err", err)
				}
			default:
				// Joined: memberlist settles who is alive (each side refutes
				// the other's verdict); join again soon if it has not.
				delay = base
				n.log.Info("rejoined gossip", "via", via)
			}
			next = time.Now().Add(delay)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}
