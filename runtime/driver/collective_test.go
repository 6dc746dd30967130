package driver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/actors/collective"
	rcollective "troupe/runtime/collective"
	"troupe/runtime/transport"
)

// rmember is an actor of the two-node collective test.
type rmember struct{ done atomic.Int64 }

// Sum allreduces n elements, element i of rank r being r+i, and returns
// the first and the last.
func (m *rmember) Sum(ctx context.Context, n int) ([2]float32, error) {
	g, err := collective.Of(ctx, "g")
	if err != nil {
		return [2]float32{}, err
	}
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = float32(g.Rank() + i)
	}
	if err := g.Allreduce(ctx, buf, collective.Sum); err != nil {
		return [2]float32{}, err
	}
	return [2]float32{buf[0], buf[n-1]}, nil
}

// Loop allreduces 64 MiB until a call fails and returns the failure.
func (m *rmember) Loop(ctx context.Context, _ int) (string, error) {
	g, err := collective.Of(ctx, "g")
	if err != nil {
		return "", err
	}
	buf := make([]float32, 16<<20)
	for {
		if err := g.Allreduce(ctx, buf, collective.Sum); err != nil {
			return err.Error(), nil
		}
		m.done.Add(1)
	}
}

func (m *rmember) Done(ctx context.Context, _ int) (int64, error) { return m.done.Load(), nil }

// Where says the actor's node and restarts.
func (m *rmember) Where(ctx context.Context, _ int) (actors.ActorInfo, error) {
	info, _ := actors.Self(ctx)
	return info, nil
}

func (m *rmember) Pid(ctx context.Context, _ int) (int, error) { return os.Getpid(), nil }

func init() {
	actors.MustRegister("RMember", func(ctx context.Context, _ struct{}) (*rmember, error) { return &rmember{}, nil })
}

// TestCollectiveTwoNodes: a group of two actors on two nodes of a loopback
// cluster (the head in this process, a node in another; the members'
// worker processes connect over TCP with the cluster's security, the Unix
// shortcut off as between hosts) reduces; kill -9 of one member's worker
// in the middle of a 64 MiB allreduce fails the other's call at once,
// naming it; the actor restarts and the group forms again.
func TestCollectiveTwoNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process and workers")
	}
	t.Setenv(rcollective.UnixEnv, "0")
	cleanStaleSockets(t)
	const tok = "collective-two-nodes"
	head := startHead(t, tok)
	defer head.Shutdown()
	cmd := nodeProcCmd(t, strings.Join([]string{"p1", "127.0.0.1:" + strconv.Itoa(freeTCPPort(t)), strconv.Itoa(freeTCPPort(t)), tok, head.Addr()}, ","))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 2, 90*time.Second)
	defer done()

	// Three CPUs fit only the head; "special" only p1.
	a, err := actors.Spawn[rmember](ctx, rt, "RMember", struct{}{}, actors.CPUs(3), actors.MaxConcurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	b, err := actors.Spawn[rmember](ctx, rt, "RMember", struct{}{}, actors.CPUs(0.5), actors.Resources(map[string]float64{"special": 1}), actors.MaxConcurrency(2), actors.MaxRestarts(1))
	if err != nil {
		t.Fatal(err)
	}
	wa, _ := actors.Call(ctx, a, (*rmember).Where, 0).Get(ctx)
	wb, _ := actors.Call(ctx, b, (*rmember).Where, 0).Get(ctx)
	if wa.Node != "head" || wb.Node != "p1" {
		t.Fatalf("placed on %q and %q, want head and p1", wa.Node, wb.Node)
	}
	hs := []actors.Handle[rmember]{a, b}
	refs := []actors.Ref{a.Ref(), b.Ref()}
	if err := collective.Create(ctx, "g", refs...); err != nil {
		t.Fatal(err)
	}
	sum := func(size int) {
		t.Helper()
		fa := actors.Call(ctx, a, (*rmember).Sum, size)
		fb := actors.Call(ctx, b, (*rmember).Sum, size)
		want := [2]float32{1, 1 + 2*float32(size-1)}
		for i, f := range []*actors.Future[[2]float32]{fa, fb} {
			if got, err := f.Get(ctx); err != nil || got != want {
				t.Fatalf("member %d: Sum(%d) = %v, %v; want %v", i, size, got, err, want)
			}
		}
	}
	sum(10)
	sum(300001)

	loops := []*actors.Future[string]{actors.Call(ctx, a, (*rmember).Loop, 0), actors.Call(ctx, b, (*rmember).Loop, 0)}
	for {
		d, err := actors.Call(ctx, hs[0], (*rmember).Done, 0).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid, err := actors.Call(ctx, b, (*rmember).Pid, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	msg, err := loops[0].Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, collective.ErrMemberLost.Error()) || !strings.Contains(msg, "rank 1 ("+b.ID()+")") {
		t.Fatalf("the surviving member failed with %q, want member lost naming rank 1 (%s)", msg, b.ID())
	}
	if d := time.Since(killed); d > rcollective.DefaultTimeout {
		t.Fatalf("the call failed %v after the kill, more than the %v timeout", d, rcollective.DefaultTimeout)
	}
	if _, err := loops[1].Get(ctx); err == nil {
		t.Fatalf("the killed member's call succeeded")
	}
	// b restarts (in a new worker of p1); the group forms again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		w, err := actors.Call(ctx, b, (*rmember).Where, 0).Get(ctx)
		if err == nil && w.Restarts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never restarted: %+v %v", w, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := collective.Create(ctx, "g", refs...); err != nil {
		t.Fatal(err)
	}
	sum(1000)
}

// cleanStaleSockets removes, when the test ends, the Unix sockets that
// appeared in transport.LocalDir during it and that nothing listens on: a
// worker killed with kill -9 cannot remove its own. Other tests' live
// sockets stay.
func cleanStaleSockets(t *testing.T) {
	dir, err := transport.LocalDir()
	if err != nil {
		return
	}
	before := map[string]bool{}
	old, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range old {
		before[f] = true
	}
	t.Cleanup(func() { // registered first, it runs after the nodes stopped
		now, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, f := range now {
			if before[f] {
				continue
			}
			if c, err := net.Dial("unix", f); err == nil {
				c.Close()
			} else if errors.Is(err, syscall.ECONNREFUSED) {
				os.Remove(f)
			}
		}
	})
}
