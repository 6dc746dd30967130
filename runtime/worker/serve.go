package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"troupe/actors"
	"troupe/actors/collective"
	"troupe/runtime/api"
	rcollective "troupe/runtime/collective"
	"troupe/runtime/objstore"
	"troupe/runtime/transport"
	"troupe/runtime/wire"
)

// Options are a worker's settings beyond what its node sends; the
// process's edge (runtime.Init) reads them from the environment.
type Options struct {
	// Spin is the transport.Security.Spin of the worker's call and object
	// ports and of its object fetches (transport.SpinEnv).
	Spin time.Duration
	// NoObjectsUnix makes the worker fetch objects over TCP from owners
	// on this host too (objstore.LocalEnv set to "0").
	NoObjectsUnix bool
	// NoCollectiveUnix makes its actors' collective groups connect over
	// TCP (with TLS when configured) to members on this host too, as to
	// members on other hosts (rcollective.UnixEnv set to "0").
	NoCollectiveUnix bool
	// HeapFloor is the heap a worker process reserves so that its garbage
	// collector does not run every few calls on a small heap (heap.go):
	// 0 is DefaultHeapFloor, negative none. ServeProcess reserves it.
	HeapFloor int64
}

// Serve runs this process as a worker: it serves calls on a wire.Server
// listening on host (port chosen by the system) that authenticates callers
// as the node's first message (security) says, reports the address to
// the node over the control channel, and creates and ends actor instances
// as the node says, until the node says exit or the channel closes.
func Serve(ctx context.Context, rw io.ReadWriteCloser, host string, opt Options) error {
	c := newCtrl(rw)
	defer rw.Close()
	// The node says first how the worker's ports authenticate.
	first, err := c.recv()
	if err != nil {
		return fmt.Errorf("worker: waiting for the security message: %w", err)
	}
	if first.Op != opSecure {
		return fmt.Errorf("worker: the node sent %q first, want %q", first.Op, opSecure)
	}
	sec, err := first.Sec.security()
	if err != nil {
		return fmt.Errorf("worker: the node's security message: %w", err)
	}
	sec.Spin = opt.Spin
	var fetch []objstore.ClientOption
	if opt.NoObjectsUnix {
		fetch = append(fetch, objstore.NoUnix())
	}
	objs, err := startObjects(host, sec, fetch...)
	if err != nil {
		return err
	}
	defer objs.close()
	// Collective groups of this worker's actors connect worker to worker
	// with the same security as its other ports.
	groups, err := rcollective.New(rcollective.Config{Security: sec, Host: host, NoUnix: opt.NoCollectiveUnix})
	if err != nil {
		return err
	}
	collective.SetTransport(groups)
	defer groups.Close()
	h := &host_{insts: map[string]running{}, objs: objs, calls: newCallRecorder()}
	srv := wire.NewServer(h, 0, sec)
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("worker: listen: %w", err)
	}
	served := make(chan struct{})
	go func() { srv.Serve(l); close(served) }()
	// Callers on this host reach the server through the Unix socket beside
	// its TCP address (wire.Dial prefers it); callers elsewhere use TCP.
	if ul, err := wire.ListenLocal(l); err == nil {
		go srv.Serve(ul)
	}
	defer func() { srv.Close(); <-served; h.killAll("worker exiting") }()
	if err := c.send(&msg{Op: opReady, Addr: l.Addr().String(), Caps: []string{capStats, capKillAck}}); err != nil {
		return err
	}
	for {
		m, err := c.recv()
		if errors.Is(err, io.EOF) {
			return nil // the node is gone (or closed the channel): exit
		}
		if err != nil {
			return err
		}
		switch m.Op {
		case opStart:
			go h.start(ctx, c, m)
		case opKill:
			h.kill(m)
			if m.Seq != 0 { // the node waits (EndActor): the incarnation is gone now
				if err := c.send(&msg{Op: opKilled, Seq: m.Seq}); err != nil {
					return err
				}
			}
		case opExit:
			return nil
		case opStats:
			go c.send(&msg{Op: opStats, Seq: m.Seq, Stats: h.stats()})
		default:
			return fmt.Errorf("worker: unknown control message %q", m.Op)
		}
	}
}

// host_ holds the worker's live actor instances.
type host_ struct {
	objs  *objects
	calls *callRecorder
	mu    sync.Mutex
	insts map[string]running // by actor ID
}

// stats is the worker's answer to a stats request.
func (h *host_) stats() *Stats {
	auth := transport.ProcessAuthStats()
	st := &Stats{PID: os.Getpid(), Calls: h.calls.snapshot(), Auth: &auth}
	if h.objs != nil {
		st.Objects, st.ObjectsTotal = h.objs.store.List(MaxListedObjects)
		st.ObjectAddr = h.objs.store.Owner()
	}
	return st
}

// running is the incarnation of an actor this worker runs.
type running struct {
	in  *actors.Instance
	inc int
}

// Lookup implements wire.Host, for calls that name no incarnation.
func (h *host_) Lookup(id string) (wire.Target, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.insts[id]
	if !ok {
		return nil, false
	}
	return groupTarget{r.in}, true
}

