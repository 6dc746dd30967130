package scheduler

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkScratchUpdate compares the two ways a leader keeps its planning
// copy of the state current after another writer committed one command
// (an ActorStarted) on an FSM holding 1,000 nodes and 10,000 actors:
// cloning the whole state, or applying the journal's command to the copy.
func BenchmarkScratchUpdate(b *testing.B) {
	f := NewFSM()
	var idx uint64
	apply := func(c Command) {
		idx++
		if r := f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: MustEncode(c)}).(*Response); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	for _, c := range SimCluster(1000, 1) {
		apply(c)
	}
	const actors = 10000
	var batch *Batch
	f.Read(func(s *State) {
		var err error
		if batch, err = PlanActorBatch(Planner{}, s.Clone(), 0, actors, 0, 2); err != nil {
			b.Fatal(err)
		}
	})
	apply(batch)
	for _, mode := range []string{"clone", "journal"} {
		b.Run(mode, func(b *testing.B) {
			var scratch *State
			f.Read(func(s *State) { scratch = s.Clone() })
			at := idx
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				apply(&ActorStarted{Actor: ActorID(fmt.Sprintf("actor-%08d", i%actors)), Incarnation: 0, Address: fmt.Sprint("w", i), At: 3})
				if mode == "clone" {
					f.Read(func(s *State) { scratch = s.Clone(); scratch.idx.ensure(scratch) })
				} else {
					cmds, ok := f.Journal(at, idx)
					if !ok {
						b.Fatal("journal lost commands")
					}
					for _, c := range cmds {
						scratch.Apply(c)
					}
				}
				at = idx
			}
		})
	}
}
