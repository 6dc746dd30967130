package scheduler

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// snapshotVersion is the first byte of an encoded state; bump it when the
// layout changes incompatibly.
const snapshotVersion = 1

// MarshalBinary encodes the whole state as a version byte plus msgpack of
// its nodes, actors, placement groups and jobs sorted by ID, so equal states
// encode to equal bytes.
func (s *State) MarshalBinary() ([]byte, error) { return s.freeze().MarshalBinary() }

// Frozen is a copy of the state for a snapshot, taken in O(actors) struct
// copies (no encoding, no sorting) so that the FSM's lock and raft's FSM
// goroutine are held only for the copy; the encoding, which took over a
// second with 100,000 actors and stalled every apply meanwhile, runs later
// in MarshalBinary (raft's Persist, on its snapshot goroutine). It shares
// only what never changes after creation (specs).
type Frozen struct{ snap snapshot }

func (s *State) freeze() *Frozen {
	z := &Frozen{snap: snapshot{Applied: s.d.Applied, Deaths: s.d.Deaths}}
	z.snap.Nodes = make([]*Node, 0, len(s.d.Nodes))
	for _, n := range s.d.Nodes {
		z.snap.Nodes = append(z.snap.Nodes, n.clone())
	}
	actors := make([]Actor, 0, len(s.d.Actors)) // one allocation for all
	z.snap.Actors = make([]*Actor, 0, len(s.d.Actors))
	for _, a := range s.d.Actors {
		actors = append(actors, *a)
		ca := &actors[len(actors)-1]
		ca.GPUs = append([]GPUAlloc(nil), a.GPUs...)
		z.snap.Actors = append(z.snap.Actors, ca)
	}
	z.snap.Groups = make([]*PlacementGroup, 0, len(s.d.Groups))
	for _, g := range s.d.Groups {
		z.snap.Groups = append(z.snap.Groups, cloneGroup(g))
	}
	z.snap.Jobs = make([]*Job, 0, len(s.d.Jobs))
	for _, j := range s.d.Jobs {
		cj := *j
		z.snap.Jobs = append(z.snap.Jobs, &cj)
	}
	return z
}

// MarshalBinary encodes the frozen state as State.MarshalBinary does.
func (z *Frozen) MarshalBinary() ([]byte, error) {
	snap := &z.snap
	sort.Slice(snap.Nodes, func(i, j int) bool { return snap.Nodes[i].ID < snap.Nodes[j].ID })
	sort.Slice(snap.Actors, func(i, j int) bool { return snap.Actors[i].Spec.ID < snap.Actors[j].Spec.ID })
	sort.Slice(snap.Groups, func(i, j int) bool { return snap.Groups[i].Spec.ID < snap.Groups[j].Spec.ID })
	sort.Slice(snap.Jobs, func(i, j int) bool { return snap.Jobs[i].Spec.ID < snap.Jobs[j].Spec.ID })
	var buf bytes.Buffer
	buf.WriteByte(snapshotVersion)
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(snap); err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return buf.Bytes(), nil
}

// UnmarshalBinary replaces s with a state encoded by MarshalBinary.
func (s *State) UnmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != snapshotVersion {
		return fmt.Errorf("decode state: %w: missing or unknown version byte", ErrMalformed)
	}
	var snap snapshot
	r := bytes.NewReader(b[1:])
	if err := msgpack.NewDecoder(r).Decode(&snap); err != nil {
		return fmt.Errorf("decode state: %w: %v", ErrMalformed, err)
	}
	if r.Len() != 0 {
		return fmt.Errorf("decode state: %w: %d trailing bytes", ErrMalformed, r.Len())
	}
	var d stateData
	d.init()
	d.Applied, d.Deaths = snap.Applied, snap.Deaths
	for _, n := range snap.Nodes {
		if n == nil || n.ID == "" || d.Nodes[n.ID] != nil {
			return fmt.Errorf("decode state: %w: missing or repeated node", ErrMalformed)
		}
		d.Nodes[n.ID] = n
	}
	for _, a := range snap.Actors {
		if a == nil || a.Spec.ID == "" || d.Actors[a.Spec.ID] != nil {
			return fmt.Errorf("decode state: %w: missing or repeated actor", ErrMalformed)
		}
		d.Actors[a.Spec.ID] = a
		if a.Spec.Name != "" && a.State != ActorDead {
			d.Names[nameKey(a.Spec.Namespace, a.Spec.Name)] = a.Spec.ID
		}
	}
	for _, g := range snap.Groups {
		if g == nil || g.Spec.ID == "" || d.Groups[g.Spec.ID] != nil {
			return fmt.Errorf("decode state: %w: missing or repeated placement group", ErrMalformed)
		}
		d.Groups[g.Spec.ID] = g
	}
	for _, j := range snap.Jobs {
		if j == nil || j.Spec.ID == "" || d.Jobs[j.Spec.ID] != nil {
			return fmt.Errorf("decode state: %w: missing or repeated job", ErrMalformed)
		}
		d.Jobs[j.Spec.ID] = j
	}
	tmp := State{d: d}
	if err := tmp.Check(); err != nil {
		return fmt.Errorf("decode state: %w", err)
	}
	*s = State{d: d}
	s.idx.dirty = true
	s.rebuildRelations()
	for _, a := range snap.Actors {
		if a.State == ActorDead {
			s.dead = append(s.dead, a.Spec.ID)
		}
	}
	sort.Slice(s.dead, func(i, j int) bool { return d.Actors[s.dead[i]].DeathSeq < d.Actors[s.dead[j]].DeathSeq })
	return nil
}

