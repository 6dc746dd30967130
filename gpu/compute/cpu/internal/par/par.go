// Package par is the fork/join used by the CPU backend's kernels and by
// gemm: Run splits one call into parts, runs part 0 on the caller and hands
// the others to persistent worker goroutines.
//
// A training step is a few hundred short parallel calls (tens of µs to a
// few ms each), so the cost that matters is the hand-off, not throughput.
// A channel hand-off parks the worker's thread after every call and wakes it
// with a futex at the next (several µs each way, and the Go scheduler spins
// in between). Here each worker has a mailbox it polls for a short while
// after finishing a part (spinWindow), and parks only when nothing arrives;
// the caller likewise polls before parking while it waits for the parts it
// handed out; both yield the CPU every few hundred polls, so on a loaded
// machine the spinning costs little. A part whose worker has not picked it up by the time the
// caller is done with its own is taken back and run by the caller, so a
// worker that the OS has descheduled (a loaded machine) delays nothing.
//
// A part is handed only to an idle worker: a part run from inside another
// part (a kernel calling gemm) or by a second caller while the workers are
// busy runs on the caller. Nothing allocates in steady state.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Task is one parallel call; Run(part) computes one part. Parts of one call
// run concurrently with each other.
type Task interface {
	Run(part int)
}

// spinWindow is how long an idle worker, and a waiting caller, poll before
// parking: longer than the serial gap between two kernels of a step, short
// enough that an idle process costs nothing noticeable.
const spinWindow = 50 * time.Microsecond

// Worker states, in the low byte of worker.state; the bits above count
// hand-outs, so a caller taking a part back cannot take a later one.
const (
	idle     uint64 = iota // polling its mailbox (or about to park)
	claimed                // a caller is filling the mailbox
	assigned               // mailbox full, not picked up yet
	busy                   // running a part
	parked                 // blocked on wake
	claimedP               // a caller is filling the mailbox of a parked worker
)

// maxHanded bounds the parts one Run hands to workers; the rest run on the
// caller.
const maxHanded = 16

type worker struct {
	state atomic.Uint64
	call  *call // mailbox, written while claimed, read once busy
	part  int
	wake  chan struct{}
	_     [64]byte // keep workers' states on separate cache lines
}

// call tracks the parts of one Run handed to workers.
type call struct {
	t       Task
	pending atomic.Int32 // handed-out parts not finished, +1 until the caller is done handing out
	done    atomic.Int32 // 0 running, 1 caller parked, 2 all finished
	fin     chan struct{}
}

var (
	once    sync.Once
	ws      []*worker
	calls   = sync.Pool{New: func() any { return &call{fin: make(chan struct{}, 1)} }}
	maxPart int
)

func start() {
	maxPart = max(runtime.GOMAXPROCS(0), 1)
	ws = make([]*worker, maxPart-1)
	for i := range ws {
		w := &worker{wake: make(chan struct{}, 1)}
		ws[i] = w
		go w.loop()
	}
}

// Parts is the most parts a Run call can run at the same time: the workers
// plus the caller (GOMAXPROCS at first use).
func Parts() int {
	once.Do(start)
	return maxPart
}

// Run computes t.Run(p) for every p in [0, parts) and returns when all are
// done. Part 0 runs on the caller.
func Run(parts int, t Task) {
	once.Do(start)
	if parts <= 1 {
		if parts == 1 {
			t.Run(0)
		}
		return
	}
	// Hand parts 1.. to idle workers, at most one each.
	var c *call
	var mine [maxHanded]struct {
		w     *worker
		state uint64 // the worker's state word while our part is assigned
	}
	handed := 0
	for _, w := range ws {
		if handed+1 >= parts || handed == maxHanded {
			break
		}
		st := w.state.Load()
		seq := st>>8 + 1
		var to uint64
		switch st & 0xff {
		case idle:
			to = claimed
		case parked:
			to = claimedP
		default:
			continue
		}
		if !w.state.CompareAndSwap(st, seq<<8|to) {
			continue
		}
		if c == nil {
			c = calls.Get().(*call)
			c.t = t
			c.done.Store(0)
			c.pending.Store(1) // the caller's hold, dropped after handing out
		}
		c.pending.Add(1)
		w.call, w.part = c, handed+1
		as := seq<<8 | assigned
		w.state.Store(as)
		if to == claimedP {
			select {
			case w.wake <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
		mine[handed].w, mine[handed].state = w, as
		handed++
	}
	t.Run(0)
	for p := handed + 1; p < parts; p++ {
		t.Run(p)
	}
	if c == nil {
		return
	}
	// Take back parts no worker has started.
	for i := 0; i < handed; i++ {
		m := &mine[i]
		if m.w.state.CompareAndSwap(m.state, m.state&^0xff|idle) {
			t.Run(i + 1)
			c.finish()
		}
	}
	c.finish() // the caller's hold
	c.wait()
	c.t = nil
	calls.Put(c)
}

// finish records one handed-out part (or the caller's hold) as done.
func (c *call) finish() {
	if c.pending.Add(-1) != 0 {
		return
	}
	if !c.done.CompareAndSwap(0, 2) {
		c.fin <- struct{}{} // the caller is parked
	}
}

// wait returns when every handed-out part has finished.
func (c *call) wait() {
	deadline := time.Now().Add(spinWindow)
	for i := 0; ; i++ {
		if c.done.Load() == 2 {
			return
		}
		if i&255 == 255 {
			if time.Now().After(deadline) {
				break
			}
			yield()
		}
	}
	if c.done.CompareAndSwap(0, 1) {
		<-c.fin
	}
}

func (w *worker) loop() {
	for {
		st := w.await()
		if !w.state.CompareAndSwap(st, st&^0xff|busy) {
			continue // taken back by the caller
		}
		c, p := w.call, w.part
		w.call = nil
		c.t.Run(p)
		w.state.Store(st&^0xff | idle)
		c.finish()
	}
}

// await returns the state word once the mailbox has been assigned (the
// caller may still take the part back before the worker claims it).
func (w *worker) await() uint64 {
	deadline := time.Now().Add(spinWindow)
	for i := 0; ; i++ {
		st := w.state.Load()
		switch st & 0xff {
		case assigned:
			return st
		case parked:
			<-w.wake // woken by the caller that claims this worker
			deadline = time.Now().Add(spinWindow)
		case idle:
			if i&255 == 255 {
				if time.Now().After(deadline) {
					// Park; a caller seeing parked sends a wake-up.
					w.state.CompareAndSwap(st, st&^0xff|parked)
				} else {
					yield()
				}
			}
		}
	}
}
