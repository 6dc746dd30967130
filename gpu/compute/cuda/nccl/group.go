package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"troupe/actors/collective"
)

// Device is the GPU a member's buffers live on, as a Group needs it. The
// CUDA backend (*cuda.Backend) has these methods; a member off GPUs has
// none (nil).
type Device interface {
	// OnDevice runs fn on one OS thread with the device's CUDA context
	// current (NCCL calls need it); the device's work goes on the legacy
	// default stream (0).
	OnDevice(fn func() error) error
	// CopyToHost copies len(dst) bytes from device address src.
	CopyToHost(dst []byte, src uintptr) error
	// CopyFromHost copies src to device address dst.
	CopyFromHost(dst uintptr, src []byte) error
	// Sync waits for the device's queued work.
	Sync() error
}

// ErrDeviceGroup: a Group's call cannot run as asked (a member off GPUs
// called a device method, an unknown data type). It wraps no NCCL error.
var ErrDeviceGroup = errors.New("nccl: device group")

// Group runs a collective group's calls on device buffers. Every member
// of the group opens it together (Open is collective): they agree on the
// path, NCCL when every member is on a GPU and every member's NCCL loads
// and joins the communicator, else the host path, on which a device
// buffer is copied to host memory, reduced over the group's own links (its
// ring or direct exchange, as any host buffer) and copied back.
//
// A member off GPUs opens the Group with a nil Device too (to take part in
// the choice) and then calls the collective.Group's methods on its host
// buffers directly; that is only possible on the host path, which a
// member off GPUs always makes the group choose.
//
// Failures. On the host path a lost member fails the call as the
// collective.Group says. On the NCCL path nothing in NCCL notices a
// member that died: the others' kernels wait for it forever. So each call
// runs under a watchdog that, while it waits, watches the call's context,
// the group's Liveness (WithLiveness, else the collective group's own
// failure where it says, collective.LossNotifier), and NCCL's own asynchronous
// error (ncclCommGetAsyncError, every WatchInterval). When one of them
// fires, it aborts the communicator (ncclCommAbort, which ends the
// kernels), waits up to AbortGrace for the device to return, and fails
// the call with an error matching collective.ErrMemberLost:
//
//   - a lost member (Liveness): the *collective.MemberError naming it;
//   - the context's deadline: ErrMemberLost and context.DeadlineExceeded,
//     the member unknown; a *collective.MemberError given as the context's
//     cause (context.WithCancelCause) is returned as it is;
//   - ncclRemoteError or ncclSystemError from NCCL: ErrMemberLost with
//     NCCL's text (it does not say which member); another NCCL error
//     fails the call with that error alone.
//
// A context canceled without such a cause fails the call with its error
// only. Every failure on the NCCL path breaks the group: later calls fail
// with the same error, and the members form the collective group again
// and Open a new Group.
type Group struct {
	g    collective.Group
	dev  Device
	path Path
	why  string
	lib  *Lib
	comm Comm
	live Liveness // nil: none given (WithLiveness)

	mu     sync.Mutex // one call at a time; guards the following
	host   []byte     // the host path's staging buffer
	broken error      // the NCCL path's failure: later calls fail with it
}

// Liveness tells a Group that a member of its collective group is gone,
// so that an NCCL call waiting for that member ends (NCCL itself would
// wait for it forever). Members is one that the caller feeds.
type Liveness interface {
	// Lost is closed once a member is gone for good.
	Lost() <-chan struct{}
	// Err, once Lost is closed, names the member: a
	// *collective.MemberError wrapping collective.ErrMemberLost.
	Err() error
}

// Members is a Liveness fed by its owner, which learns of a member's
// death another way (the member's actor died, its node was lost: an
// *actors.ActorDiedError from a call to it, a supervisor) and says so
// with Lose. Its zero value is not usable: make it with NewMembers.
type Members struct {
	group string
	once  sync.Once
	lost  chan struct{}
	err   error
}

// NewMembers returns a Members for the collective group named group.
func NewMembers(group string) *Members { return &Members{group: group, lost: make(chan struct{})} }

// Lose says the member of rank rank (and actor, its actor's ID or name,
// "" if unknown) is gone, because of cause (nil if unknown). Only the
// first loss counts: the group is over then.
func (m *Members) Lose(rank int, actor string, cause error) {
	m.once.Do(func() {
		err := collective.ErrMemberLost
		if cause != nil {
			err = fmt.Errorf("%w: %w", collective.ErrMemberLost, cause)
		}
		m.err = &collective.MemberError{Group: m.group, Rank: rank, Actor: actor, Err: err}
		close(m.lost)
	})
}

