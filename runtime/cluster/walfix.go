package cluster

import (
	"errors"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// indexRebuildingFiler works around a raft-wal v0.4.0 bug
// (hashicorp/raft-wal#31): a tail truncation (raft clearing a conflicting
// log suffix, which happens after a leader is killed with uncommitted
// entries) marks the old tail segment sealed without writing its index
// block. That works until the process restarts: then every entry of that
// segment reads as "sealed segment has no index block", so the server can
// neither restart cleanly nor send those entries to a lagging follower.
// For such a segment this filer opens it the way raft-wal recovers a tail,
// scanning the frames to rebuild the offsets, instead of trusting the
// missing index. Segments sealed normally are opened as before.
type indexRebuildingFiler struct{ *segment.Filer }

// Open implements types.SegmentFiler.
func (f indexRebuildingFiler) Open(info types.SegmentInfo) (types.SegmentReader, error) {
	if !info.SealTime.IsZero() && info.IndexStart == 0 {
		return f.Filer.RecoverTail(info)
	}
	return f.Filer.Open(info)
}

// walStore is the raft log and stable store. It owns the WAL's meta
// database because raft-wal v0.4.0's Close leaves it open (and its file
// locked), so the same process could never reopen the directory.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

// Close closes the WAL and its meta database.
func (s *walStore) Close() error {
	return errors.Join(s.WAL.Close(), s.meta.Close())
}

// openWAL opens the raft log and stable store in dir with the fixes above.
func openWAL(dir string, log hclog.Logger) (*walStore, error) {
	dir = filepath.Clean(dir)
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithSegmentFiler(indexRebuildingFiler{segment.NewFiler(dir, fs.New())}), wal.WithMetaStore(meta), wal.WithLogger(log))
	if err != nil {
		meta.Close()
		return nil, err
	}
	return &walStore{WAL: w, meta: meta}, nil
}
