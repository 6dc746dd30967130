package runtime

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"troupe/actors"
)

// TestRemoteKillIsSynchronous: Spawn, Call, Kill, Call, in a loop, with the
// actor in a worker process of a node in another process and the driver
// here. When Kill returns, every later call fails with *ActorDiedError:
// through the killing handle, and through a second handle (found by name)
// whose connection to the worker was made before the Kill and that never
// looks the actor up again unless the worker refuses it. Before Kill was
// synchronous, calls kept succeeding for 50-85 ms after it returned on a
// loaded cluster.
func TestRemoteKillIsSynchronous(t *testing.T) {
	const tok = "kill-sync-token"
	head := startHead(t, tok)
	defer head.Shutdown()
	cmd := nodeProcCmd(t, fmt.Sprintf("kn1,127.0.0.1:%d,%d,%s,%s", freeTCPPort(t), freeTCPPort(t), tok, head.Addr()))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 2, 90*time.Second)
	defer done()
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for i := 0; i < rounds; i++ {
		name := fmt.Sprintf("victim-%d", i)
		h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: i}, actors.Name(name),
			actors.Resources(map[string]float64{"special": 1}))
		if err != nil {
			t.Fatalf("round %d: spawn: %v", i, err)
		}
		info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
		if err != nil || info.Node != "kn1" {
			t.Fatalf("round %d: placed on %q, %v; want kn1 (another process)", i, info.Node, err)
		}
		other, err := actors.GetActor[rcounter](ctx, rt, name)
		if err != nil {
			t.Fatalf("round %d: get by name: %v", i, err)
		}
		if v, err := actors.Call(ctx, other, (*rcounter).Add, 1).Get(ctx); err != nil || v != i+1 {
			t.Fatalf("round %d: call through the second handle: %d, %v", i, v, err)
		}
		if err := actors.Kill(ctx, h); err != nil {
			t.Fatalf("round %d: kill: %v", i, err)
		}
		var de *actors.ActorDiedError
		if v, err := actors.Call(ctx, other, (*rcounter).Add, 1).Get(ctx); !errors.As(err, &de) {
			t.Fatalf("round %d: call through a handle connected before Kill, after Kill returned: %d, %v; want *ActorDiedError", i, v, err)
		}
		if v, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); !errors.As(err, &de) {
			t.Fatalf("round %d: call after Kill returned: %d, %v; want *ActorDiedError", i, v, err)
		}
	}
}
