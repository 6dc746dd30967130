package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"troupe/scheduler"
)

// TestRejoinTargets: a node rejoins through the servers gossip says are
// gone, and through its join list and saved peers only when it is alone
// (a worker without a live server, a server without any live member).
func TestRejoinTargets(t *testing.T) {
	alive, dead := memberlist.StateAlive, memberlist.StateDead
	m := func(role Role, addr string, st memberlist.NodeStateType) member {
		return member{meta: memberMeta{Role: role, GRPC: addr}, state: st}
	}
	join := []string{"server-1:7370", "server-2:7370", "10.0.0.21:7370"}
	saved := []string{"10.0.0.12:7370", "10.0.0.22:7370"}
	for _, tc := range []struct {
		name  string
		role  Role
		view  map[string]member
		want  []string
		alone bool
	}{
		{"worker, whole view", RoleWorker, map[string]member{
			"w1": m(RoleWorker, "10.0.0.21:7370", alive),
			"s1": m(RoleServer, "10.0.0.11:7370", alive), "s2": m(RoleServer, "10.0.0.12:7370", alive)}, nil, false},
		{"worker, one server gone", RoleWorker, map[string]member{
			"w1": m(RoleWorker, "10.0.0.21:7370", alive),
			"s1": m(RoleServer, "10.0.0.11:7370", alive), "s2": m(RoleServer, "10.0.0.12:7370", dead)},
			[]string{"10.0.0.12:7370"}, false},
		{"worker cut off: every server gone", RoleWorker, map[string]member{
			"w1": m(RoleWorker, "10.0.0.21:7370", alive), "w2": m(RoleWorker, "10.0.0.22:7370", alive),
			"s1": m(RoleServer, "10.0.0.11:7370", dead), "s2": m(RoleServer, "10.0.0.12:7370", dead)},
			// its own address (in the join list) is left out; duplicates once
			[]string{"10.0.0.11:7370", "10.0.0.12:7370", "10.0.0.22:7370", "server-1:7370", "server-2:7370"}, true},
		{"worker that never saw a server", RoleWorker, map[string]member{"w1": m(RoleWorker, "10.0.0.21:7370", alive)},
			[]string{"10.0.0.12:7370", "10.0.0.22:7370", "server-1:7370", "server-2:7370"}, true},
		{"dead workers are their own business", RoleWorker, map[string]member{
			"w1": m(RoleWorker, "10.0.0.21:7370", alive), "w2": m(RoleWorker, "10.0.0.22:7370", dead),
			"s1": m(RoleServer, "10.0.0.11:7370", alive)}, nil, false},
		{"single server with workers only", RoleHead, map[string]member{
			"w1": m(RoleHead, "10.0.0.21:7370", alive), "w2": m(RoleWorker, "10.0.0.22:7370", alive)}, nil, false},
		{"server alone", RoleServer, map[string]member{
			"w1": m(RoleServer, "10.0.0.21:7370", alive), "w2": m(RoleWorker, "10.0.0.22:7370", dead)},
			[]string{"10.0.0.12:7370", "10.0.0.22:7370", "server-1:7370", "server-2:7370"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, alone := rejoinTargets(tc.role, "w1", "10.0.0.21:7370", tc.view, join, saved)
			if alone != tc.alone {
				t.Errorf("alone = %v, want %v", alone, tc.alone)
			}
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rejoinTargets = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestJoinSkipsSelfByID: a join address that is this node under another
// name (here localhost instead of 127.0.0.1) is recognised by node ID, so a
// node listed in its own --join does not count itself as the cluster.
func TestJoinSkipsSelfByID(t *testing.T) {
	const tok = "self-join"
	head := startNode(t, testConfig(t, "head", RoleHead, tok))
	c := testConfig(t, "s1", RoleServer, tok)
	c.Join = []string{head.Addr()}
	s1 := startNode(t, c)
	_, port, _ := net.SplitHostPort(s1.Addr())
	self := "localhost:" + port
	ctx := context.Background()
	if _, err := s1.joinOnce(ctx, []string{self}); !errors.Is(err, errOnlySelf) {
		t.Fatalf("joinOnce(own name) = %v, want errOnlySelf", err)
	}
	via, err := s1.joinOnce(ctx, []string{self, head.Addr()})
	if err != nil || !reflect.DeepEqual(via, []string{head.Addr()}) {
		t.Fatalf("joinOnce(own name, head) = %q, %v; want via the head only", via, err)
	}
	if err := s1.join(ctx, []string{self}, time.Second); err != nil {
		t.Fatalf("join with only its own name: %v, want nil (nothing to join)", err)
	}
}

// TestRejoinAfterServerComesBackAlone: the head is restarted on the same
// addresses with its raft state but without the peers it knew, so it
// gossips alone; memberlist would never bring the two together again (the
// head knows nobody, the worker declared the head dead). The worker, missing
// its server, rejoins it by itself, and the head commits it alive.
func TestRejoinAfterServerComesBackAlone(t *testing.T) {
	const tok = "rejoin"
	hc := testConfig(t, "head", RoleHead, tok)
	head := startNode(t, hc)
	wc := testConfig(t, "w1", RoleWorker, tok)
	wc.Join = []string{head.Addr()}
	w := startNode(t, wc)
	waitFor(t, "worker registered alive", 10*time.Second, func() bool { return nodeState(head.Status(), "w1") == "alive" })

	head.Shutdown()
	waitFor(t, "the worker to see the head gone", 10*time.Second, func() bool {
		m, ok := w.members.get("head")
		return ok && m.state != memberlist.StateAlive
	})
	if err := os.Remove(filepath.Join(hc.DataDir, peersFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	head2 := startNode(t, hc)
	waitFor(t, "head and worker to gossip again, the worker alive in the committed state", 30*time.Second, func() bool {
		m, ok := w.members.get("head")
		hm, hok := head2.members.get("w1")
		return ok && m.state == memberlist.StateAlive && hok && hm.state == memberlist.StateAlive &&
			nodeState(head2.Status(), "w1") == "alive"
	})
}

// TestServerNewAddressUpdated: a server that comes back on a new raft
// address (a container or pod restarted with a new IP) gets its address
// updated in the raft configuration by the leader, and replication reaches
// it there.
func TestServerNewAddressUpdated(t *testing.T) {
	const tok = "new-address"
	head := startNode(t, testConfig(t, "head", RoleHead, tok))
	var cfgs []Config
	var servers []*Node
	for _, id := range []string{"s1", "s2"} {
		c := testConfig(t, id, RoleServer, tok)
		c.Join = []string{head.Addr()}
		cfgs = append(cfgs, c)
		servers = append(servers, startNode(t, c))
	}
	waitFor(t, "3 voters", 10*time.Second, func() bool { return len(head.Status().Servers) == 3 })
	servers[1].Shutdown()
	waitFor(t, "s2 gone from the head's gossip view", 10*time.Second, func() bool {
		m, ok := head.members.get("s2")
		return ok && m.state != memberlist.StateAlive
	})
	c := cfgs[1]
	c.RaftPort = freePort(t)
	c.GossipPort = freePort(t)
	s2 := startNode(t, c)
	want := raft.ServerAddress("127.0.0.1:" + strconv.Itoa(c.RaftPort))
	addrOf := func(n *Node, id string) raft.ServerAddress {
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			return ""
		}
		for _, s := range f.Configuration().Servers {
			if s.ID == raft.ServerID(id) {
				return s.Address
			}
		}
		return ""
	}
	waitFor(t, "s2's new raft address in the leader's configuration", 20*time.Second, func() bool {
		for _, n := range []*Node{head, servers[0]} {
			if n.isLeader() {
				return addrOf(n, "s2") == want
			}
		}
		return false
	})
	// A write after the move reaches s2 at its new address.
	if _, err := head.applyCommand(context.Background(), &scheduler.UpdateNodeState{Node: "s1", State: scheduler.NodeDraining, Cause: "test", At: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s2 to replicate the write", 20*time.Second, func() bool { return nodeState(s2.Status(), "s1") == "draining" })
}

// TestAdvertiseHostName: --advertise takes a name, resolved once at start;
// one that does not resolve is a configuration error naming it.
func TestAdvertiseHostName(t *testing.T) {
	c := Config{NodeID: "n", Role: RoleWorker, Token: "t", Join: []string{"x:1"}, BindAddr: "0.0.0.0:7370", Advertise: "localhost"}
	r, err := c.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if r.host != "127.0.0.1" && r.host != "::1" {
		t.Errorf("advertise localhost resolved to %q", r.host)
	}
	c.Advertise = "not a host name"
	if _, err := c.normalize(); !errors.Is(err, ErrConfig) {
		t.Errorf("advertise %q: %v, want ErrConfig", c.Advertise, err)
	}
}
