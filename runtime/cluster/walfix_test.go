package cluster

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// TestWALTailTruncationRestart reproduces hashicorp/raft-wal#31 (a tail
// truncation followed by a restart leaves a sealed segment without index,
// whose entries cannot be read) and checks that openWAL reads them.
func TestWALTailTruncationRestart(t *testing.T) {
	logs := func(lo, hi uint64, term uint64) []*raft.Log {
		var out []*raft.Log
		for i := lo; i <= hi; i++ {
			out = append(out, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d term %d", i, term))})
		}
		return out
	}
	type store interface {
		raft.LogStore
		Close() error
	}
	scenario := func(dir string, open func(string) (store, error)) error {
		w, err := open(dir)
		if err != nil {
			return err
		}
		if err := w.StoreLogs(logs(1, 10, 1)); err != nil {
			return err
		}
		if err := w.DeleteRange(8, 10); err != nil { // raft clearing a conflicting suffix
			return err
		}
		if err := w.StoreLogs(logs(8, 12, 2)); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		w, err = open(dir) // restart
		if err != nil {
			return err
		}
		defer w.Close()
		for i := uint64(1); i <= 12; i++ {
			var l raft.Log
			if err := w.GetLog(i, &l); err != nil {
				return fmt.Errorf("entry %d after restart: %w", i, err)
			}
			want := uint64(1)
			if i >= 8 {
				want = 2
			}
			if l.Term != want || !strings.HasPrefix(string(l.Data), fmt.Sprintf("entry %d ", i)) {
				return fmt.Errorf("entry %d after restart: term %d data %q", i, l.Term, l.Data)
			}
		}
		return nil
	}
	// Plain raft-wal (with its own meta DB closed by hand: WAL.Close leaves it open).
	err := scenario(t.TempDir(), func(d string) (store, error) {
		meta := &metadb.BoltMetaDB{}
		w, err := wal.Open(d, wal.WithMetaStore(meta), wal.WithLogger(hclog.NewNullLogger()))
		if err != nil {
			return nil, err
		}
		return &walStore{WAL: w, meta: meta}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "no index block") {
		t.Logf("plain raft-wal no longer shows the bug (err = %v): the workaround may be dropped", err)
	}
	if err := scenario(t.TempDir(), func(d string) (store, error) { return openWAL(d, hclog.NewNullLogger()) }); err != nil {
		t.Fatalf("with the workaround: %v", err)
	}
}
