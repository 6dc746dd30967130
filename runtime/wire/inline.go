package wire

import (
	"errors"
	"sync/atomic"
	"time"

	"troupe/actors"
)

// Inline calls. A call that arrives alone (no more input buffered, nothing
// to track) for an idle actor runs on the goroutine that read it, which
// then writes the reply itself: a synchronous round trip costs no goroutine
// hand-off in the server process. A hand-off is a wake-up of another thread
// whenever the process has an idle P, and on a loaded machine it costs more
// than the call itself (measured: two hand-offs per round trip, one on each
// side, doubled the CPU a call costs beside a raw socket ping-pong).
//
// While a call runs inline nobody reads the connection. So that a long call
// never holds up the calls behind it, or deadlocks waiting for one of them,
// a watchdog looks at the server's connections every inlineTick while
// inline calls happen: a call seen running at two consecutive looks has
// another goroutine take over reading, and the goroutine running it ends
// once it is done. Inline calls thus delay other frames of their connection
// by at most about two ticks.

// inlineTarget is a Target that can run a call on the calling goroutine;
// *actors.Instance is one.
type inlineTarget interface {
	RunInline(inv *actors.Invocation) bool
}

// inlineTick is how often the watchdog looks for long inline calls.
const inlineTick = 2 * time.Millisecond

// inlineIdleTicks is how many ticks without inline calls stop the watchdog.
const inlineIdleTicks = 250

// errHandedOff ends a reading goroutine whose connection another goroutine
// reads now.
var errHandedOff = errors.New("wire: reading handed off")

// inlineState tracks the call running inline on a connection's reader.
type inlineState struct {
	seq     atomic.Uint64 // numbers inline calls
	running atomic.Uint64 // the running call's number; 0 none; takenOver once another goroutine reads

	// The watchdog's previous look; only the watchdog touches them.
	seenSeq, seenRunning uint64
}

const takenOver = ^uint64(0)

// runInline runs inv on this goroutine if t supports it and the actor is
// idle. ran reports whether it did; handedOff that another goroutine took
// over reading meanwhile, so this one must stop reading.
func (sc *serverConn) runInline(t Target, inv *actors.Invocation) (ran, handedOff bool) {
	it, ok := t.(inlineTarget)
	if !ok {
		return false, false
	}
	n := sc.inline.seq.Add(1)
	sc.inline.running.Store(n)
	sc.s.watchInline()
	if !it.RunInline(inv) {
		sc.inline.running.CompareAndSwap(n, 0)
		return false, false
	}
	return true, !sc.inline.running.CompareAndSwap(n, 0)
}

// watchInline makes sure the watchdog runs. Callers publish their inline
// call before calling it, and the watchdog looks at the calls again after
// deciding to stop, so no call goes unwatched.
func (s *Server) watchInline() {
	if !s.watching.Load() && s.watching.CompareAndSwap(false, true) {
		go s.watchdog()
	}
}

// watchdog hands the reading of a connection to a new goroutine when its
// inline call runs long. It stops after inlineIdleTicks without inline
// calls.
func (s *Server) watchdog() {
	t := time.NewTicker(inlineTick)
	defer t.Stop()
	idle := 0
	for range t.C {
		active, closed := s.lookInline()
		if closed {
			return // watching stays set: nothing to watch any more
		}
		if active {
			idle = 0
			continue
		}
		if idle++; idle < inlineIdleTicks {
			continue
		}
		s.watching.Store(false)
		if active, _ := s.lookInline(); !active || !s.watching.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}

// lookInline checks every connection once and reports whether any inline
// call has happened since the previous look, or that the server is closed.
func (s *Server) lookInline() (active, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return false, true
	}
	for sc := range s.conns {
		st := &sc.inline
		seq, n := st.seq.Load(), st.running.Load()
		running := n != 0 && n != takenOver
		if seq != st.seenSeq || running {
			active = true
		}
		if running && n == st.seenRunning && st.running.CompareAndSwap(n, takenOver) {
			go sc.read() // the call has run for over a tick: read on
		}
		st.seenSeq, st.seenRunning = seq, n
	}
	return active, false
}