// Lost implements Liveness.
func (m *Members) Lost() <-chan struct{} { return m.lost }

// Err implements Liveness.
func (m *Members) Err() error {
	select {
	case <-m.lost:
		return m.err
	default:
		return nil
	}
}

// Option configures Open.
type Option func(*Group)

// WithLiveness makes the Group's NCCL calls end when l says a member is
// gone (see Group). Without it, a Group whose collective group says when
// it fails (collective.LossNotifier: the groups of package
// troupe/runtime/collective, whose heartbeats run between calls) uses
// that.
func WithLiveness(l Liveness) Option { return func(d *Group) { d.live = l } }

// Open chooses g's path for device buffers, together with every other
// member (each calls Open, in the same order as its other calls on g).
// dev is nil on a member off GPUs; load loads NCCL (Load in production).
// The unique ID goes from rank 0 to the others over g, the group's own
// rendezvous; nothing else is exchanged.
func Open(ctx context.Context, g collective.Group, dev Device, load func() (*Lib, error), opts ...Option) (*Group, error) {
	d := &Group{g: g, dev: dev, path: HostPath}
	if n, ok := g.(collective.LossNotifier); ok && n.Lost() != nil {
		d.live = n
	}
	for _, o := range opts {
		o(d)
	}
	// Every member says whether it can take the NCCL path; one that
	// cannot makes the whole group take the host path.
	path, lib, why := Choose(dev != nil, load)
	ok, err := agree(ctx, g, path == NCCLPath)
	if err != nil {
		return nil, err
	}
	if !ok {
		d.why = "host path: " + why
		if path == NCCLPath {
			d.why = "host path: another member cannot use NCCL"
		}
		return d, nil
	}
	var id UniqueID
	var idErr error
	if g.Rank() == 0 {
		id, idErr = lib.GetUniqueID()
	}
	// The ID's 128 bytes travel as 64 bfloat16 values: a broadcast copies
	// bits. A failure on rank 0 sends zeros, and every member's init fails
	// below, so the group falls back together.
	idBits := unsafe.Slice((*uint16)(unsafe.Pointer(&id.Internal[0])), len(id.Internal)/2)
	if err := g.BroadcastBF16(ctx, idBits, 0); err != nil {
		return nil, err
	}
	var comm Comm
	initErr := idErr
	if initErr == nil {
		initErr = dev.OnDevice(func() error {
			var err error
			if lib.NonblockingInit() {
				comm, err = lib.CommInitRankNonblocking(g.Size(), id, g.Rank())
			} else {
				comm, err = lib.CommInitRank(g.Size(), id, g.Rank())
			}
			return err
		})
	}
	if initErr == nil && lib.NonblockingInit() {
		// This member has started joining: wait for the others under the
		// watchdog. A member that is gone ends the wait, and the group
		// with it: it cannot agree on anything more.
		d.lib = lib
		if initErr = d.waitInit(ctx, comm); errors.Is(initErr, collective.ErrMemberLost) || ctx.Err() != nil {
			return nil, fmt.Errorf("collective group %q: forming the NCCL communicator: %w", g.Name(), initErr)
		}
	}
	ok, err = agree(ctx, g, initErr == nil)
	if err != nil || !ok {
		if initErr == nil {
			dev.OnDevice(func() error { return lib.Abort(comm) })
		}
		if err != nil {
			return nil, err
		}
		d.why = "host path: the NCCL communicator did not form"
		if initErr != nil {
			d.why += ": " + initErr.Error()
		}
		return d, nil
	}
	d.path, d.lib, d.comm, d.why = NCCLPath, lib, comm, why
	return d, nil
}

// waitInit waits for a communicator started without blocking to form,
// watching what a call's watchdog watches (run): the context, the
// Liveness and NCCL's asynchronous error, which reads ncclInProgress
// until every rank has joined. When one fires, or the init fails, the
// half-formed communicator is aborted.
func (d *Group) waitInit(ctx context.Context, comm Comm) error {
	var lost <-chan struct{}
	if d.live != nil {
		lost = d.live.Lost()
	}
	abort := func(err error) error {
		if aerr := d.dev.OnDevice(func() error { return d.lib.Abort(comm) }); aerr != nil {
			err = fmt.Errorf("%w (and the abort failed: %v)", err, aerr)
		}
		return err
	}
	tick := time.NewTicker(WatchInterval)
	defer tick.Stop()
	for {
		res, err := d.lib.AsyncError(comm)
		switch {
		case err != nil:
			return abort(err)
		case res == 0:
			return nil
		case res == resultRemoteError || res == resultSystemError:
			return abort(fmt.Errorf("%w: %w", collective.ErrMemberLost, d.lib.check("ncclCommInitRankConfig", res)))
		case res != resultInProgress:
			return abort(d.lib.check("ncclCommInitRankConfig", res))
		}
		select {
		case <-ctx.Done():
			return abort(ctxErr(ctx))
		case <-lost:
			return abort(d.lostErr())
		case <-tick.C:
		}
	}
}

