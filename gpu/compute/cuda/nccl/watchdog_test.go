package nccl

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ebitengine/purego"

	"troupe/actors/collective"
)

// fakeVar is the fake libnccl's global int named name.
func fakeVar(t *testing.T, path, name string) *int32 {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := purego.Dlsym(h, name)
	if err != nil {
		t.Fatal(err)
	}
	return (*int32)(addr(p))
}

// hangDevice is a hostDevice whose Sync waits, as cuCtxSynchronize waits
// for NCCL's kernel, while the fake libnccl has a collective pending; or,
// with stuck set, until stuck is closed whatever NCCL does.
type hangDevice struct {
	hostDevice
	pending *int32
	stuck   chan struct{}
}

func (d *hangDevice) Sync() error {
	if d.stuck != nil {
		<-d.stuck
		return nil
	}
	for atomic.LoadInt32(d.pending) != 0 {
		time.Sleep(time.Millisecond)
	}
	return nil
}

// loadFake builds the fake libnccl and loads it: its path (for fakeVar)
// and the library.
func loadFake(t *testing.T) (string, *Lib) {
	t.Helper()
	path := fakeLib(t)
	lib, err := LoadFrom(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, lib
}

// TestNCCLCallWatchdog: a call on the NCCL path that never completes (a
// member died mid-allreduce: the fake libnccl leaves it pending) ends when
// the watchdog sees the context's deadline, a member lost (Liveness) or
// NCCL's asynchronous error: the communicator is aborted, the call fails
// at that moment (bubble time) with an error matching ErrMemberLost, the
// group is broken, and a device that does not return after the abort
// holds the call for AbortGrace at most.
func TestNCCLCallWatchdog(t *testing.T) {
	path, lib := loadFake(t)
	load := func() (*Lib, error) { return lib, nil }
	hang, pending := fakeVar(t, path, "fake_nccl_hang"), fakeVar(t, path, "fake_nccl_pending")
	async, aborts := fakeVar(t, path, "fake_nccl_async_error"), fakeVar(t, path, "fake_nccl_aborts")
	x := []float32{1, 2, 3}

	// call opens a one-member group on dev (with opts), makes NCCL hang,
	// runs an allreduce under ctx and returns its error, how long it took
	// and how many aborts it caused.
	call := func(t *testing.T, ctx context.Context, dev Device, opts ...Option) (*Group, error, time.Duration, int32) {
		t.Helper()
		atomic.StoreInt32(async, 0)
		d, err := Open(ctx, collective.NewLocal("g", 1)[0], dev, load, opts...)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if d.Path() != NCCLPath {
			t.Fatalf("open: %v (%s)", d.Path(), d.Why())
		}
		atomic.StoreInt32(hang, 1)
		defer atomic.StoreInt32(hang, 0)
		a0 := atomic.LoadInt32(aborts)
		start := time.Now()
		err = d.Allreduce(ctx, ptrOf(x), len(x), Float32, collective.Sum)
		return d, err, time.Since(start), atomic.LoadInt32(aborts) - a0
	}
	// within says took is at least want and at most a watchdog tick (and
	// the fake device's poll) later.
	within := func(t *testing.T, took, want time.Duration) {
		t.Helper()
		if took < want || took > want+WatchInterval+2*time.Millisecond {
			t.Fatalf("the call ended after %v, want %v (at most a watch interval later)", took, want)
		}
	}

	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			d, err, took, n := call(t, ctx, &hangDevice{pending: pending})
			if !errors.Is(err, collective.ErrMemberLost) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("hung call past its deadline: %v, want ErrMemberLost and DeadlineExceeded", err)
			}
			within(t, took, 2*time.Second)
			if n != 1 || atomic.LoadInt32(pending) != 0 {
				t.Fatalf("%d aborts, pending %d; want the communicator aborted once", n, atomic.LoadInt32(pending))
			}
			if err2 := d.Allreduce(context.Background(), ptrOf(x), len(x), Float32, collective.Sum); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("call on the broken group: %v, want its failure again", err2)
			}
			if err := d.Close(); err != nil {
				t.Fatalf("close of an aborted group: %v", err)
			}
		})
	})

	t.Run("member lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := NewMembers("g")
			go func() {
				time.Sleep(300 * time.Millisecond)
				m.Lose(1, "worker-1", errors.New("its actor died"))
			}()
			_, err, took, n := call(t, context.Background(), &hangDevice{pending: pending}, WithLiveness(m))
			var me *collective.MemberError
			if !errors.As(err, &me) || me.Rank != 1 || me.Actor != "worker-1" || !errors.Is(err, collective.ErrMemberLost) {
				t.Fatalf("hung call when a member is lost: %v, want a MemberError naming rank 1 (worker-1)", err)
			}
			within(t, took, 300*time.Millisecond)
			if n != 1 {
				t.Fatalf("%d aborts, want 1", n)
			}
			// A group whose member is already gone runs nothing in NCCL.
			c0 := fakeCalls(t, path)
			_, err, took, _ = call(t, context.Background(), &hangDevice{pending: pending}, WithLiveness(m))
			if !errors.As(err, &me) || took != 0 || fakeCalls(t, path) != c0 {
				t.Fatalf("call after the loss: %v after %v, %d NCCL calls; want the loss at once and none", err, took, fakeCalls(t, path)-c0)
			}
		})
	})

	t.Run("cause", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			lost := &collective.MemberError{Group: "g", Rank: 2, Err: collective.ErrMemberLost}
			time.AfterFunc(time.Second, func() { cancel(lost) })
			_, err, took, _ := call(t, ctx, &hangDevice{pending: pending})
			var me *collective.MemberError
			if !errors.As(err, &me) || me.Rank != 2 {
				t.Fatalf("call canceled with a member's loss: %v, want that MemberError", err)
			}
			within(t, took, time.Second)
		})
	})

	t.Run("nccl async error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			time.AfterFunc(time.Second, func() { atomic.StoreInt32(async, resultRemoteError) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a backstop
			defer cancel()
			_, err, took, n := call(t, ctx, &hangDevice{pending: pending})
			if !errors.Is(err, collective.ErrMemberLost) || !strings.Contains(err.Error(), "remote process exited") {
				t.Fatalf("hung call after NCCL's remote error: %v, want ErrMemberLost with NCCL's text", err)
			}
			within(t, took, time.Second)
			if n != 1 {
				t.Fatalf("%d aborts, want 1", n)
			}
		})
	})

	t.Run("device stuck after abort", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			stuck := make(chan struct{})
			defer close(stuck)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err, took, _ := call(t, ctx, &hangDevice{pending: pending, stuck: stuck})
			if !errors.Is(err, collective.ErrMemberLost) || !strings.Contains(err.Error(), "had not returned") {
				t.Fatalf("call whose device does not return: %v", err)
			}
			if took != time.Second+AbortGrace {
				t.Fatalf("returned after %v, want the deadline and AbortGrace: %v", took, time.Second+AbortGrace)
			}
		})
	})

	t.Run("completes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			d, err := Open(ctx, collective.NewLocal("g", 1)[0], &hangDevice{pending: pending}, load, WithLiveness(NewMembers("g")))
			if err != nil {
				t.Fatal(err)
			}
			a0 := atomic.LoadInt32(aborts)
			if err := d.Allreduce(ctx, ptrOf(x), len(x), Float32, collective.Sum); err != nil {
				t.Fatal(err)
			}
			if atomic.LoadInt32(aborts) != a0 {
				t.Fatal("a call that completed aborted the communicator")
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestNCCLInitWatchdog: forming the communicator without blocking
// (ncclCommInitRankConfig) waits for the other members under the
// watchdog. A member that never joins (the fake's init stays in progress)
// ends Open at the context's deadline or when the Liveness says it is
// gone, and NCCL's asynchronous error ends it too: the half-formed
// communicator is aborted and Open fails, at that moment, with an error
// matching ErrMemberLost.
func TestNCCLInitWatchdog(t *testing.T) {
	path, lib := loadFake(t)
	if !lib.NonblockingInit() {
		t.Fatal("the fake libnccl's ncclCommInitRankConfig was not bound")
	}
	load := func() (*Lib, error) { return lib, nil }
	initHang, async := fakeVar(t, path, "fake_nccl_init_hang"), fakeVar(t, path, "fake_nccl_async_error")
	aborts := fakeVar(t, path, "fake_nccl_aborts")
	open := func(t *testing.T, ctx context.Context, opts ...Option) (error, time.Duration, int32) {
		t.Helper()
		atomic.StoreInt32(async, 0)
		atomic.StoreInt32(initHang, 1)
		defer atomic.StoreInt32(initHang, 0)
		a0 := atomic.LoadInt32(aborts)
		start := time.Now()
		d, err := Open(ctx, collective.NewLocal("g", 1)[0], &hostDevice{}, load, opts...)
		if err == nil {
			t.Fatalf("Open with a member that never joins: %v path (%s), want an error", d.Path(), d.Why())
		}
		return err, time.Since(start), atomic.LoadInt32(aborts) - a0
	}
	within := func(t *testing.T, took, want time.Duration) {
		t.Helper()
		if took < want || took > want+WatchInterval {
			t.Fatalf("Open ended after %v, want %v (at most a watch interval later)", took, want)
		}
	}
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err, took, n := open(t, ctx)
			if !errors.Is(err, collective.ErrMemberLost) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("init past its deadline: %v, want ErrMemberLost and DeadlineExceeded", err)
			}
			within(t, took, 2*time.Second)
			if n != 1 {
				t.Fatalf("%d aborts, want the half-formed communicator aborted once", n)
			}
		})
	})
	t.Run("member lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := NewMembers("g")
			time.AfterFunc(300*time.Millisecond, func() { m.Lose(1, "worker-1", errors.New("its node was lost")) })
			err, took, n := open(t, context.Background(), WithLiveness(m))
			var me *collective.MemberError
			if !errors.As(err, &me) || me.Rank != 1 || !errors.Is(err, collective.ErrMemberLost) {
				t.Fatalf("init when a member is lost: %v, want a MemberError naming rank 1", err)
			}
			within(t, took, 300*time.Millisecond)
			if n != 1 {
				t.Fatalf("%d aborts, want 1", n)
			}
		})
	})
	t.Run("nccl async error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			time.AfterFunc(time.Second, func() { atomic.StoreInt32(async, resultRemoteError) })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a backstop
			defer cancel()
			err, took, n := open(t, ctx)
			if !errors.Is(err, collective.ErrMemberLost) || !strings.Contains(err.Error(), "remote process exited") {
				t.Fatalf("init after NCCL's remote error: %v, want ErrMemberLost with NCCL's text", err)
			}
			within(t, took, time.Second)
			if n != 1 {
				t.Fatalf("%d aborts, want 1", n)
			}
		})
	})
}

