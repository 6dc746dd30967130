package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime/cluster"
	"troupe/scheduler"
)

// TestRemotePlacementGroups: through a cluster (the leader's placement
// group service, committed through raft), a STRICT_PACK group is
// reserved; an actor started in bundle 1 in a worker process sees its
// group, bundle and node through Self; infeasible groups and actors fail at
// once; a group that must wait reports why and is reserved once the first
// group's removal frees room; removing a group ends its actors.
func TestRemotePlacementGroups(t *testing.T) {
	const tok = "remote-groups-token"
	n := startHead(t, tok) // 4 CPUs
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, time.Minute)
	defer done()

	cpu1 := actors.ResourceSet{CPUs: 1}
	pg, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{cpu1, cpu1}, StrictPack, "pair")
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	bundles, err := pg.Bundles(ctx)
	if err != nil || len(bundles) != 2 || bundles[0].Node != "head" || bundles[1].Node != "head" {
		t.Fatalf("bundles %+v, %v", bundles, err)
	}
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.CPUs(1), actors.PlacementGroup(pg, 1))
	if err != nil {
		t.Fatal(err)
	}
	if info := whoami(t, ctx, h); info.PlacementGroup != pg.ID() || info.Bundle != 1 || info.Node != "head" {
		t.Fatalf("Self in the worker = %+v, want group %s bundle 1 on head", info, pg.ID())
	}

	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.CPUs(2), actors.PlacementGroup(pg, 0)); !errors.Is(err, actors.ErrInfeasible) {
		t.Fatalf("2 CPUs in a 1-CPU bundle: %v, want ErrInfeasible", err)
	}
	if _, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{{CPUs: 64}}, Pack, ""); !errors.Is(err, actors.ErrInfeasible) {
		t.Fatalf("64-CPU bundle: %v, want ErrInfeasible", err)
	}
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.NodeAffinity("gpu-7", false)); !errors.Is(err, actors.ErrInfeasible) || !strings.Contains(err.Error(), "gpu-7") {
		t.Fatalf("hard affinity to an unknown node: %v", err)
	}

	big, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{{CPUs: 3}}, Pack, "big")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := big.Info(ctx); err != nil || info.State != "PENDING" || !strings.Contains(info.Pending, "head") {
		t.Fatalf("big group: %+v %v, want PENDING naming head", info, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	err = big.Wait(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "CPU") {
		t.Fatalf("Wait on a pending group: %v, want the deadline and the reason", err)
	}

	if err := pg.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := big.Wait(ctx); err != nil {
		t.Fatalf("big group after the first was removed: %v", err)
	}
	var died *actors.ActorDiedError
	for {
		_, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx)
		if errors.As(err, &died) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("actor of a removed group still answers: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(died.Error(), "removed") {
		t.Errorf("death of a removed group's actor: %v", died)
	}
	if err := pg.Remove(ctx); !errors.Is(err, ErrPlacementGroupRemoved) {
		t.Fatalf("second Remove: %v", err)
	}
	if err := big.Remove(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteHardAffinityNodeLost: an actor with hard affinity to a worker
// node runs there; when the node leaves, the actor is not restarted
// elsewhere but dies with a cause naming the node, and a later spawn with
// hard affinity to the dead node fails at once.
func TestRemoteHardAffinityNodeLost(t *testing.T) {
	const tok = "hard-affinity-token"
	head := startHead(t, tok)
	defer head.Shutdown()
	w1, err := cluster.Start(context.Background(), cluster.Config{NodeID: "w1", Role: cluster.RoleWorker, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), Token: tok, Join: []string{head.Addr()},
		Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(discard{}, nil)),
		Resources: scheduler.Resources{MilliCPU: 2000, MemoryBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Shutdown()
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 2, time.Minute)
	defer done()
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.NodeAffinity("w1", false), actors.MaxRestarts(-1))
	if err != nil {
		t.Fatal(err)
	}
	if info := whoami(t, ctx, h); info.Node != "w1" {
		t.Fatalf("hard affinity to w1: placed on %q", info.Node)
	}
	w1.Shutdown()
	var died *actors.ActorDiedError
	for {
		_, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx)
		if errors.As(err, &died) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("actor with hard affinity to a lost node: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(died.Cause, "hard affinity to node w1, which is dead") {
		t.Fatalf("death cause %q, want it to name the dead node", died.Cause)
	}
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.NodeAffinity("w1", false)); !errors.Is(err, actors.ErrInfeasible) || !strings.Contains(err.Error(), "w1, which is dead") {
		t.Fatalf("spawn with hard affinity to the dead node: %v", err)
	}
}