// agree reports whether every member of g said yes (an allreduce of the
// refusals, so every member learns the same answer).
func agree(ctx context.Context, g collective.Group, yes bool) (bool, error) {
	v := []float32{1}
	if yes {
		v[0] = 0
	}
	if err := g.Allreduce(ctx, v, collective.Max); err != nil {
		return false, err
	}
	return v[0] == 0, nil
}

// Path is the path the group chose.
func (d *Group) Path() Path { return d.path }

// Why says why the group chose its path (for the logs).
func (d *Group) Why() string { return d.why }

// Group is the collective group the device group runs over.
func (d *Group) Group() collective.Group { return d.g }

// elemBytes is the size of an element of dt.
func elemBytes(dt DataType) (int, error) {
	switch dt {
	case Float32:
		return 4, nil
	case BFloat16:
		return 2, nil
	}
	return 0, fmt.Errorf("%w: data type %d (want Float32 or BFloat16)", ErrDeviceGroup, dt)
}

// Allreduce reduces count elements of dt at device address ptr over the
// group, in place. On the NCCL path Mean is ncclAvg (NCCL 2.10 and later);
// on the host path the reduction is the collective.Group's, in its fixed
// order, so every member ends with the same bits on either path.
func (d *Group) Allreduce(ctx context.Context, ptr uintptr, count int, dt DataType, op collective.Op) error {
	eb, err := d.begin(dt)
	if err != nil {
		return err
	}
	defer d.mu.Unlock()
	if d.path == NCCLPath {
		var rop RedOp
		switch op {
		case collective.Sum:
			rop = Sum
		case collective.Mean:
			rop = Avg
		case collective.Max:
			rop = Max
		default:
			return fmt.Errorf("%w: %v", collective.ErrBadArg, op)
		}
		return d.run(ctx, "ncclAllReduce", func() error { return d.lib.AllReduce(ptr, ptr, count, dt, rop, d.comm, 0) })
	}
	return d.staged(ptr, count*eb, func(b []byte) error {
		if dt == BFloat16 {
			return d.g.AllreduceBF16(ctx, bytesAs[uint16](b), op)
		}
		return d.g.Allreduce(ctx, bytesAs[float32](b), op)
	})
}

// Broadcast copies root's count elements of dt at ptr to every member's.
func (d *Group) Broadcast(ctx context.Context, ptr uintptr, count int, dt DataType, root int) error {
	eb, err := d.begin(dt)
	if err != nil {
		return err
	}
	defer d.mu.Unlock()
	if d.path == NCCLPath {
		return d.run(ctx, "ncclBroadcast", func() error { return d.lib.Broadcast(ptr, ptr, count, dt, root, d.comm, 0) })
	}
	return d.staged(ptr, count*eb, func(b []byte) error {
		if dt == BFloat16 {
			return d.g.BroadcastBF16(ctx, bytesAs[uint16](b), root)
		}
		return d.g.Broadcast(ctx, bytesAs[float32](b), root)
	})
}

// begin checks a call and takes the group's lock (the caller unlocks).
func (d *Group) begin(dt DataType) (int, error) {
	eb, err := elemBytes(dt)
	if err != nil {
		return 0, err
	}
	if d.dev == nil {
		return 0, fmt.Errorf("%w: a member off GPUs calls the collective.Group with host buffers", ErrDeviceGroup)
	}
	d.mu.Lock()
	if d.broken != nil {
		d.mu.Unlock()
		return 0, d.broken
	}
	return eb, nil
}

// staged runs fn on a host copy of n bytes at device address ptr and
// copies the result back.
func (d *Group) staged(ptr uintptr, n int, fn func(b []byte) error) error {
	if cap(d.host) < n {
		// float32-aligned: the collective group views it as float32s.
		d.host = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(make([]float32, (n+3)/4)))), 4*((n+3)/4))
	}
	b := d.host[:n]
	if err := d.dev.Sync(); err != nil {
		return err
	}
	if err := d.dev.CopyToHost(b, ptr); err != nil {
		return err
	}
	if err := fn(b); err != nil {
		return err
	}
	return d.dev.CopyFromHost(ptr, b)
}

