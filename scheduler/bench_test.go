package scheduler

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"

	"github.com/hashicorp/raft"
)

// benchCluster returns a state of n simulated 8-GPU nodes where each node
// has a random number (0..8) of its GPUs taken by earlier actors, so the
// index buckets are all populated as in a busy cluster.
func benchCluster(b *testing.B, n int, seed int64) *State { return busyCluster(b, n, seed, 0) }

// busyCluster is benchCluster with at least minUsed GPUs taken per node.
func busyCluster(b *testing.B, n int, seed int64, minUsed int) *State {
	b.Helper()
	s := NewState()
	for _, c := range SimCluster(n, 1) {
		if err := s.Apply(c); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewSource(seed))
	for i, node := range s.Nodes() {
		perm := rng.Perm(8)[:minUsed+rng.Intn(9-minUsed)]
		if len(perm) == 0 {
			continue
		}
		var allocs []GPUAlloc
		for _, g := range perm {
			allocs = append(allocs, GPUAlloc{Index: g, Fraction: 1})
		}
		spec := ActorSpec{ID: ActorID(fmt.Sprintf("fill-%d", i)), Request: Request{Resources: Resources{GPUs: float64(len(perm))}}}
		if err := s.Apply(&CreateActor{Spec: spec, Placement: &Placement{Node: node.ID, GPUs: allocs, Bundle: AnyBundle}}); err != nil {
			b.Fatal(err)
		}
	}
	s.idx.ensure(s)
	return s
}

func reportRate(b *testing.B, unit string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
}

// BenchmarkPlace measures placement decisions on a busy 1,000-node cluster
// of 8-GPU nodes: "decide" is Planner.Place alone; "cycle" also commits the
// decision (State.Apply of the CreateActor) and kills the actor placed 64
// decisions earlier, so the cluster stays equally busy.
func BenchmarkPlace(b *testing.B) {
	for _, gpus := range []float64{1, 8} {
		b.Run(fmt.Sprintf("decide/gpus=%g", gpus), func(b *testing.B) {
			s := benchCluster(b, 1000, 1)
			req := Request{Resources: Resources{MilliCPU: 1000, GPUs: gpus}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := (Planner{}).Place(s, req); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, "decisions/s")
		})
		b.Run(fmt.Sprintf("cycle/gpus=%g", gpus), func(b *testing.B) {
			s := benchCluster(b, 1000, 1)
			p := Planner{}
			const window = 64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c, err := p.CreateActor(s, ActorSpecN(i, gpus), 1)
				if err != nil || c.Placement == nil {
					b.Fatalf("create %d: %v %+v", i, err, c)
				}
				if err := s.Apply(c); err != nil {
					b.Fatal(err)
				}
				if i >= window {
					if err := s.Apply(&KillActor{Actor: ActorSpecN(i-window, gpus).ID}); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportRate(b, "decisions/s")
		})
	}
}

// BenchmarkPlaceScaling measures one decision as the cluster grows from 10
// to 10,000 busy 8-GPU nodes, for a 1-GPU and an 8-GPU actor, and for an
// 8-GPU actor that cannot be placed now (pending) or ever (infeasible: 8
// GPUs on one NVLink island of 4): those paths scan every node to name the
// closest one.
func BenchmarkPlaceScaling(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		s := benchCluster(b, n, 2)
		for _, gpus := range []float64{1, 8} {
			b.Run(fmt.Sprintf("gpus=%g/nodes=%d", gpus, n), func(b *testing.B) {
				req := Request{Resources: Resources{MilliCPU: 1000, GPUs: gpus}}
				for i := 0; i < b.N; i++ {
					if _, err := (Planner{}).Place(s, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("infeasible/nodes=%d", n), func(b *testing.B) {
			req := Request{Resources: Resources{MilliCPU: 1000, GPUs: 8}, MinLinkScore: ScoreNVLink}
			for i := 0; i < b.N; i++ {
				if _, err := (Planner{}).Place(s, req); !errors.Is(err, ErrInfeasible) {
					b.Fatalf("8 GPUs on one 4-GPU NVLink island: %v", err)
				}
			}
		})
		full := busyCluster(b, n, 2, 1)
		b.Run(fmt.Sprintf("pending/nodes=%d", n), func(b *testing.B) {
			req := Request{Resources: Resources{MilliCPU: 1000, GPUs: 8}}
			for i := 0; i < b.N; i++ {
				if _, err := (Planner{}).Place(full, req); !errors.Is(err, ErrPending) {
					b.Fatalf("8 GPUs where every node has one taken: %v", err)
				}
			}
		})
	}
}

// BenchmarkFSMApplyBatch measures FSM.Apply of Batch commands holding
// batch CreateActor commands each (decided beforehand by the planner, as
// the leader would), on a 1,000-node cluster.
func BenchmarkFSMApplyBatch(b *testing.B) {
	for _, batch := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("createActor/batch=%d", batch), func(b *testing.B) {
			leader := NewState()
			for _, c := range SimCluster(1000, 1) {
				_ = leader.Apply(c)
			}
			base := NewFSM()
			for i, c := range SimCluster(1000, 1) {
				base.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: MustEncode(c)})
			}
			snap, err := base.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			var sink memSink
			_ = snap.Persist(&sink)
			// The cluster holds 8,000 1-GPU actors: plan that many, then replay.
			const total = 8000
			var logs [][]byte
			for first := 0; first+batch <= total; first += batch {
				bt, err := PlanActorBatch(Planner{}, leader, first, batch, 1, 1)
				if err != nil {
					b.Fatal(err)
				}
				logs = append(logs, MustEncode(bt))
			}
			f := NewFSM()
			restore := func() {
				if err := f.Restore(readCloser{bytes.NewReader(sink.Bytes())}); err != nil {
					b.Fatal(err)
				}
			}
			restore()
			b.ResetTimer()
			next := 0
			for i := 0; i < b.N; i++ {
				if next == len(logs) {
					b.StopTimer()
					restore()
					next = 0
					b.StartTimer()
				}
				resp := f.Apply(&raft.Log{Index: uint64(i + 2000), Type: raft.LogCommand, Data: logs[next]}).(*Response)
				if resp.Err != nil {
					b.Fatal(resp.Err)
				}
				next++
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "commands/s")
		})
	}
}

