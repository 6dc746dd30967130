package scheduler

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// TestJournalCatchUp: a clone of the FSM's state taken at index k and
// brought forward by applying the journal's commands (k, n] encodes to the
// same bytes as the FSM's state at n, for every k of a random log (refused
// commands included); the journal answers false once it has forgotten
// commands, and after a restore for indexes before it.
func TestJournalCatchUp(t *testing.T) {
	log, _ := randomLog(t, 21, 300)
	f := NewFSM()
	var clones []*State
	for i, b := range log {
		f.Read(func(s *State) { clones = append(clones, s.Clone()) }) // state at index i
		f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: b})
	}
	want := fsmBytes(t, f)
	n := uint64(len(log))
	for k := 0; k < len(clones); k += 13 {
		cmds, ok := f.Journal(uint64(k), n)
		if !ok || len(cmds) != len(log)-k {
			t.Fatalf("journal (%d, %d]: %d commands, %v", k, n, len(cmds), ok)
		}
		c := clones[k]
		for _, cmd := range cmds {
			c.Apply(cmd) // same outcome as on the FSM, refusals included
		}
		c.d.Applied = n
		if got := snapshotBytes(t, c); !bytes.Equal(got, want) {
			t.Fatalf("clone at %d caught up to %d differs from the FSM", k, n)
		}
	}
	if cmds, ok := f.Journal(n, n); !ok || len(cmds) != 0 {
		t.Fatalf("empty range: %v %v", cmds, ok)
	}

	// Forgetting: after journalSize more commands, the start is gone.
	for i := 0; i < journalSize; i++ {
		b := MustEncode(&SubmitJob{Spec: JobSpec{ID: JobID(fmt.Sprint("j", i))}, At: 2})
		f.Apply(&raft.Log{Index: n + uint64(i) + 1, Type: raft.LogCommand, Data: b})
	}
	if _, ok := f.Journal(n-1, n+journalSize); ok {
		t.Fatal("journal claims commands it has forgotten")
	}
	if cmds, ok := f.Journal(n, n+journalSize); !ok || len(cmds) != journalSize {
		t.Fatalf("journal of the last %d: %d, %v", journalSize, len(cmds), ok)
	}

	// After a restore, only what follows the snapshot is known.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(readCloser{bytes.NewReader(sink.Bytes())}); err != nil {
		t.Fatal(err)
	}
	last := n + journalSize
	if _, ok := g.Journal(last-1, last); ok {
		t.Fatal("restored FSM claims commands from before its snapshot")
	}
	if cmds, ok := g.Journal(last, last); !ok || len(cmds) != 0 {
		t.Fatalf("restored FSM at its snapshot: %v %v", cmds, ok)
	}
}
