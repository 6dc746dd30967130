package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"troupe/actors"
	"troupe/actors/collective"
	rcollective "troupe/runtime/collective"
	"troupe/runtime/pki"
	"troupe/runtime/transport"
	"troupe/runtime/wire"
)

// groupMember is an actor of the collective tests: it reduces with the
// group "g" formed over worker processes.
type groupMember struct{ done atomic.Int64 }

type groupMemberCfg struct{}

// Sum allreduces a buffer of n elements, element i of rank r being r+i,
// and returns its first and last elements.
func (m *groupMember) Sum(ctx context.Context, n int) ([2]float32, error) {
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

// Loop allreduces 64 MiB buffers until a call fails, and returns the
// failure.
func (m *groupMember) Loop(ctx context.Context, _ int) (string, error) {
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

// Done says how many of Loop's allreduces ended.
func (m *groupMember) Done(ctx context.Context, _ int) (int64, error) { return m.done.Load(), nil }

func init() {
	actors.MustRegister[groupMember]("WGroupMember", func(ctx context.Context, c groupMemberCfg) (*groupMember, error) {
		return &groupMember{}, nil
	})
}

// startMembers starts n worker processes with sec and env, one
// groupMember each (IDs w0, w1, ...), and returns handles to them.
func startMembers(t *testing.T, n int, sec transport.Security, env []string) ([]*Proc, []actors.Handle[groupMember]) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	procs := make([]*Proc, n)
	hs := make([]actors.Handle[groupMember], n)
	for i := range procs {
		procs[i], hs[i] = startMember(t, exe, i, sec, env)
	}
	return procs, hs
}

func startMember(t *testing.T, exe string, i int, sec transport.Security, env []string) (*Proc, actors.Handle[groupMember]) {
	ctx := context.Background()
	p, err := Start(ctx, StartOptions{Binary: exe, Job: "job-c", Host: "127.0.0.1", Env: env, Stderr: os.Stderr, Security: sec}, Events{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	id := fmt.Sprintf("w%d", i)
	if err := p.StartActor(ctx, actors.Spec{Type: "WGroupMember", Config: []byte{0x80}, MaxConcurrency: 2}, actors.ActorInfo{ID: id}); err != nil {
		t.Fatal(err)
	}
	cl, err := wire.Dial(ctx, sec, "tcp", p.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return p, actors.HandleOf[groupMember](cl.Ref(id, "", "WGroupMember", nil))
}

func memberRefs(hs []actors.Handle[groupMember]) []actors.Ref {
	out := make([]actors.Ref, len(hs))
	for i, h := range hs {
		out[i] = h.Ref()
	}
	return out
}

// TestCollectiveWorkersOneHost: a group of actors in three worker
// processes of one host (Unix sockets between them) reduces; a member
// killed with kill -9 in the middle of a 64 MiB allreduce fails the
// others' call at once, naming it; the group forms again once its actor
// has restarted in a new process.
func TestCollectiveWorkersOneHost(t *testing.T) {
	testCollectiveKill(t, testSec, nil)
}

// TestCollectiveWorkersTLS: the same with the members connected over TCP
// with TLS and the token, as members on two nodes are (the Unix shortcut
// off on this one host).
func TestCollectiveWorkersTLS(t *testing.T) {
	ca, _, err := pki.NewCA("cluster", 1)
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.IssueLocal(ca, pki.Names{CommonName: "node", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, "")
	if err != nil {
		t.Fatal(err)
	}
	testCollectiveKill(t, id.Security("collective-tls-token"), []string{rcollective.UnixEnv + "=0"})
}

func testCollectiveKill(t *testing.T, sec transport.Security, env []string) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cleanSockets(t)
	const n = 3
	procs, hs := startMembers(t, n, sec, env)
	if err := collective.Create(ctx, "g", memberRefs(hs)...); err != nil {
		t.Fatal(err)
	}
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
	sum(hs, 10)      // direct exchange
	sum(hs, 1000003) // ring

	loops := make([]*actors.Future[string], n)
	for i, h := range hs {
		loops[i] = actors.Call(ctx, h, (*groupMember).Loop, 0)
	}
	// Kill rank 1 once an allreduce has ended: the next is in flight.
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
	if d := time.Since(killed); d > rcollective.DefaultTimeout {
		t.Fatalf("the others' calls failed %v after the kill, more than the %v timeout", d, rcollective.DefaultTimeout)
	}
	// The actor restarts in a new process; the group forms again.
	exe, _ := os.Executable()
	_, hs[1] = startMember(t, exe, 1, sec, env)
	if err := collective.Create(ctx, "g", memberRefs(hs)...); err != nil {
		t.Fatal(err)
	}
	sum(hs, 100003)
}

// cleanSockets removes, when the test ends, the Unix sockets that its
// worker processes left in transport.LocalDir: a process killed with
// kill -9 cannot remove its own. Only new sockets that nothing listens on
// go: other tests of the host may be using theirs.
func cleanSockets(t *testing.T) {
	dir, err := transport.LocalDir()
	if err != nil {
		return
	}
	before := map[string]bool{}
	old, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range old {
		before[f] = true
	}
	// Registered first, so it runs after the processes' cleanups.
	t.Cleanup(func() {
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
