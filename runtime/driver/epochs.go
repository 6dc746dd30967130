package driver

import (
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// epochs is the newest incarnation of each actor this driver has seen in
// the committed cluster state (a lookup, or the fate of a lost call). A
// reply of an older incarnation is refused: once the driver knows the
// cluster replaced an incarnation, nothing that incarnation answers is
// taken as the actor's (actors.ErrStaleIncarnation), whatever the old
// node, cut off but still running it, does meanwhile.
//
// The table shares one *epoch among the driver's references to an actor,
// so what one of them learns fences the calls of all. It holds each entry
// weakly, and drops it
//
//   - when the actor is committed dead (a kill through a reference, or a
//     lookup that finds it dead: killed, or out of restarts): forget;
//   - when no reference to the actor remains (the entry's cleanup).
//
// So it holds at most one entry per actor that is alive and referenced,
// however many actors a job creates and kills. Neither drop loses a
// fence:
//
//   - every reference keeps its own *epoch, and a reply is checked
//     against the epoch of the reference that sent the call (the call's
//     closure holds the reference), never against the table. An entry
//     with no reference left can fence nothing: no call is in flight
//     through it. A reference made later (GetActor) looks the actor up,
//     which sets its epoch to the committed incarnation, before it sends
//     anything.
//   - death is final and does not raise the epoch: no newer incarnation
//     can appear for a reference that outlives the drop to learn about,
//     and a lookup that finds the actor dead records its last incarnation
//     in the epoch of the reference that looked before the entry goes
//     (see, then forget). Every later call through any reference of a
//     dead actor fails with its *actors.ActorDiedError (the lookup finds
//     it dead), and a reply already in flight from an older incarnation
//     is still checked against the reference's epoch, which only grows.
//
// A reference made after the drop gets a fresh epoch: it shares nothing
// with the older references, which matters only for an actor whose
// incarnations can still change, and a dead one's cannot.
type epochs struct{ m sync.Map } // actor ID → weak.Pointer[epoch]

// epoch is the newest incarnation seen of one actor, shared by the
// driver's references to it.
type epoch struct {
	n atomic.Int64
	// id names the actor; it also keeps the allocation out of the tiny
	// allocator (pointer-free objects under 16 bytes share blocks), whose
	// objects a weak pointer may never see collected.
	id string
}

// see records that incarnation inc of the actor exists.
func (ep *epoch) see(inc int) {
	for {
		cur := ep.n.Load()
		if int64(inc) <= cur || ep.n.CompareAndSwap(cur, int64(inc)) {
			return
		}
	}
}

// load returns the newest incarnation seen.
func (ep *epoch) load() int { return int(ep.n.Load()) }

// of returns the actor's shared epoch, made at its first use (or when
// every reference that held the previous one is gone). The caller keeps
// it for as long as it refers to the actor.
func (e *epochs) of(id string) *epoch {
	for {
		v, ok := e.m.Load(id)
		if ok {
			if ep := v.(weak.Pointer[epoch]).Value(); ep != nil {
				return ep
			}
		}
		ep := &epoch{id: id}
		wp := weak.Make(ep)
		if ok {
			if !e.m.CompareAndSwap(id, v, wp) {
				continue
			}
		} else if _, loaded := e.m.LoadOrStore(id, wp); loaded {
			continue
		}
		runtime.AddCleanup(ep, e.drop, entry{id, wp})
		return ep
	}
}

// entry is an epoch's key and weak pointer, for its cleanup.
type entry struct {
	id string
	wp weak.Pointer[epoch]
}

// drop removes an entry whose epoch was collected, unless the table holds
// a newer epoch of the actor by then.
func (e *epochs) drop(en entry) { e.m.CompareAndDelete(en.id, en.wp) }

// forget drops ep's entry: its actor is committed dead. References that
// hold ep keep it.
func (e *epochs) forget(ep *epoch) { e.drop(entry{ep.id, weak.Make(ep)}) }

// newest returns the newest incarnation of the actor that the table's
// entry holds (0 if none).
func (e *epochs) newest(id string) int {
	if v, ok := e.m.Load(id); ok {
		if ep := v.(weak.Pointer[epoch]).Value(); ep != nil {
			return ep.load()
		}
	}
	return 0
}

// size is the number of entries (collected ones whose cleanup has not run
// yet included).
func (e *epochs) size() int {
	n := 0
	e.m.Range(func(any, any) bool { n++; return true })
	return n
}
