package scheduler

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/hashicorp/raft"
)

// testCluster registers six nodes with different shapes.
func testCluster() []Command {
	nodes := []NodeInfo{
		SimNode("dgx-1", 64, 1<<40, NVSwitchTopology(8, 12)),
		SimNode("dgx-2", 64, 1<<40, NVSwitchTopology(8, 12)),
		SimNode("isl-1", 32, 512<<30, IslandsTopology(2, 4, 2, ScoreCrossCPU)),
		SimNode("isl-2", 32, 512<<30, IslandsTopology(2, 4, 2, ScoreCrossCPU)),
		SimNode("pcie-1", 16, 256<<30, PCIeTopology(2, 2, 2)),
		SimNode("cpu-1", 16, 64<<30, nil),
	}
	nodes[5].Resources.Custom = CustomResources{"license": 2}
	var cmds []Command
	for _, n := range nodes {
		cmds = append(cmds, &RegisterNode{Node: n, At: 1})
	}
	return cmds
}

// randomLog drives a leader state with seeded random requests, releases,
// failures and placement groups, decided by the Planner, checking the
// invariants after every step. It returns every command proposed (refused
// ones included: followers must refuse them too) encoded, and the leader.
func randomLog(t testing.TB, seed int64, steps int) ([][]byte, *State) {
	rng := rand.New(rand.NewSource(seed))
	p := Planner{Seed: uint64(seed)}
	s := NewState()
	var log [][]byte
	at := int64(1)
	propose := func(c Command) error {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatalf("encode %T: %v", c, err)
		}
		log = append(log, b)
		return s.ApplyBytes(b)
	}
	for _, c := range testCluster() {
		if err := propose(c); err != nil {
			t.Fatal(err)
		}
	}
	gpuChoices := []float64{0, 0.25, 0.5, 1, 1, 2, 4, 8}
	nActors, nGroups := 0, 0
	nodes := []NodeID{"dgx-1", "dgx-2", "isl-1", "isl-2", "pcie-1", "cpu-1"}
	pickActor := func(pred func(*Actor) bool) *Actor {
		var c []*Actor
		for _, a := range s.Actors() {
			if pred(a) {
				c = append(c, a)
			}
		}
		if len(c) == 0 {
			return nil
		}
		return c[rng.Intn(len(c))]
	}
	for step := 0; step < steps; step++ {
		at++
		var err error
		switch r := rng.Intn(100); {
		case r < 35:
			nActors++
			spec := ActorSpec{ID: ActorID(fmt.Sprintf("a%04d", nActors)), MaxRestarts: rng.Intn(3) - 1,
				Request: Request{Resources: Resources{MilliCPU: int64(rng.Intn(4000)), MemoryBytes: int64(rng.Intn(8)) << 30, GPUs: gpuChoices[rng.Intn(len(gpuChoices))]}}}
			if nActors%3 != 0 { // most have something to launch; the rest are placement records (no rng: logs stay as they were)
				spec.Args = []byte{byte(nActors)}
			}
			if rng.Intn(10) == 0 {
				spec.Request.Resources.Custom = CustomResources{"license": 1}
			}
			if rng.Intn(4) == 0 {
				spec.Request.Strategy = Spread
			}
			if js := s.Jobs(); len(js) > 0 && rng.Intn(2) == 0 {
				spec.JobID, spec.Detached = js[rng.Intn(len(js))].Spec.ID, rng.Intn(4) == 0
			}
			if rng.Intn(6) == 0 {
				spec.Name = fmt.Sprintf("name-%d", rng.Intn(5))
			}
			if rng.Intn(8) == 0 {
				spec.Request.Affinity = &Affinity{Node: nodes[rng.Intn(len(nodes))], Soft: rng.Intn(2) == 0}
			}
			if gs := s.Groups(); len(gs) > 0 && rng.Intn(4) == 0 {
				g := gs[rng.Intn(len(gs))]
				spec.Request.Group, spec.Request.Bundle = g.Spec.ID, rng.Intn(len(g.Bundles)+1)-1
				spec.Request.Resources = Resources{MilliCPU: 100, GPUs: []float64{0, 0.25, 1}[rng.Intn(3)]}
			}
			var c *CreateActor
			c, err = p.CreateActor(s, spec, at)
			if err == nil {
				err = propose(c)
			}
		case r < 45:
			if a := pickActor(func(a *Actor) bool { return a.Node != "" && a.State != ActorAlive }); a != nil {
				err = propose(&ActorStarted{Actor: a.Spec.ID, Incarnation: a.Restarts, Address: "w:1", At: at})
			}
		case r < 58:
			if a := pickActor(func(a *Actor) bool { return a.State != ActorDead }); a != nil {
				if rng.Intn(2) == 0 {
					err = propose(&ActorDied{Actor: a.Spec.ID, Incarnation: a.Restarts, Cause: "crash", At: at})
				} else {
					err = propose(&KillActor{Actor: a.Spec.ID, Restart: rng.Intn(3) == 0, At: at})
				}
			}
		case r < 66:
			nGroups++
			spec := GroupSpec{ID: GroupID(fmt.Sprintf("g%03d", nGroups)), Strategy: Strategy(rng.Intn(4))}
			for i := rng.Intn(4); i >= 0; i-- {
				spec.Bundles = append(spec.Bundles, Resources{MilliCPU: 500, GPUs: []float64{0.5, 1, 2}[rng.Intn(3)]})
			}
			var c *CreatePlacementGroup
			c, err = p.CreateGroup(s, spec, at)
			if err == nil {
				err = propose(c)
			}
		case r < 71:
			if gs := s.Groups(); len(gs) > 0 {
				err = propose(&RemovePlacementGroup{Group: gs[rng.Intn(len(gs))].Spec.ID, At: at})
			}
		case r < 76:
			id := nodes[rng.Intn(len(nodes))]
			st := []NodeState{NodeAlive, NodeAlive, NodeDead, NodeDraining, NodeSuspect}[rng.Intn(5)]
			if st == NodeDead {
				var cmds []Command
				cmds, _, err = p.NodeDied(s, id, "test kill", at)
				if err == nil {
					var bt *Batch
					if bt, err = NewBatch(cmds...); err == nil {
						err = propose(bt)
					}
				}
			} else {
				err = propose(&UpdateNodeState{Node: id, State: st, At: at})
			}
		case r < 86:
			cmds, _ := p.PlanPending(s, at)
			if len(cmds) > 0 {
				var bt *Batch
				if bt, err = NewBatch(cmds...); err == nil {
					err = propose(bt)
				}
			}
		case r < 88:
			err = propose(&SubmitJob{Spec: JobSpec{ID: JobID(fmt.Sprintf("j%d", step))}, At: at})
		case r < 90:
			if js := s.Jobs(); len(js) > 0 {
				err = propose(&JobFinished{Job: js[rng.Intn(len(js))].Spec.ID, State: JobSucceeded, At: at})
			}
		case r < 91:
			i := rng.Intn(len(nodes))
			if err = propose(&RemoveNode{Node: nodes[i], At: at}); err == nil {
				err = propose(testCluster()[i])
			}
		default:
			// A command with a stale incarnation or unknown ID must be refused.
			err = propose(&ActorStarted{Actor: "nope", At: at})
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("unknown actor: %v", err)
			}
			err = nil
		}
		if err != nil && !errors.Is(err, ErrInfeasible) && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
			t.Fatalf("step %d: unexpected error %v", step, err)
		}
		// Planner decisions are applied right away, so they must never be
		// refused for not fitting.
		var be *BatchError
		if errors.As(err, &be) {
			t.Fatalf("step %d: planned batch refused: %v", step, err)
		}
		checkInvariants(t, s)
	}
	return log, s
}

