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
	// epochs is the newest incarnation seen of each actor whose objects
	// the store keeps (PutFenced, Fence).
	epochs map[string]uint64
}

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
}

// PutFenced is PutTagged for a result of incarnation epoch of the actor
// tag: refused with an error wrapping actors.ErrStaleIncarnation when the
// store has seen a newer incarnation of that actor (Fence, or a put of
// one), so a replaced incarnation's late results never become objects.
func (s *Store) PutFenced(data []byte, tag string, epoch uint64) (Ref, error) {
	s.mu.Lock()
	if e, ok := s.epochs[tag]; ok && epoch < e {
		s.mu.Unlock()
		return Ref{}, fmt.Errorf("put of actor %s's incarnation %d at %s: incarnation %d exists: %w", tag, epoch, s.owner, e, actors.ErrStaleIncarnation)
	}
	s.fenceLocked(tag, epoch)
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
