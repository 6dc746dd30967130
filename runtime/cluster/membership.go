package cluster

import (
	"crypto/sha256"
	"fmt"
	"log"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/vmihailenco/msgpack/v5"
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
	m.mu.Unlock()
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
	c.Delegate = n.members
	c.Events = n.members
	c.Logger = log.New(newLogWriter(n.log, "memberlist"), "", 0)
	ml, err := memberlist.Create(c)
	if err != nil {
		return nil, fmt.Errorf("gossip on %s:%s: %w", r.host, strconv.Itoa(r.gossipPort), err)
	}
	return ml, nil
}
