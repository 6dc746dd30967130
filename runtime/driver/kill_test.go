package driver

import (
	"context"
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

// TestRemoteNodeFencesItself: a node (another process) that loses the
// cluster (here every server stops) kills its job's worker processes
// itself once it has had no contact for the lease (4 s with FastTiming),
// not before, and lives on: the backstop that ends incarnations the
// leader has restarted elsewhere (they are fenced off by their epochs
// meanwhile) where no epoch reaches.
func TestRemoteNodeFencesItself(t *testing.T) {
	const tok = "fence-token"
	head := startHead(t, tok)
	defer head.Shutdown()
	cmd := nodeProcCmd(t, fmt.Sprintf("fn1,127.0.0.1:%d,%d,%s,%s", freeTCPPort(t), freeTCPPort(t), tok, head.Addr()))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	t.Setenv("TROUPE_TOKEN", tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt, err := connect(ctx, head.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // the cluster is gone: do not wait long for it
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		rt.Shutdown(sctx)
	}()
	waitNodes(t, rt, 2)
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.Resources(map[string]float64{"special": 1}))
	if err != nil {
		t.Fatal(err)
	}
	wpid, err := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	head.Shutdown()
	for alive(wpid) && time.Since(lost) < 20*time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(lost)
	if alive(wpid) {
		t.Fatalf("worker process %d still runs %v after its node lost the cluster", wpid, took.Round(time.Millisecond))
	}
	// Contact was last made at most one sync (400 ms) before the loss.
	if took < 3*time.Second {
		t.Errorf("worker process stopped %v after the loss, before the 4 s lease", took.Round(time.Millisecond))
	}
	if !alive(cmd.Process.Pid) {
		t.Error("the node process itself exited: it should only have stopped its actors")
	}
	t.Logf("node fenced itself %v after losing the cluster (lease 4 s)", took.Round(time.Millisecond))
}
