package objstore

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"troupe/actors"
)

// Errors of fetches and releases. Each is wrapped with the object's ID and
// owner.
var (
	// ErrFreed: the owner freed the object (no reference remained).
	ErrFreed = errors.New("freed by its owner (no reference remained)")
	// ErrUnknown: the owner never held an object with this ID and key (or
	// it restarted, or freed it long ago).
	ErrUnknown = errors.New("unknown to its owner")
	// ErrUnreachable: the owner could not be reached or the transfer broke.
	ErrUnreachable = errors.New("owner unreachable")
)

// InlineMax is the size from which a worker keeps a result in its Store and
// replies a reference: smaller results travel inline in the reply, as the
// fast common case.
const InlineMax = 256 << 10

// freedMemory is how many freed IDs a Store remembers to tell ErrFreed from
// ErrUnknown.
const freedMemory = 16384

// Store holds one process's objects with reference counts.
type Store struct {
	owner string

	mu    sync.Mutex
	objs  map[ID]*object
	bytes int64
	freed map[ID]struct{} // recently freed IDs
	ring  []ID            // freed IDs in order, for forgetting the oldest
	next  int
	// epochs is the newest incarnation seen of each actor whose results
	// the store takes (Fence, PutFenced), so a replaced incarnation's late
	// results are refused.
	//
	// It holds an entry per actor that runs in this process, and a
	// bounded memory of the ones that ended here. Fence makes or raises
	// an entry: an incarnation starts here, or a call proves a newer one
	// exists. Retire marks it retired when no incarnation of the actor
	// runs here any more (killed, dead, replaced); a later Fence (a
	// restart here) makes it live again. Of the retired entries the store
	// keeps the last retiredMemory and forgets older ones, so the table
	// stays bounded however many actors a process hosts over its life.
	//
	// Forgetting loses no fence that matters. A retired entry still
	// refuses the late results of its older incarnations, and it is kept
	// while others end here, retiredMemory of them; only then is it
	// forgotten. A put after that can only come from an incarnation that
	// ended here long before (a method that ran on past its instance's
	// end), and it is taken as one of an actor the store never saw:
	// PutFenced makes no entry, so the table does not grow, and the
	// result still goes only to the call that asked for it, whose caller
	// refuses an incarnation older than the newest it has seen (the
	// driver's epochs), or, for an actor dead for good, gets the result of
	// its last incarnation, which death does not supersede. The object
	// made for it, if the caller refuses it, is released with the
	// process's store.
	epochs  map[string]uint64
	retired map[string]uint64 // retired actor → the sequence number of its retirement
	// retiredRing is the retired actors in order (at most retiredMemory,
	// then overwritten from retiredNext); an element whose sequence number
	// no longer matches retired[tag] was made live again since.
	retiredRing []retiredTag
	retiredNext int
	retiredSeq  uint64
}

// retiredTag is an element of Store.retiredRing.
type retiredTag struct {
	tag string
	seq uint64
}

// retiredMemory is how many retired actors' epochs a Store remembers.
const retiredMemory = 4096

type object struct {
	data    []byte
	key     Key
	refs    int
	created int64  // Unix nanoseconds
	tag     string // who made it (PutTagged), for listings
}

// NewStore returns an empty store whose objects are served at owner (the
// transfer address that Refs name).
func NewStore(owner string) *Store {
	return &Store{owner: owner, objs: map[ID]*object{}, freed: map[ID]struct{}{}}
}

// Owner is the transfer address the store's Refs name.
func (s *Store) Owner() string { return s.owner }

// Put keeps data (not copied: the caller must not modify it) as a new
// object with one reference and returns the reference.
func (s *Store) Put(data []byte) Ref { return s.PutTagged(data, "") }

// PutTagged is Put with a tag saying who made the object (an actor ID),
// shown by List.
func (s *Store) PutTagged(data []byte, tag string) Ref {
	s.mu.Lock()
	return s.putLocked(data, tag)
}

// putLocked stores an object; s.mu is held, and released before it returns.
func (s *Store) putLocked(data []byte, tag string) Ref {
	id, key := newIDKey()
	now := time.Now().UnixNano()
	s.objs[id] = &object{data: data, key: key, refs: 1, created: now, tag: tag}
	s.bytes += int64(len(data))
	s.mu.Unlock()
	global.stored.Add(1)
	global.held.Add(1)
	global.heldBytes.Add(int64(len(data)))
	return Ref{ID: id, Key: key, Owner: s.owner, Size: int64(len(data))}
}

// Fence records that incarnation epoch of the actor tag exists: puts of
// older incarnations of that actor are refused from now on (PutFenced).
// It never lowers what the store has seen.
func (s *Store) Fence(tag string, epoch uint64) {
	s.mu.Lock()
	s.fenceLocked(tag, epoch)
	s.mu.Unlock()
}

func (s *Store) fenceLocked(tag string, epoch uint64) {
	if s.epochs == nil {
		s.epochs = map[string]uint64{}
	}
	if e, ok := s.epochs[tag]; !ok || epoch > e {
		s.epochs[tag] = epoch
	}
	delete(s.retired, tag)
}

