package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"troupe/actors"
	"troupe/runtime/cluster"
	"troupe/runtime/wire"
	"troupe/scheduler"
)

// rfrozen is the actor of TestRemoteNodeFrozen.
type rfrozen struct{}

// Hang blocks (until its context ends or ms pass) only in the actor's
// first incarnation; a later one answers its restart count at once, so a
// retried call shows where it ran.
func (*rfrozen) Hang(ctx context.Context, ms int) (int, error) {
	info, _ := actors.Self(ctx)
	if info.Restarts > 0 {
		return info.Restarts, nil
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(ms) * time.Millisecond):
	}
	return 0, nil
}

// Block blocks until its context ends or ms pass.
func (*rfrozen) Block(ctx context.Context, ms int) (int, error) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(ms) * time.Millisecond):
	}
	return ms, nil
}

// HangSignal is Hang that signals its start (startedSignal).
func (f *rfrozen) HangSignal(ctx context.Context, a sleepArg) (int, error) {
	if info, _ := actors.Self(ctx); info.Restarts == 0 {
		signalStarted(a.Signal)
	}
	return f.Hang(ctx, a.Ms)
}

// BlockSignal is Block that signals its start (startedSignal).
func (f *rfrozen) BlockSignal(ctx context.Context, a sleepArg) (int, error) {
	signalStarted(a.Signal)
	return f.Block(ctx, a.Ms)
}

// frozenWhere says where an incarnation runs.
type frozenWhere struct {
	Node     string
	Pid      int
	Restarts int
}

func (*rfrozen) Where(ctx context.Context, _ int) (frozenWhere, error) {
	info, _ := actors.Self(ctx)
	return frozenWhere{Node: info.Node, Pid: os.Getpid(), Restarts: info.Restarts}, nil
}

func init() {
	actors.MustRegister("RFrozen", func(ctx context.Context, _ int) (*rfrozen, error) { return &rfrozen{}, nil })
}