// FSM is the finite state machine of the control plane: it applies
// committed commands to a State, snapshots it and restores it. It is safe
// for concurrent use: the log applies entries while readers call Read.
// runtime/cluster adapts it to raft; this package does not import raft, so
// a program that only encodes commands (a driver) does not link it.
type FSM struct {
	mu sync.RWMutex
	st *State
	j  journal

	cmu     sync.Mutex
	changed chan struct{} // closed at the next apply; nil while nobody waits
}

// Changed returns a channel that is closed when the FSM next applies a
// command or restores a snapshot. To wait for a condition on the state
// without polling, take the channel, then Read, and if the condition does
// not hold yet, wait on the channel and repeat.
func (f *FSM) Changed() <-chan struct{} {
	f.cmu.Lock()
	defer f.cmu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}

func (f *FSM) notify() {
	f.cmu.Lock()
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
	f.cmu.Unlock()
}

// NewFSM returns an FSM over an empty state.
func NewFSM() *FSM {
	st := NewState()
	st.idx.ensure(st) // readers must never find the index stale
	return &FSM{st: st}
}

// Response is the outcome of one applied entry (what raft's
// ApplyFuture.Response() gives through the adapter).
type Response struct {
	// Err is nil when the command was applied; for a Batch with refused
	// entries it is a *BatchError.
	Err error
	// Index is the raft log index of the command.
	Index uint64
}

// Entry is one committed command of the log: its index and encoded bytes.
type Entry struct {
	Index uint64
	Data  []byte
}

// ApplyEntry decodes and applies one committed command and returns the
// outcome. The raft adapter (runtime/cluster) calls it for each command
// entry, so this package does not import raft.
func (f *FSM) ApplyEntry(index uint64, data []byte) *Response {
	c, err := DecodeCommand(data) // outside the lock: readers keep going
	f.mu.Lock()
	r := f.apply(index, c, err)
	f.mu.Unlock()
	f.notify()
	return r
}

// ApplyEntries applies the commands committed together under one lock
// acquisition, in order, and returns one outcome per entry.
func (f *FSM) ApplyEntries(entries []Entry) []*Response {
	out := make([]*Response, len(entries))
	cmds := make([]Command, len(entries))
	errs := make([]error, len(entries))
	for i, e := range entries {
		cmds[i], errs[i] = DecodeCommand(e.Data)
	}
	f.mu.Lock()
	for i, e := range entries {
		out[i] = f.apply(e.Index, cmds[i], errs[i])
	}
	f.mu.Unlock()
	f.notify()
	return out
}

func (f *FSM) apply(index uint64, c Command, decodeErr error) *Response {
	f.st.d.Applied = index
	if decodeErr != nil {
		return &Response{Err: decodeErr, Index: index}
	}
	err := f.st.Apply(c)
	// Keep the derived index fresh under the write lock, so planners reading
	// through Read never have to rebuild it concurrently.
	f.st.idx.ensure(f.st)
	f.j.add(index, c)
	return &Response{Err: err, Index: index}
}

// Read runs fn with the current state under a read lock; the leader plans
// inside it (Planner methods only read). fn must not keep or modify the
// state (clone it with State.Clone to keep it).
func (f *FSM) Read(fn func(*State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st)
}

// SnapshotBytes encodes the whole state (a consistent point in the log:
// the copy is taken under the read lock, the encoding runs without it).
func (f *FSM) SnapshotBytes() ([]byte, error) {
	b, err := f.Freeze().MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return b, nil
}

// Freeze copies the state under the read lock for a snapshot to encode
// later (Frozen.MarshalBinary), without holding up applies meanwhile.
func (f *FSM) Freeze() *Frozen {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.freeze()
}

// Restore replaces the state with a snapshot SnapshotBytes wrote.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("restore: read snapshot: %w", err)
	}
	st := NewState()
	if err := st.UnmarshalBinary(b); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	st.idx.ensure(st)
	f.mu.Lock()
	f.st = st
	f.j.reset(st.d.Applied)
	f.mu.Unlock()
	f.notify()
	return nil
}