// LookupIncarnation implements wire.FencedHost: a call runs only on the
// incarnation it names. One naming an older incarnation than the one here
// is refused (the caller is behind). One naming a newer incarnation proves
// the one here was replaced (the cluster restarted the actor elsewhere,
// its node lost): it is refused, and the incarnation here is ended at
// once, without waiting for the node's fence, and its later results are
// refused by the object store.
func (h *host_) LookupIncarnation(id string, inc uint64) (wire.Target, error) {
	h.mu.Lock()
	r, ok := h.insts[id]
	switch {
	case !ok:
		h.mu.Unlock()
		return nil, &api.NotHostedError{Actor: id}
	case uint64(r.inc) == inc:
		h.mu.Unlock()
		return groupTarget{r.in}, nil
	case uint64(r.inc) > inc:
		h.mu.Unlock()
		return nil, &api.StaleIncarnationError{Actor: id, Called: int(inc), Running: r.inc}
	}
	delete(h.insts, id)
	h.mu.Unlock()
	if h.objs != nil {
		h.objs.store.Fence(id, inc)
	}
	go r.in.Kill(fmt.Sprintf("incarnation %d was replaced: a call named incarnation %d", r.inc, inc))
	return nil, &api.StaleIncarnationError{Actor: id, Called: int(inc), Running: r.inc}
}

// groupTarget hands the calls that form collective groups to package
// collective and the others to the actor.
type groupTarget struct{ *actors.Instance }

func (t groupTarget) Invoke(inv *actors.Invocation) {
	if !collective.Control(inv, t.Instance) {
		t.Instance.Invoke(inv)
	}
}

func (t groupTarget) RunInline(inv *actors.Invocation) bool {
	if collective.Control(inv, t.Instance) {
		return true
	}
	return t.Instance.RunInline(inv)
}

// start constructs one actor and reports the outcome. Restarts are the
// control plane's (the node re-places and restarts a dead actor within
// MaxRestarts), so the instance itself never restarts: a crash ends it and
// is reported as a death.
func (h *host_) start(ctx context.Context, c *ctrl, m *msg) {
	if m.Spec == nil || m.Info == nil || m.ID == "" {
		c.send(&msg{Op: opStarted, ID: m.ID, Inc: m.Inc, Err: "start: message without id, spec or info"})
		return
	}
	spec := *m.Spec
	spec.MaxRestarts = 0
	id, inc := m.ID, m.Inc
	var self *actors.Instance
	var selfMu sync.Mutex
	hooks := actors.InstanceHooks{Died: func(d *actors.ActorDiedError) {
		collective.Forget(id) // its groups' peers see it lost at once
		h.mu.Lock()
		selfMu.Lock()
		if h.insts[id].in == self && self != nil {
			delete(h.insts, id)
		}
		selfMu.Unlock()
		h.retireLocked(id)
		h.mu.Unlock()
		c.send(&msg{Op: opDied, ID: id, Inc: inc, Cause: d.Cause})
	}}
	if h.objs != nil {
		// Its results are objects of this incarnation: refused once a newer
		// one is known here.
		h.objs.store.Fence(id, uint64(inc))
		hooks.Arg = h.objs.arg
		hooks.Result = func(data []byte) ([]byte, error) { return h.objs.result(id, inc, data) }
	}
	if h.calls != nil {
		hooks.Called = h.calls.hook(spec.Type)
	}
	in, err := actors.NewInstance(ctx, spec, *m.Info, hooks)
	if err != nil {
		h.mu.Lock()
		h.retireLocked(id)
		h.mu.Unlock()
		c.send(&msg{Op: opStarted, ID: id, Inc: inc, Err: err.Error()})
		return
	}
	selfMu.Lock()
	self = in
	selfMu.Unlock()
	h.mu.Lock()
	if old, ok := h.insts[id]; ok {
		defer old.in.Kill("replaced by a new incarnation")
	}
	h.insts[id] = running{in: in, inc: inc}
	if h.objs != nil {
		// Live again, though an older incarnation's end retired the
		// actor's epoch since the Fence above.
		h.objs.store.Fence(id, uint64(inc))
	}
	h.mu.Unlock()
	c.send(&msg{Op: opStarted, ID: id, Inc: inc})
}

// retireLocked retires the actor's epoch in the object store when no
// incarnation of it runs here any more (objstore.Store.Retire: the store
// keeps a bounded memory of ended actors). h.mu is held, so a start that
// makes it run here again orders after it and fences it live.
func (h *host_) retireLocked(id string) {
	if _, ok := h.insts[id]; !ok && h.objs != nil {
		h.objs.store.Retire(id)
	}
}

// kill ends the actor a kill message names; a kill for an incarnation
// other than the one running (sent before it died and was restarted here)
// is ignored.
func (h *host_) kill(m *msg) {
	h.mu.Lock()
	r, ok := h.insts[m.ID]
	if !ok || (m.Exact && r.inc != m.Inc) {
		h.mu.Unlock()
		return
	}
	delete(h.insts, m.ID)
	h.mu.Unlock()
	cause := m.Cause
	if cause == "" {
		cause = "killed"
	}
	r.in.Kill(cause)
}

func (h *host_) killAll(cause string) {
	h.mu.Lock()
	all := h.insts
	h.insts = map[string]running{}
	h.mu.Unlock()
	for _, r := range all {
		r.in.Kill(cause)
	}
}

// HostEnvVar is set by the node for a worker process when its wire server
// must listen on another host than 127.0.0.1.
const HostEnvVar = "TROUPE_WORKER_HOST"

// ServeProcess is Serve for a process the node started, given the values
// of EnvVar and HostEnvVar that the process's edge (runtime.Init) read:
// the control channel is file descriptor 3, and the wire server listens
// on host (default 127.0.0.1).
func ServeProcess(ctx context.Context, env, host string, opt Options) error {
	if _, err := ParseEnv(env); err != nil {
		return err
	}
	f := os.NewFile(ctrlFD, "troupe-worker-control")
	if f == nil {
		return fmt.Errorf("worker: file descriptor %d is not open", ctrlFD)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	reserveHeapFloor(opt.HeapFloor)
	return Serve(ctx, f, host, opt)
}
