package cluster

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"troupe/scheduler"
)

// inmemRaft is one raft server with in-memory stores and transport.
type inmemRaft struct {
	r     *raft.Raft
	fsm   *scheduler.FSM
	trans *raft.InmemTransport
	logs  *raft.InmemStore
	snaps *raft.InmemSnapshotStore
}

func newInmemCluster(t *testing.T, n int) []*inmemRaft {
	t.Helper()
	var out []*inmemRaft
	var servers []raft.Server
	for i := 0; i < n; i++ {
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("s%d", i)))
		out = append(out, &inmemRaft{fsm: scheduler.NewFSM(), trans: trans, logs: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore()})
		servers = append(servers, raft.Server{ID: raft.ServerID(addr), Address: addr})
	}
	for _, a := range out {
		for _, b := range out {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
	for i, s := range out {
		c := raft.DefaultConfig()
		c.LocalID = servers[i].ID
		c.Logger = hclog.NewNullLogger()
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout, c.CommitTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond, 5*time.Millisecond
		if err := raft.BootstrapCluster(c, s.logs, s.logs, s.snaps, s.trans, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(c, raftFSM{s.fsm}, s.logs, s.logs, s.snaps, s.trans)
		if err != nil {
			t.Fatal(err)
		}
		s.r = r
		t.Cleanup(func() { r.Shutdown().Error() })
	}
	return out
}

func inmemLeader(t *testing.T, rs []*inmemRaft) *inmemRaft {
	t.Helper()
	var l *inmemRaft
	waitFor(t, "an in-memory leader", 5*time.Second, func() bool {
		for _, s := range rs {
			if s.r.State() == raft.Leader {
				l = s
				return true
			}
		}
		return false
	})
	return l
}

func stateBytes(t *testing.T, f *scheduler.FSM) []byte {
	var b []byte
	var err error
	f.Read(func(s *scheduler.State) { b, err = s.MarshalBinary() })
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFSMWiring: scheduler commands committed through raft reach every
// server's FSM identically; a refused command comes back in the Response;
// a server restored from a snapshot holds the same state.
func TestFSMWiring(t *testing.T) {
	rs := newInmemCluster(t, 3)
	l := inmemLeader(t, rs)
	apply := func(c scheduler.Command) *scheduler.Response {
		t.Helper()
		f := l.r.Apply(mustEncode(c), time.Second)
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		return f.Response().(*scheduler.Response)
	}
	if r := apply(&scheduler.RegisterNode{Node: scheduler.NodeInfo{ID: "n1", Resources: scheduler.Resources{MilliCPU: 2000}}, At: 1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	var st *scheduler.State
	l.fsm.Read(func(s *scheduler.State) { st = s.Clone() })
	c, err := scheduler.Planner{}.CreateActor(st, scheduler.ActorSpec{ID: "a", Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 1500}}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r := apply(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	// The same placement again no longer fits: the FSM refuses it on every
	// server alike.
	c.Spec.ID = "b"
	if r := apply(c); r.Err == nil {
		t.Fatal("over-committing placement accepted")
	}
	if err := l.r.Barrier(time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	want := stateBytes(t, l.fsm)
	for _, s := range rs {
		waitFor(t, "replication", 2*time.Second, func() bool { return bytes.Equal(stateBytes(t, s.fsm), want) })
	}
	// Snapshot on the leader and restore it into a fresh FSM.
	if err := l.r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	list, err := l.snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("snapshots: %v %v", list, err)
	}
	_, rc, err := l.snaps.Open(list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	fresh := scheduler.NewFSM()
	if err := fresh.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateBytes(t, fresh), want) {
		t.Fatal("restored state differs from the leader's")
	}
}