// BenchmarkGroupCreateRemove measures a placement group (4 bundles of 1 GPU)
// created and removed through FSM.Apply on a busy 1,000-node cluster:
// "apply" replays a decided create and its remove; "plan+apply" also
// decides the placement each time, as the leader does.
func BenchmarkGroupCreateRemove(b *testing.B) {
	for _, st := range []Strategy{Pack, StrictPack, Spread, StrictSpread} {
		b.Run(fmt.Sprintf("apply/%v", st), func(b *testing.B) {
			s := benchCluster(b, 1000, 3)
			f := &FSM{st: s}
			c, err := Planner{}.CreateGroup(s, GroupSpecN(0, 4, 1, st), 1)
			if err != nil || c.Bundles == nil {
				b.Fatal(err)
			}
			create, remove := MustEncode(c), MustEncode(&RemovePlacementGroup{Group: c.Spec.ID})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if r := f.Apply(&raft.Log{Type: raft.LogCommand, Data: create}).(*Response); r.Err != nil {
					b.Fatal(r.Err)
				}
				if r := f.Apply(&raft.Log{Type: raft.LogCommand, Data: remove}).(*Response); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			reportRate(b, "groups/s")
		})
		b.Run(fmt.Sprintf("plan+apply/%v", st), func(b *testing.B) {
			s := benchCluster(b, 1000, 3)
			f := &FSM{st: s}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var c *CreatePlacementGroup
				var err error
				f.Read(func(s *State) { c, err = Planner{}.CreateGroup(s, GroupSpecN(i, 4, 1, st), 1) })
				if err != nil || c.Bundles == nil {
					b.Fatal(err)
				}
				if r := f.Apply(&raft.Log{Type: raft.LogCommand, Data: MustEncode(c)}).(*Response); r.Err != nil {
					b.Fatal(r.Err)
				}
				if r := f.Apply(&raft.Log{Type: raft.LogCommand, Data: MustEncode(&RemovePlacementGroup{Group: c.Spec.ID})}).(*Response); r.Err != nil {
					b.Fatal(r.Err)
				}
			}
			reportRate(b, "groups/s")
		})
	}
}

// BenchmarkNodeDied measures the leader's rescheduling decision when one
// node of a busy 1,000-node cluster (about 1,000 actors) dies: cloning the
// state, releasing the node and re-placing its actors.
func BenchmarkNodeDied(b *testing.B) {
	s := benchCluster(b, 1000, 4)
	for _, a := range s.Actors() {
		a.Spec.MaxRestarts = -1 // every lost actor is re-placed
	}
	nodes := s.Nodes()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmds, _, err := Planner{}.NodeDied(s, nodes[i%len(nodes)].ID, "bench", 1)
		if err != nil || len(cmds) == 0 {
			b.Fatal(err)
		}
	}
}
