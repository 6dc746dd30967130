package driver

import (
	"context"
	"errors"
	goruntime "runtime"
	"strings"
	"testing"
	"time"
	"troupe/runtime/api"

	"troupe/actors"
)

// driverGoroutines returns the stacks of goroutines running the driver's
// code (this package and the wire clients it owns).
func driverGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:goruntime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, mark := range []string{"troupe/runtime/driver.(*Driver)", "troupe/runtime/driver.(*actorRef)", "troupe/runtime/driver.(*spawner)",
			"troupe/runtime/driver.(*callWatch)", "troupe/runtime/driver.(*objRefs)", "troupe/runtime/wire.(*Client)"} {
			if strings.Contains(g, mark) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// TestDriverShutdownLeak: when Shutdown returns, no goroutine of the
// driver is left (spawner, call watcher, keep-alives, actor lookups, wire
// connections).
func TestDriverShutdownLeak(t *testing.T) {
	const tok = "leak-token"
	n := startHead(t, tok)
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, 50*time.Second)
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: 1})
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
	done()
	if gs := driverGoroutines(); len(gs) > 0 {
		t.Errorf("%d driver goroutines left after Shutdown:\n%s", len(gs), strings.Join(gs, "\n\n"))
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
