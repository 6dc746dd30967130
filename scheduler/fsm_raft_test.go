package scheduler

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// The tests drive the FSM with raft's log entries, as runtime/cluster's
// adapter (raftFSM) does; these methods are that adapter for the tests
// (the scheduler itself does not import raft).

func (f *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	return f.ApplyEntry(l.Index, l.Data)
}

func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	var entries []Entry
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			entries = append(entries, Entry{Index: l.Index, Data: l.Data})
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

func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	b, err := f.SnapshotBytes()
	if err != nil {
		return nil, err
	}
	return &testSnapshot{data: b}, nil
}

type testSnapshot struct{ data []byte }

func (s *testSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *testSnapshot) Release() {}