// TestOpenOldNCCL: a library without ncclCommInitRankConfig (NCCL before
// 2.14) forms the communicator with the blocking ncclCommInitRank.
func TestOpenOldNCCL(t *testing.T) {
	lib, err := LoadFrom(buildFake(t, "-DFAKE_NCCL_OLD"))
	if err != nil {
		t.Fatal(err)
	}
	if lib.NonblockingInit() {
		t.Fatal("a library without ncclCommInitRankConfig says it inits without blocking")
	}
	d, err := Open(context.Background(), collective.NewLocal("g", 1)[0], &hostDevice{}, func() (*Lib, error) { return lib, nil })
	if err != nil || d.Path() != NCCLPath {
		t.Fatalf("open on the old library: %v, %v", d, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

// notifyingGroup is a collective group that says when it fails, as the
// network's groups do (collective.LossNotifier).
type notifyingGroup struct {
	collective.Group
	lost chan struct{}
	err  error
}

func (g *notifyingGroup) Lost() <-chan struct{} { return g.lost }
func (g *notifyingGroup) Err() error {
	select {
	case <-g.lost:
		return g.err
	default:
		return nil
	}
}

// TestNCCLWatchesItsGroup: without WithLiveness, a Group whose collective
// group says when it fails watches that: a member the group's heartbeats
// lost ends a hung NCCL call at that moment, naming it.
func TestNCCLWatchesItsGroup(t *testing.T) {
	path, lib := loadFake(t)
	hang, pending := fakeVar(t, path, "fake_nccl_hang"), fakeVar(t, path, "fake_nccl_pending")
	synctest.Test(t, func(t *testing.T) {
		g := &notifyingGroup{Group: collective.NewLocal("g", 1)[0], lost: make(chan struct{}),
			err: &collective.MemberError{Group: "g", Rank: 3, Actor: "worker-3", Err: collective.ErrMemberLost}}
		d, err := Open(context.Background(), g, &hangDevice{pending: pending}, func() (*Lib, error) { return lib, nil })
		if err != nil || d.Path() != NCCLPath {
			t.Fatalf("open: %v, %v", d, err)
		}
		atomic.StoreInt32(hang, 1)
		defer atomic.StoreInt32(hang, 0)
		time.AfterFunc(500*time.Millisecond, func() { close(g.lost) })
		start := time.Now()
		x := []float32{1}
		err = d.Allreduce(context.Background(), ptrOf(x), len(x), Float32, collective.Sum)
		var me *collective.MemberError
		if !errors.As(err, &me) || me.Rank != 3 || !errors.Is(err, collective.ErrMemberLost) {
			t.Fatalf("hung call when the group lost a member: %v, want the group's MemberError", err)
		}
		if took := time.Since(start); took < 500*time.Millisecond || took > 500*time.Millisecond+WatchInterval+2*time.Millisecond {
			t.Fatalf("the call ended after %v, want 500ms", took)
		}
	})
}