// TestRemoteNodeFrozen: a worker node that vanishes without a TCP reset
// (its node process and worker process stopped with SIGSTOP: their sockets
// stay open and nothing is sent, like a killed container or a cut
// network) is declared dead by the cluster; the calls in flight to its
// actors then fail instead of waiting forever: with ErrActorRestarted
// (at-most-once), or sent again to the restarted actor with
// MaxTaskRetries, or, with no restarts left, with an *ActorDiedError
// naming the node.
func TestRemoteNodeFrozen(t *testing.T) {
	const tok = "node-frozen-token"
	t0 := time.Now()
	head := startHead(t, tok)
	defer head.Shutdown()
	var frozen []int
	t.Cleanup(func() {
		// Stopped processes die of SIGKILL; SIGCONT for good measure.
		for _, pid := range frozen {
			syscall.Kill(pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	procs := map[string]*exec.Cmd{}
	for _, id := range []string{"f1", "f2"} {
		cmd := nodeProcCmd(t, fmt.Sprintf("%s,127.0.0.1:%d,%d,%s,%s", id, freeTCPPort(t), freeTCPPort(t), tok, head.Addr()))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Wait()
		})
		procs[id] = cmd
	}
	t.Cleanup(func() { t.Logf("test body and shutdown done after %v", time.Since(t0).Round(time.Millisecond)) })
	freeze := func(node string, worker int) {
		t.Helper()
		for _, pid := range []int{worker, procs[node].Process.Pid} {
			frozen = append(frozen, pid)
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatalf("stop %d: %v", pid, err)
			}
		}
	}
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 3, 60*time.Second)
	defer done()
	t.Logf("cluster up after %v", time.Since(t0).Round(time.Millisecond))

	// Two actors in one worker process of one node: half the node's
	// "special" resource each, so both fit on the other node later.
	half := actors.Resources(map[string]float64{"special": 0.5})
	a, err := actors.Spawn[rfrozen](ctx, rt, "RFrozen", 0, half, actors.MaxRestarts(1))
	if err != nil {
		t.Fatal(err)
	}
	wa, err := actors.Call(ctx, a, (*rfrozen).Where, 0).Get(ctx)
	if err != nil || procs[wa.Node] == nil {
		t.Fatalf("a placed on %q, %v", wa.Node, err)
	}
	b, err := actors.Spawn[rfrozen](ctx, rt, "RFrozen", 0, half, actors.MaxRestarts(1), actors.MaxTaskRetries(1),
		actors.NodeAffinity(wa.Node, true))
	if err != nil {
		t.Fatal(err)
	}
	wb, err := actors.Call(ctx, b, (*rfrozen).Where, 0).Get(ctx)
	if err != nil || wb.Node != wa.Node || wb.Pid != wa.Pid {
		t.Fatalf("b at %+v, %v; want a's worker %+v", wb, err, wa)
	}

	// A long call to a healthy actor meanwhile: the watcher asks about it
	// (no reply for over an interval) and leaves it alone.
	c, err := actors.Spawn[rfrozen](ctx, rt, "RFrozen", 0, actors.NodeAffinity("head", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actors.Call(ctx, c, (*rfrozen).Where, 0).Get(ctx); err != nil {
		t.Fatal(err)
	}
	cc := actors.Call(ctx, c, (*rfrozen).Block, 2500)

	// The node vanishes with a call in flight to each actor.
	sig, started := startedSignal(t, ctx)
	ca := actors.Call(ctx, a, (*rfrozen).HangSignal, sleepArg{Ms: 60000, Signal: sig})
	cb := actors.Call(ctx, b, (*rfrozen).HangSignal, sleepArg{Ms: 60000, Signal: sig})
	started(2)
	freeze(wa.Node, wa.Pid)
	start := time.Now()
	if _, err := ca.Get(ctx); !errors.Is(err, actors.ErrActorRestarted) {
		t.Fatalf("in-flight call when its node vanished: %v, want ErrActorRestarted", err)
	}
	if v, err := cb.Get(ctx); err != nil || v != 1 {
		t.Fatalf("in-flight call with MaxTaskRetries when its node vanished: %v, %v; want an answer from restart 1", v, err)
	}
	t.Logf("node %s vanished: calls in flight ended after %v", wa.Node, time.Since(start).Round(time.Millisecond))
	if v, err := cc.Get(ctx); err != nil || v != 2500 {
		t.Fatalf("long call to a healthy actor: %v, %v; want 2500", v, err)
	}
	wa2, err := actors.Call(ctx, a, (*rfrozen).Where, 0).Get(ctx)
	if err != nil || wa2.Node == wa.Node || procs[wa2.Node] == nil || wa2.Restarts != 1 {
		t.Fatalf("a after its node vanished: %+v, %v; want restart 1 on the other node", wa2, err)
	}

	// The other node vanishes too: a has no restarts left.
	sig, started = startedSignal(t, ctx)
	ca = actors.Call(ctx, a, (*rfrozen).BlockSignal, sleepArg{Ms: 60000, Signal: sig})
	started(1)
	freeze(wa2.Node, wa2.Pid)
	start = time.Now()
	var de *actors.ActorDiedError
	if _, err := ca.Get(ctx); !errors.As(err, &de) || !strings.Contains(de.Error(), wa2.Node) {
		t.Fatalf("in-flight call with no restarts left: %v, want an ActorDiedError naming node %s", err, wa2.Node)
	}
	t.Logf("node %s vanished: call in flight ended after %v: %v", wa2.Node, time.Since(start).Round(time.Millisecond), de)
}

// TestCallWatch: the call watcher closes a connection only when every
// incarnation with calls pending on it went a whole look without a reply
// and the cluster no longer runs it (dead, or restarted since); a
// connection still answering, or with an incarnation the cluster still
// runs, stays open; incarnations with nothing in flight are dropped.
func TestCallWatch(t *testing.T) { synctest.Test(t, testCallWatch) }

func testCallWatch(t *testing.T) {
	state := map[string]*cluster.ActorView{}
	var mu sync.Mutex
	asked := map[string]int{}
	w := newCallWatchOf(func(_ context.Context, id string) (*cluster.ActorView, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[id]++
		v, ok := state[id]
		if !ok {
			return nil, fmt.Errorf("no actor %s", id)
		}
		return v, nil
	}, func(context.Context) (*cluster.ClusterStatus, error) { return nil, errors.New("no status here") }, time.Second)
	newConn := func() *wire.Client {
		a, b := net.Pipe()
		t.Cleanup(func() { b.Close() })
		cl := wire.NewClient(a, 0)
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	closed := func(cl *wire.Client) bool {
		select {
		case <-cl.Done():
			return true
		case <-time.After(2 * time.Second): // bubble time: Close runs on its own goroutine
			return false
		}
	}
	inc := func(id string, cl *wire.Client, restarts int) *incarnation {
		return &incarnation{ref: &actorRef{id: id}, cl: cl, inc: restarts, node: "n1"}
	}
	alive := func(restarts int) *cluster.ActorView {
		return &cluster.ActorView{State: scheduler.ActorAlive.String(), Restarts: restarts}
	}

	// Connection 1: two actors, both lost (one restarted, one dead).
	c1 := newConn()
	a1, b1 := inc("a1", c1, 0), inc("b1", c1, 2)
	state["a1"] = alive(1)
	state["b1"] = &cluster.ActorView{State: scheduler.ActorDead.String(), Restarts: 2}
	// Connection 2: one lost actor, one the cluster still runs there.
	c2 := newConn()
	a2, b2 := inc("a2", c2, 0), inc("b2", c2, 0)
	state["a2"] = alive(1)
	state["b2"] = alive(0)
	// Connection 3: a lost actor whose calls still get replies.
	c3 := newConn()
	a3 := inc("a3", c3, 0)
	state["a3"] = alive(3)
	// Connection 4: a lost actor with nothing in flight.
	c4 := newConn()
	a4 := inc("a4", c4, 0)
	state["a4"] = alive(1)

	for _, in := range []*incarnation{a1, b1, a2, b2, a3, a4} {
		in.begin(w)
	}
	a4.end()
	if got := w.check(); len(got) != 0 { // first look: nothing pending for a whole look yet
		t.Errorf("first look closed %d connections", len(got))
	}
	mu.Lock()
	if len(asked) != 0 {
		t.Errorf("first look asked the cluster about %v", asked)
	}
	mu.Unlock()
	a3.begin(w)
	a3.end() // a reply: a3 is not stalled
	if got := w.check(); len(got) != 1 || got[0] != c1 {
		t.Errorf("closed %v; want only c1 %p (c2 %p c3 %p c4 %p)", got, c1, c2, c3, c4)
	}
	if !closed(c1) {
		t.Errorf("connection whose incarnations are all gone was left open")
	}
	mu.Lock()
	if asked["a3"] != 0 || asked["a4"] != 0 {
		t.Errorf("asked about actors that answered or had nothing in flight: %v", asked)
	}
	mu.Unlock()
	w.mu.Lock()
	_, kept := w.incs[a4]
	w.mu.Unlock()
	if kept || a4.watched.Load() {
		t.Errorf("incarnation with nothing in flight still watched")
	}

	// b2 restarts too: now c2 goes; a3 stalls and goes.
	state["b2"] = alive(1)
	if got := w.check(); len(got) != 2 || (got[0] != c2 && got[1] != c2) || (got[0] != c3 && got[1] != c3) {
		t.Errorf("closed %v; want c2 %p and c3 %p", got, c2, c3)
	}
	if !closed(c2) || !closed(c3) {
		t.Errorf("c2 closed %v, c3 closed %v; want both", c2.Err(), c3.Err())
	}
	// A call begun after the incarnation was dropped is followed again.
	a4.begin(w)
	w.mu.Lock()
	_, kept = w.incs[a4]
	w.mu.Unlock()
	if !kept {
		t.Errorf("new call on a dropped incarnation is not watched")
	}
}
