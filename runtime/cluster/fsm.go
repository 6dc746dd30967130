package cluster

import (
	"fmt"

	"github.com/hashicorp/raft"

	"troupe/scheduler"
)

// raftFSM adapts scheduler.FSM to raft (raft.BatchingFSM). The scheduler
// does not import raft, so programs that link it to encode commands (a
// driver) do not link raft through it.
type raftFSM struct{ *scheduler.FSM }

var _ raft.BatchingFSM = raftFSM{}

// Apply implements raft.FSM: it applies a LogCommand entry and returns a
// *scheduler.Response. Other entry types are ignored (nil response).
func (f raftFSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	return f.ApplyEntry(l.Index, l.Data)
}

// ApplyBatch implements raft.BatchingFSM: the commands raft commits
// together are applied under one lock acquisition.
func (f raftFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	entries := make([]scheduler.Entry, 0, len(logs))
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			entries = append(entries, scheduler.Entry{Index: l.Index, Data: l.Data})
		}
	}
	resps := f.ApplyEntries(entries)
	k := 0
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			out[i] = resps[k]
			k++
		}
	}
	return out
}

// Snapshot implements raft.FSM. It runs on raft's FSM goroutine, so every
// apply waits for it: it only copies the state (scheduler.FSM.Freeze), and
// Persist, on raft's snapshot goroutine, encodes the copy.
func (f raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{frozen: f.Freeze()}, nil
}

type fsmSnapshot struct{ frozen *scheduler.Frozen }

// Persist encodes the copied state and writes it to the sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := s.frozen.MarshalBinary()
	if err == nil {
		_, err = sink.Write(b)
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release does nothing: the snapshot holds its own copy.
func (s *fsmSnapshot) Release() {}