func TestRandomRequestsNeverOvercommit(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			_, s := randomLog(t, seed, 400)
			placed := 0
			for _, a := range s.Actors() {
				if a.Node != "" {
					placed++
				}
			}
			if placed == 0 {
				t.Fatal("nothing placed: the test exercises nothing")
			}
			// Releasing everything restores every node to entirely free.
			at := int64(1 << 40)
			for _, a := range s.Actors() {
				if a.State != ActorDead {
					mustApply(t, s, &KillActor{Actor: a.Spec.ID, At: at})
				}
			}
			for _, g := range s.Groups() {
				mustApply(t, s, &RemovePlacementGroup{Group: g.Spec.ID, At: at})
			}
			fresh := NewState()
			mustApply(t, fresh, testCluster()...)
			for _, n := range s.Nodes() {
				want := fresh.Node(n.ID)
				if !bytes.Equal(encodeNodeFree(t, n), encodeNodeFree(t, want)) {
					t.Fatalf("node %s not restored: free %v GPUs %v", n.ID, n.Free, n.GPUs)
				}
			}
		})
	}
}

func encodeNodeFree(t testing.TB, n *Node) []byte {
	c := n.clone()
	c.State, c.UpdatedAt, c.Cause, c.Drained = NodeAlive, 0, "", false
	s := NewState()
	s.d.Nodes[c.ID] = c
	return snapshotBytes(t, s)
}

