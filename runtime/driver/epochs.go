package driver

import (
	"sync"
	"sync/atomic"
)

// epochs is the newest incarnation of each actor this driver has seen in
// the committed cluster state (a lookup, or the fate of a lost call). A
// reply of an older incarnation is refused: once the driver knows the
// cluster replaced an incarnation, nothing that incarnation answers is
// taken as the actor's (actors.ErrStaleIncarnation), whatever the old
// node, cut off but still running it, does meanwhile.
type epochs struct{ m sync.Map } // actor ID → *atomic.Int64

// of returns the actor's entry, made at its first use; a reference keeps
// it, so its calls read it without a map lookup.
func (e *epochs) of(id string) *atomic.Int64 {
	v, ok := e.m.Load(id)
	if !ok {
		v, _ = e.m.LoadOrStore(id, new(atomic.Int64))
	}
	return v.(*atomic.Int64)
}

// see records that incarnation inc of the actor exists.
func (e *epochs) see(id string, inc int) {
	n := e.of(id)
	for {
		cur := n.Load()
		if int64(inc) <= cur || n.CompareAndSwap(cur, int64(inc)) {
			return
		}
	}
}

// newest returns the newest incarnation seen of the actor (0 if none).
func (e *epochs) newest(id string) int {
	if v, ok := e.m.Load(id); ok {
		return int(v.(*atomic.Int64).Load())
	}
	return 0
}