// Retire records that no incarnation of the actor tag runs in this
// process any more. Its epoch is kept, refusing its older incarnations'
// puts, among the last retiredMemory actors retired, then forgotten
// (Store.epochs); a Fence of the actor keeps it again.
func (s *Store) Retire(tag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.epochs[tag]; !ok {
		return
	}
	if s.retired == nil {
		s.retired = map[string]uint64{}
	}
	s.retiredSeq++
	s.retired[tag] = s.retiredSeq
	el := retiredTag{tag, s.retiredSeq}
	if len(s.retiredRing) < retiredMemory {
		s.retiredRing = append(s.retiredRing, el)
		return
	}
	old := s.retiredRing[s.retiredNext]
	if seq, ok := s.retired[old.tag]; ok && seq == old.seq {
		delete(s.retired, old.tag)
		delete(s.epochs, old.tag)
	}
	s.retiredRing[s.retiredNext] = el
	s.retiredNext = (s.retiredNext + 1) % retiredMemory
}

// Epochs returns how many actors' epochs the store holds, and how many
// of those are retired.
func (s *Store) Epochs() (held, retired int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.epochs), len(s.retired)
}

// PutFenced is PutTagged for a result of incarnation epoch of the actor
// tag: refused with an error wrapping actors.ErrStaleIncarnation when the
// store has seen a newer incarnation of that actor (Fence, or a put of
// one after a Fence), so a replaced incarnation's late results never
// become objects. A put of an actor with no epoch here (never fenced, or
// retired long ago and forgotten) is taken and makes none.
func (s *Store) PutFenced(data []byte, tag string, epoch uint64) (Ref, error) {
	s.mu.Lock()
	if e, ok := s.epochs[tag]; ok {
		if epoch < e {
			s.mu.Unlock()
			return Ref{}, fmt.Errorf("put of actor %s's incarnation %d at %s: incarnation %d exists: %w", tag, epoch, s.owner, e, actors.ErrStaleIncarnation)
		}
		s.epochs[tag] = epoch
	}
	return s.putLocked(data, tag), nil
}

// lookup finds a live object; s.mu must be held.
func (s *Store) lookup(id ID, key Key) (*object, error) {
	o := s.objs[id]
	if o == nil || subtle.ConstantTimeCompare(o.key[:], key[:]) != 1 {
		if _, ok := s.freed[id]; ok && o == nil {
			return nil, fmt.Errorf("object %s at %s: %w", id, s.owner, ErrFreed)
		}
		return nil, fmt.Errorf("object %s at %s: %w", id, s.owner, ErrUnknown)
	}
	return o, nil
}

// Get returns an object's bytes (the store's own slice: read only) without
// taking a reference.
func (s *Store) Get(id ID, key Key) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup(id, key)
	if err != nil {
		return nil, err
	}
	return o.data, nil
}

// Retain adds a reference to an object.
func (s *Store) Retain(id ID, key Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup(id, key)
	if err != nil {
		return err
	}
	o.refs++
	return nil
}

// Release drops a reference; the object is freed when none remains.
func (s *Store) Release(id ID, key Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup(id, key)
	if err != nil {
		return err
	}
	s.unref(id, o)
	return nil
}

// acquire returns an object's bytes with a reference held for a transfer;
// done gives it back.
func (s *Store) acquire(id ID, key Key) (data []byte, done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := s.lookup(id, key)
	if err != nil {
		return nil, nil, err
	}
	o.refs++
	return o.data, func() {
		s.mu.Lock()
		s.unref(id, o)
		s.mu.Unlock()
	}, nil
}

// unref drops one reference of o; s.mu must be held.
func (s *Store) unref(id ID, o *object) {
	o.refs--
	if o.refs > 0 {
		return
	}
	delete(s.objs, id)
	s.bytes -= int64(len(o.data))
	global.freed.Add(1)
	global.held.Add(-1)
	global.heldBytes.Add(-int64(len(o.data)))
	o.data = nil
	if len(s.ring) < freedMemory {
		s.ring = append(s.ring, id)
	} else {
		delete(s.freed, s.ring[s.next])
		s.ring[s.next] = id
		s.next = (s.next + 1) % freedMemory
	}
	s.freed[id] = struct{}{}
}

// Len is the number of objects held.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objs)
}

// Bytes is the total size of the objects held.
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// ObjectInfo describes one held object for listings; it carries no key,
// so it grants no access.
type ObjectInfo struct {
	ID        string `json:"id"`
	Size      int64  `json:"size_bytes"`
	Refs      int    `json:"refs"`
	CreatedAt int64  `json:"created_at"`
	Tag       string `json:"tag,omitempty"`
}

// List describes up to max objects held (all when max ≤ 0), ordered by ID,
// and how many are held in all.
func (s *Store) List(max int) (list []ObjectInfo, total int) {
	s.mu.Lock()
	ids := make([]ID, 0, len(s.objs))
	for id := range s.objs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i][:], ids[j][:]) < 0 })
	total = len(ids)
	if max > 0 && len(ids) > max {
		ids = ids[:max]
	}
	list = make([]ObjectInfo, 0, len(ids))
	for _, id := range ids {
		o := s.objs[id]
		list = append(list, ObjectInfo{ID: id.String(), Size: int64(len(o.data)), Refs: o.refs, CreatedAt: o.created, Tag: o.tag})
	}
	s.mu.Unlock()
	return list, total
}
