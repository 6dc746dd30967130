package driver

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime/api"
)

// driverGoroutines returns the stacks of goroutines running the driver's
// code (any function of this package outside its tests) or the wire
// clients it owns.
func driverGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:goruntime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		for i := 1; i+1 < len(lines); i++ {
			fn, file := lines[i], lines[i+1]
			if strings.HasPrefix(fn, "troupe/runtime/wire.(*Client)") ||
				strings.HasPrefix(fn, "troupe/runtime/driver.") && !strings.Contains(file, "_test.go") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// TestDriverShutdownLeak: when Shutdown returns, no goroutine of the
// driver is left (spawner, spawn waits, call watcher, keep-alives, actor
// lookups, retries of lost calls, wire connections), even with a spawn
// waiting for room and a call in flight when it began; both then fail.
func TestDriverShutdownLeak(t *testing.T) {
	const tok = "leak-token"
	n := startHead(t, tok) // 4 CPUs
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, 50*time.Second)
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: 1}, actors.CPUs(1))
	if err != nil {
		done()
		t.Fatal(err)
	}
	for i := range 3 {
		if v, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); err != nil || v != 2+i {
			done()
			t.Fatalf("Add = %v, %v", v, err)
		}
	}
	// A spawn that waits for room (4 CPUs while h holds one of the
	// node's 4): pending until Shutdown.
	spawned := make(chan error, 1)
	go func() {
		_, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.CPUs(4), actors.Name("too-big"))
		spawned <- err
	}()
	for pending := false; !pending; {
		st, err := rt.Status(ctx)
		if err != nil {
			done()
			t.Fatal(err)
		}
		for _, a := range st.Actors {
			pending = pending || a.Name == "too-big" && a.State == "PENDING"
		}
		if !pending {
			select {
			case err := <-spawned:
				done()
				t.Fatalf("the spawn that cannot fit returned %v", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	call := callInFlight(t, ctx, h, 60_000)
	done()
	if gs := driverGoroutines(); len(gs) > 0 {
		t.Errorf("%d driver goroutines left after Shutdown:\n%s", len(gs), strings.Join(gs, "\n\n"))
	}
	if err := <-spawned; err == nil {
		t.Error("the pending spawn succeeded after Shutdown")
	}
	if _, err := call.Get(context.Background()); err == nil {
		t.Error("the call in flight at Shutdown succeeded")
	}
}

// TestDriverAfterShutdown: a driver's spawns, lookups and calls after
// Shutdown fail at once with an error that is api.ErrShutdown (errors.Is),
// not a gRPC error of the closed connection after a wait.
func TestDriverAfterShutdown(t *testing.T) {
	const tok = "after-token"
	n := startHead(t, tok)
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, 50*time.Second)
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.Name("after"))
	if err != nil {
		done()
		t.Fatal(err)
	}
	if _, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); err != nil {
		done()
		t.Fatal(err)
	}
	done()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}); !errors.Is(err, api.ErrShutdown) {
		t.Errorf("spawn after shutdown: %v, want ErrShutdown", err)
	}
	if _, err := actors.GetActor[rcounter](ctx, rt, "after"); !errors.Is(err, api.ErrShutdown) {
		t.Errorf("get actor after shutdown: %v, want ErrShutdown", err)
	}
	if _, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); !errors.Is(err, api.ErrShutdown) {
		t.Errorf("call after shutdown: %v, want ErrShutdown", err)
	}
	if ctx.Err() != nil {
		t.Errorf("the calls after shutdown waited for their context")
	}
}
