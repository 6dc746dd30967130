package worker

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/actors/collective"
	rcollective "troupe/runtime/collective"
)

// shmSegments counts the collective shared-memory segments process pid
// has mapped (one a peer on its host).
func shmSegments(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:troupe-collective")
}

// waitSegments waits (within a bound) until process pid maps want
// segments.
func waitSegments(t *testing.T, pid, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := shmSegments(t, pid)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d maps %d collective segments, want %d", pid, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCollectiveShmKill: three worker processes of one host exchange data
// through shared memory (each maps a segment per peer, passed as a memfd:
// nothing is named on disk). A member killed with kill -9 in the middle of
// a 64 MiB allreduce fails the others' call naming it, within the
// timeout; once the group is formed again after its actor restarted, each
// process maps the new group's segments only: the old ones are gone.
func TestCollectiveShmKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	if runtime.GOOS != "linux" {
		t.Skip("shared memory between members is Linux's")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cleanSockets(t)
	const n = 3
	procs, hs := startMembers(t, n, testSec, nil)
	sum := func(hs []actors.Handle[groupMember], size int) {
		t.Helper()
		futs := make([]*actors.Future[[2]float32], len(hs))
		for i, h := range hs {
			futs[i] = actors.Call(ctx, h, (*groupMember).Sum, size)
		}
		k := float32(len(hs))
		want := [2]float32{k * (k - 1) / 2, k*(k-1)/2 + k*float32(size-1)}
		for i, f := range futs {
			if got, err := f.Get(ctx); err != nil || got != want {
				t.Fatalf("member %d: Sum(%d) = %v, %v; want %v", i, size, got, err, want)
			}
		}
	}
	if err := collective.Create(ctx, "g", memberRefs(hs)...); err != nil {
		t.Fatal(err)
	}
	sum(hs, 1000003)
	for _, p := range procs {
		if got := shmSegments(t, p.PID()); got != n-1 {
			t.Fatalf("process %d maps %d collective segments, want %d (one a peer)", p.PID(), got, n-1)
		}
	}

	loops := make([]*actors.Future[string], n)
	for i, h := range hs {
		loops[i] = actors.Call(ctx, h, (*groupMember).Loop, 0)
	}
	for {
		d, err := actors.Call(ctx, hs[0], (*groupMember).Done, 0).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(procs[1].PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for _, i := range []int{0, 2} {
		msg, err := loops[i].Get(ctx)
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		if !strings.Contains(msg, collective.ErrMemberLost.Error()) || !strings.Contains(msg, "rank 1 (w1)") {
			t.Fatalf("member %d failed with %q, want member lost naming rank 1 (w1)", i, msg)
		}
	}
	d := time.Since(killed)
	if d > rcollective.DefaultTimeout {
		t.Fatalf("the others' calls failed %v after the kill, more than the %v timeout", d, rcollective.DefaultTimeout)
	}
	t.Logf("the others' calls failed %v after the kill", d)

	exe, _ := os.Executable()
	procs[1], hs[1] = startMember(t, exe, 1, testSec, nil)
	if err := collective.Create(ctx, "g", memberRefs(hs)...); err != nil {
		t.Fatal(err)
	}
	sum(hs, 100003)
	for _, p := range procs {
		waitSegments(t, p.PID(), n-1)
	}
}