// WatchInterval is how often a call on the NCCL path checks NCCL's
// asynchronous error while it waits (torch's NCCL watchdog checks at the
// same rate).
const WatchInterval = 100 * time.Millisecond

// AbortGrace bounds how long a failed call waits, after ncclCommAbort, for
// the device to return (its kernels end with the abort); past it the call
// returns, and the device work it left is the broken group's.
const AbortGrace = 10 * time.Second

// run enqueues an NCCL call and waits for it under the watchdog (see
// Group): the call and the device's sync run on a goroutine of their own,
// and this one watches ctx, the group's Liveness and NCCL's asynchronous
// error until they return or one of those fires, which aborts the
// communicator and breaks the group.
func (d *Group) run(ctx context.Context, what string, call func() error) error {
	var lost <-chan struct{}
	if d.live != nil {
		lost = d.live.Lost()
		select {
		case <-lost: // gone before the call: NCCL would wait for it
			return d.fail(what, d.lostErr(), nil)
		default:
		}
	}
	done := make(chan error, 1)
	go func() {
		err := d.dev.OnDevice(call)
		if err == nil {
			err = d.dev.Sync()
		}
		done <- err
	}()
	tick := time.NewTicker(WatchInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return d.fail(what, err, nil)
			}
			return nil
		case <-ctx.Done():
			return d.fail(what, ctxErr(ctx), done)
		case <-lost:
			return d.fail(what, d.lostErr(), done)
		case <-tick.C:
			if err := d.asyncErr(); err != nil {
				return d.fail(what, err, done)
			}
		}
	}
}

// fail aborts the communicator after a call failed with err, waits up to
// AbortGrace for the call's device work (done; nil when none runs) and
// breaks the group with err.
func (d *Group) fail(what string, err error, done <-chan error) error {
	if aerr := d.dev.OnDevice(func() error { return d.lib.Abort(d.comm) }); aerr != nil {
		err = fmt.Errorf("%w (and the abort failed: %v)", err, aerr)
	}
	if done != nil {
		t := time.NewTimer(AbortGrace)
		select {
		case <-done:
		case <-t.C:
			err = fmt.Errorf("%w (the device had not returned %v after ncclCommAbort)", err, AbortGrace)
		}
		t.Stop()
	}
	d.broken = fmt.Errorf("collective group %q on NCCL: %s: %w", d.g.Name(), what, err)
	return d.broken
}

// lostErr is the group's Liveness's error, made to match ErrMemberLost.
func (d *Group) lostErr() error {
	err := d.live.Err()
	switch {
	case err == nil:
		return fmt.Errorf("%w: the group's liveness said so", collective.ErrMemberLost)
	case !errors.Is(err, collective.ErrMemberLost):
		return fmt.Errorf("%w: %w", collective.ErrMemberLost, err)
	}
	return err
}

// asyncErr checks NCCL's asynchronous error: nil while there is none.
func (d *Group) asyncErr() error {
	res, err := d.lib.AsyncError(d.comm)
	switch {
	case err != nil:
		return err
	case res == 0 || res == resultInProgress:
		return nil
	case res == resultRemoteError || res == resultSystemError:
		return fmt.Errorf("%w: %w", collective.ErrMemberLost, d.lib.check("asynchronous error", res))
	}
	return d.lib.check("asynchronous error", res)
}

// ctxErr is the error of a call whose ctx ended (see Group).
func ctxErr(ctx context.Context) error {
	var me *collective.MemberError
	if cause := context.Cause(ctx); errors.As(cause, &me) && errors.Is(cause, collective.ErrMemberLost) {
		return cause
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: not every member arrived before the deadline (%w)", collective.ErrMemberLost, ctx.Err())
	}
	return ctx.Err()
}

// Close frees the NCCL communicator (the collective.Group stays open: its
// owner closes it).
func (d *Group) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path != NCCLPath || d.comm == 0 {
		return nil
	}
	c := d.comm
	d.comm = 0
	if d.broken != nil {
		return nil // aborted
	}
	return d.dev.OnDevice(func() error { return d.lib.Destroy(c) })
}

// bytesAs views b, aligned for T, as a []T.
func bytesAs[T float32 | uint16](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}
