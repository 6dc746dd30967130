package scheduler

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// recordsState returns a 3-node state holding live placement records
// (actors without Args, never started, as the placement benchmark leaves
// them) on n1, plus 4 actors on n1 that n1 must launch.
func recordsState(t testing.TB, records int) *State {
	t.Helper()
	s := NewState()
	for i := 1; i <= 3; i++ {
		mustApply(t, s, &RegisterNode{Node: NodeInfo{ID: NodeID(fmt.Sprintf("n%d", i)), Address: "h:1",
			Resources: Resources{MilliCPU: 4000, MemoryBytes: 4 << 30}}, At: 1})
	}
	for i := 0; i < records+4; i++ {
		spec := ActorSpec{ID: ActorID(fmt.Sprintf("r%07d", i)), Class: "Bench"}
		if i >= records {
			spec.Args = []byte{1}
		}
		mustApply(t, s, &CreateActor{Spec: spec, Placement: &Placement{Node: "n1", Bundle: AnyBundle}, At: 2})
	}
	s.idx.ensure(s)
	return s
}

// TestPlacementCostIndependentOfLiveActors holds the property behind the
// placement throughput: what runs per commit (the placer's plan and apply
// of a create, a node asking what to start, the leader's reconcile asking
// whether anything waits and planning what does) allocates the same with 100,000 live actors as
// with 100. These used to cost O(live actors): StartingOn listed every
// placement record on the node (cloned and sent after every commit), and
// the reconcile sorted every actor to find waiting ones.
func TestPlacementCostIndependentOfLiveActors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a state of 100,000 actors")
	}
	perOp := func(records int) map[string]float64 {
		s := recordsState(t, records)
		out := map[string]float64{}
		out["StartingOn"] = testing.AllocsPerRun(20, func() {
			if got := len(s.StartingOn("n1")); got != 4 {
				t.Fatalf("StartingOn(n1) lists %d actors, want the 4 with something to launch", got)
			}
		})
		out["HasWaiting"] = testing.AllocsPerRun(20, func() {
			if s.HasWaiting() {
				t.Fatal("HasWaiting with every actor placed")
			}
		})
		next := 0
		out["plan+apply"] = testing.AllocsPerRun(50, func() {
			next++
			c, err := Planner{}.CreateActor(s, ActorSpec{ID: ActorID(fmt.Sprintf("z%07d", next))}, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(c); err != nil {
				t.Fatal(err)
			}
		})
		// One actor that fits nowhere waits: the leader plans what waits at
		// every reconcile.
		mustApply(t, s, &CreateActor{Spec: ActorSpec{ID: "huge", Request: Request{Resources: Resources{MilliCPU: 1 << 40}}},
			PendingReason: "does not fit", At: 4})
		out["PlanPending"] = testing.AllocsPerRun(20, func() {
			cmds, waiting := Planner{}.PlanPending(s, 5)
			if len(cmds) != 0 || len(waiting) != 1 || waiting[0].Actor != "huge" {
				t.Fatalf("PlanPending = %v, %v; want nothing decided, huge waiting", cmds, waiting)
			}
		})
		return out
	}
	small, large := perOp(100), perOp(100_000)
	for op, a := range small {
		// A little slack for amortized map growth; O(actors) work would
		// allocate thousands of times more.
		if b := large[op]; b > a+4 {
			t.Errorf("%s allocates %.1f times with 100,000 live actors, %.1f with 100", op, b, a)
		}
	}
	t.Logf("allocations per op, 100 / 100,000 live actors: %v / %v", small, large)
}

// BenchmarkSnapshotEncode measures encoding the whole state (raft's
// snapshot, taken every SnapshotThreshold entries) with many live actors:
// the time applies wait when it runs on the FSM goroutine under its lock.
func BenchmarkSnapshotEncode(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("actors=%d", n), func(b *testing.B) {
			s := recordsState(b, n)
			var size int
			var frozen, encode time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				z := s.freeze() // what raft's FSM goroutine waits for
				t1 := time.Now()
				buf, err := z.MarshalBinary() // on raft's snapshot goroutine
				if err != nil {
					b.Fatal(err)
				}
				frozen, encode = frozen+t1.Sub(t0), encode+time.Since(t1)
				size = len(buf)
			}
			b.ReportMetric(float64(size), "bytes")
			b.ReportMetric(float64(frozen.Microseconds())/1000/float64(b.N), "ms-freeze")
			b.ReportMetric(float64(encode.Microseconds())/1000/float64(b.N), "ms-encode")
		})
	}
}

// TestFrozenIsACopy: a snapshot frozen at some point of random logs
// encodes the state of that point, whatever was applied after the freeze
// (the encoding runs while the FSM goes on applying).
func TestFrozenIsACopy(t *testing.T) {
	for seed := int64(41); seed <= 43; seed++ {
		log, _ := randomLog(t, seed, 400)
		f := NewFSM()
		var z *Frozen
		var want []byte
		for i, b := range log {
			f.ApplyEntry(uint64(i+1), b)
			if i == len(log)/2 {
				z = f.Freeze()
				var err error
				if want, err = f.SnapshotBytes(); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, err := z.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: the frozen snapshot changed with later applies", seed)
		}
		if now, _ := f.SnapshotBytes(); bytes.Equal(now, want) {
			t.Fatalf("seed %d: the second half of the log changed nothing: the test shows nothing", seed)
		}
	}
}