func applyLog(t testing.TB, f *FSM, log [][]byte, from uint64) {
	t.Helper()
	for i, b := range log {
		resp := f.Apply(&raft.Log{Index: from + uint64(i), Type: raft.LogCommand, Data: b})
		if _, ok := resp.(*Response); !ok {
			t.Fatalf("entry %d: response %T", i, resp)
		}
	}
}

func fsmBytes(t testing.TB, f *FSM) []byte {
	var b []byte
	f.Read(func(s *State) { b = snapshotBytes(t, s) })
	return b
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { m.cancelled = true; return nil }
func (m *memSink) Close() error  { return nil }

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

func TestFSMDeterminismAndSnapshotRestore(t *testing.T) {
	for seed := int64(11); seed <= 14; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			log, leader := randomLog(t, seed, 300)
			a, b := NewFSM(), NewFSM()
			applyLog(t, a, log, 1)
			// b gets the same log through ApplyBatch, in chunks as raft would.
			for i := 0; i < len(log); i += 7 {
				var chunk []*raft.Log
				for j := i; j < i+7 && j < len(log); j++ {
					chunk = append(chunk, &raft.Log{Index: uint64(j + 1), Type: raft.LogCommand, Data: log[j]})
				}
				chunk = append(chunk, &raft.Log{Index: 0, Type: raft.LogNoop})
				resps := b.ApplyBatch(chunk)
				if len(resps) != len(chunk) || resps[len(resps)-1] != nil {
					t.Fatalf("ApplyBatch responses %v", resps)
				}
			}
			ab, bb := fsmBytes(t, a), fsmBytes(t, b)
			if !bytes.Equal(ab, bb) {
				t.Fatal("two FSMs applying the same log differ")
			}
			leader.d.Applied = uint64(len(log))
			if !bytes.Equal(ab, snapshotBytes(t, leader)) {
				t.Fatal("followers differ from the leader that planned the log")
			}
			// Snapshot half way, restore into a new FSM, apply the rest: it
			// must end equal to the FSM that applied everything.
			half := len(log) / 2
			c := NewFSM()
			applyLog(t, c, log[:half], 1)
			snap, err := c.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			var sink memSink
			if err := snap.Persist(&sink); err != nil {
				t.Fatal(err)
			}
			snap.Release()
			d := NewFSM()
			if err := d.Restore(readCloser{bytes.NewReader(sink.Bytes())}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fsmBytes(t, c), fsmBytes(t, d)) {
				t.Fatal("restored state differs from the snapshotted one")
			}
			applyLog(t, d, log[half:], uint64(half)+1)
			if !bytes.Equal(ab, fsmBytes(t, d)) {
				t.Fatal("restored FSM diverged after applying the rest of the log")
			}
			d.Read(func(s *State) { checkInvariants(t, s) })
		})
	}
}

func TestFSMRefusesGarbage(t *testing.T) {
	f := NewFSM()
	for _, data := range [][]byte{nil, {0}, {200, 1, 2}, {byte(CmdCreateActor), 0xc1}, append(MustEncode(&SubmitJob{Spec: JobSpec{ID: "j"}}), 0)} {
		resp := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}).(*Response)
		if resp.Err == nil {
			t.Errorf("data %x applied", data)
		}
	}
	if err := f.Restore(readCloser{bytes.NewReader([]byte{9, 9})}); err == nil {
		t.Error("restore accepted garbage")
	}
	if f.Apply(&raft.Log{Type: raft.LogNoop}) != nil {
		t.Error("non-command entry produced a response")
	}
}

// TestFSMConcurrentReaders applies a log while readers plan through Read;
// run with -race to check that planning never writes to the shared state.
func TestFSMConcurrentReaders(t *testing.T) {
	log, _ := randomLog(t, 21, 150)
	f := NewFSM()
	done := make(chan struct{})
	errs := make(chan error, 2)
	for r := 0; r < 2; r++ {
		go func() {
			p := Planner{}
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				f.Read(func(s *State) {
					_, _ = p.Place(s, Request{Resources: Resources{GPUs: 2}})
					_, _ = p.PlaceGroup(s, GroupSpecN(1, 2, 1, StrictPack))
					_ = s.Nodes()
				})
			}
		}()
	}
	applyLog(t, f, log, 1)
	close(done)
	for r := 0; r < 2; r++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
