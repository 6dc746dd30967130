package runtime

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"troupe/actors"
)

func whoami(t *testing.T, ctx context.Context, h actors.Handle[rcounter]) actors.ActorInfo {
	t.Helper()
	info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestPlacementGroupsEmbedded: on the embedded cluster (two NVLink islands
// of four simulated GPUs), a STRICT_PACK group of two 2-GPU bundles lands
// on one island; an actor in bundle 1 sees the group, its bundle, the node
// and the bundle's GPUs through Self; a group that can never fit fails at
// once; one that must wait is PENDING with a reason until the first group
// is removed, which kills the first group's actors and the spawns waiting
// in it.
func TestPlacementGroupsEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt := initLocal(t, SimulateGPUs("2x4-nvlink"), NodeCPUs(8), NodeMemory(16<<30))
	gpu2 := actors.ResourceSet{GPUs: 2, CPUs: 1}
	pg, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{gpu2, gpu2}, StrictPack, "trainers")
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := pg.Ready(ctx); !ok || err != nil {
		t.Fatalf("Ready = %v, %v", ok, err)
	}
	bundles, err := pg.Bundles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bundles) != 2 || bundles[0].Node != "local" || !reflect.DeepEqual(bundles[0].GPUs, []int{0, 1}) || !reflect.DeepEqual(bundles[1].GPUs, []int{2, 3}) {
		t.Fatalf("bundles %+v, want [0 1] and [2 3] (one NVLink island) on local", bundles)
	}

	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.GPUs(2), actors.PlacementGroup(pg, 1))
	if err != nil {
		t.Fatal(err)
	}
	info := whoami(t, ctx, h)
	if info.PlacementGroup != pg.ID() || info.Bundle != 1 || info.Node != "local" || !reflect.DeepEqual(info.GPUs, []int{2, 3}) {
		t.Fatalf("Self in bundle 1 = %+v, want group %s bundle 1 GPUs [2 3]", info, pg.ID())
	}
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.GPUs(3), actors.PlacementGroup(pg, 0)); !errors.Is(err, actors.ErrInfeasible) {
		t.Fatalf("3 GPUs in a 2-GPU bundle: %v, want ErrInfeasible", err)
	}
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.PlacementGroup(pg, 2)); !errors.Is(err, actors.ErrInfeasible) {
		t.Fatalf("bundle 2 of 2: %v, want ErrInfeasible", err)
	}

	// Never fits: fails at once.
	if _, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{{GPUs: 16}}, Pack, ""); !errors.Is(err, actors.ErrInfeasible) {
		t.Fatalf("16-GPU bundle: %v, want ErrInfeasible", err)
	}
	if _, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{{CPUs: 1}, {CPUs: 1}}, StrictSpread, ""); !errors.Is(err, actors.ErrInfeasible) {
		t.Fatalf("STRICT_SPREAD over one node: %v, want ErrInfeasible", err)
	}
	if _, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{{}}, Pack, ""); err == nil || !strings.Contains(err.Error(), "bundle 0 is empty") {
		t.Fatalf("empty bundle: %v", err)
	}

	// Must wait: 8 GPUs while 4 are reserved.
	big, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{{GPUs: 8}}, Pack, "big")
	if err != nil {
		t.Fatal(err)
	}
	info2, err := big.Info(ctx)
	if err != nil || info2.State != "PENDING" || !strings.Contains(info2.Pending, "8 free GPUs") {
		t.Fatalf("big group: %+v %v, want PENDING naming 8 free GPUs", info2, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	err = big.Wait(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "8 free GPUs") {
		t.Fatalf("Wait on a pending group: %v, want the deadline and the reason", err)
	}

	// A spawn waiting in the full bundle 1 fails when the group goes.
	waited := make(chan error, 1)
	go func() {
		_, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.GPUs(1), actors.PlacementGroup(pg, 1))
		waited <- err
	}()
	waitUntil(t, "the spawn to wait in bundle 1", func() bool {
		st, _ := rt.Status(ctx)
		for _, a := range st.Actors {
			if a.State == "PENDING" && strings.Contains(a.Death, "bundle 1 of placement group") {
				return true
			}
		}
		return false
	})

	if err := pg.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	var died *actors.ActorDiedError
	if err := <-waited; !errors.As(err, &died) || !strings.Contains(err.Error(), "removed") {
		t.Fatalf("spawn waiting in a removed group: %v", err)
	}
	if _, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); !errors.As(err, &died) {
		t.Fatalf("call to an actor of a removed group: %v", err)
	}
	if err := pg.Remove(ctx); !errors.Is(err, ErrPlacementGroupRemoved) {
		t.Fatalf("second Remove: %v", err)
	}
	if err := pg.Wait(ctx); !errors.Is(err, ErrPlacementGroupRemoved) {
		t.Fatalf("Wait on a removed group: %v", err)
	}
	if err := big.Wait(ctx); err != nil {
		t.Fatalf("big group after the first was removed: %v", err)
	}
	if b, _ := big.Bundles(ctx); len(b) != 1 || len(b[0].GPUs) != 8 {
		t.Fatalf("big group bundles %+v", b)
	}
	if err := big.Remove(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNodeAffinityEmbedded: hard affinity to an unknown node fails at
// once, naming it; to the embedded node it works; soft affinity to an
// unknown node falls back.
func TestNodeAffinityEmbedded(t *testing.T) {
	ctx := context.Background()
	rt := initLocal(t, NodeCPUs(4))
	_, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.NodeAffinity("gpu-7", false))
	if !errors.Is(err, actors.ErrInfeasible) || !strings.Contains(err.Error(), "node gpu-7, which is not in the cluster") {
		t.Fatalf("hard affinity to an unknown node: %v", err)
	}
	for _, soft := range []bool{false, true} {
		node := "local"
		if soft {
			node = "gpu-7"
		}
		h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.NodeAffinity(node, soft))
		if err != nil {
			t.Fatal(err)
		}
		if info := whoami(t, ctx, h); info.Node != "local" || info.PlacementGroup != "" {
			t.Fatalf("affinity(%s, soft=%v): %+v", node, soft, info)
		}
	}
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.NodeAffinity("", true)); err == nil || !strings.Contains(err.Error(), "soft affinity without a node") {
		t.Fatalf("soft affinity without a node: %v", err)
	}
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.PlacementGroup(nil, 3)); err == nil || !strings.Contains(err.Error(), "without a placement group") {
		t.Fatalf("bundle without a group: %v", err)
	}
}

// waitUntil polls cond (generous deadline: only for progress, never speed).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPlacementGroupWaitEndsOnRemove: a Wait on a pending group returns
// ErrPlacementGroupRemoved when another goroutine removes the group.
func TestPlacementGroupWaitEndsOnRemove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt := initLocal(t, NodeCPUs(2))
	pg, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{{CPUs: 2}}, Pack, "")
	if err != nil {
		t.Fatal(err)
	}
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, actors.CPUs(2), actors.PlacementGroup(pg, 0))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := CreatePlacementGroup(ctx, rt, []actors.ResourceSet{{CPUs: 2}}, Pack, "")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pending.Wait(ctx) }()
	if err := pending.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrPlacementGroupRemoved) {
		t.Fatalf("Wait on a group removed meanwhile: %v", err)
	}
	// The first group's actor still runs: removing another group freed nothing of it.
	if _, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); err != nil {
		t.Fatal(err)
	}
}
