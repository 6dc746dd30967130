package driver

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
	"troupe/runtime/wire"
)

// TestLostNodeIncarnationsFenced: a worker node is lost (its node process
// and its worker process stopped with SIGSTOP: no reset, no fence of its
// own), the cluster restarts its actor on the other node after the short
// suspect grace, and no two incarnations of the actor both complete calls
// for the driver: every answer it takes after the restart comes from the
// new incarnation, though the old worker process is running again and
// reachable (only its node stays stopped, so nothing there ends the old
// incarnation). A caller that names the new incarnation at the old
// worker's address is refused with ErrStaleIncarnation, and that ends the
// old incarnation there at once: a later call finds no actor.
func TestLostNodeIncarnationsFenced(t *testing.T) {
	const tok = "fenced-token"
	head := startHead(t, tok)
	defer head.Shutdown()
	var stopped []int
	t.Cleanup(func() {
		for _, pid := range stopped {
			syscall.Kill(pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	procs := map[string]*exec.Cmd{}
	for _, id := range []string{"g1", "g2"} {
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
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 3, 60*time.Second)
	defer done()
	a, err := actors.Spawn[rfrozen](ctx, rt, "RFrozen", 0, actors.Resources(map[string]float64{"special": 1}), actors.MaxRestarts(1))
	if err != nil {
		t.Fatal(err)
	}
	// answers are the incarnations that completed the driver's calls, in
	// the order the driver took them.
	var answers []int
	where := func() frozenWhere {
		t.Helper()
		w, err := actors.Call(ctx, a, (*rfrozen).Where, 0).Get(ctx)
		if err != nil {
			t.Fatalf("Where: %v", err)
		}
		answers = append(answers, w.Restarts)
		return w
	}
	w0 := where()
	if procs[w0.Node] == nil || w0.Restarts != 0 {
		t.Fatalf("placed at %+v, want incarnation 0 on g1 or g2", w0)
	}
	v0, err := rt.client.GetActorByID(ctx, a.ID())
	if err != nil || v0.Address == "" {
		t.Fatalf("committed view of incarnation 0: %+v, %v", v0, err)
	}

	sig, started := startedSignal(t, ctx)
	inflight := actors.Call(ctx, a, (*rfrozen).HangSignal, sleepArg{Ms: 60000, Signal: sig})
	started(1)
	lost := time.Now()
	for _, pid := range []int{w0.Pid, procs[w0.Node].Process.Pid} {
		stopped = append(stopped, pid)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := inflight.Get(ctx); !errors.Is(err, actors.ErrActorRestarted) {
		t.Fatalf("call in flight to the lost node: %v, want ErrActorRestarted", err)
	}
	w1 := where()
	if w1.Restarts != 1 || w1.Node == w0.Node {
		t.Fatalf("after the loss: %+v, want incarnation 1 on the other node", w1)
	}
	t.Logf("node %s lost: incarnation 1 answered on %s %v later", w0.Node, w1.Node, time.Since(lost).Round(time.Millisecond))

	// The old worker runs again, incarnation 0 in it, reachable; its node
	// stays stopped (a node cut off from the servers, not from callers).
	if err := syscall.Kill(w0.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		where()
	}
	for i, inc := range answers {
		if i > 0 && inc < answers[i-1] {
			t.Fatalf("the driver took answers of incarnations %v: incarnation %d answered after incarnation %d", answers, inc, answers[i-1])
		}
	}
	if n := rt.epochs.newest(a.ID()); n != 1 {
		t.Errorf("the driver's newest incarnation of the actor: %d, want 1 (a late answer of incarnation 0 would be refused)", n)
	}

	// A caller that knows incarnation 1 reaches the old worker: refused,
	// and incarnation 0 ends there.
	cl, err := wire.Dial(ctx, rt.sec, "tcp", v0.Address, 0)
	if err != nil {
		t.Fatalf("dial the old worker at %s: %v", v0.Address, err)
	}
	defer cl.Close()
	arg, _ := msgpack.Marshal(0)
	call := func(inc int) error {
		p := actors.NewPromise()
		cl.InvokeIncarnation(a.ID(), inc, &actors.Invocation{Method: "Where", Arg: arg, Reply: p})
		_, err := p.Wait(ctx)
		return err
	}
	if err := call(1); !errors.Is(err, actors.ErrStaleIncarnation) {
		t.Fatalf("call for incarnation 1 at the old worker: %v, want ErrStaleIncarnation", err)
	}
	if err := call(0); !errors.Is(err, actors.ErrNotFound) {
		t.Fatalf("call for incarnation 0 after the old worker saw incarnation 1: %v, want ErrNotFound (ended)", err)
	}
	if w := where(); w.Restarts != 1 {
		t.Fatalf("the actor after the old incarnation ended: %+v, want incarnation 1", w)
	}
}

// TestStaleReferenceFencesOldWorker: only a worker node's own process is
// stopped, so its worker process, which runs incarnation 0 of an actor,
// stays reachable while the cluster restarts the actor elsewhere. A
// reference that still holds incarnation 0 sends nothing more there once
// the driver has seen incarnation 1 through another reference: its next
// call is answered by incarnation 1, and the old worker is told, which
// ends incarnation 0 there.
func TestStaleReferenceFencesOldWorker(t *testing.T) {
	const tok = "stale-ref-token"
	head := startHead(t, tok)
	defer head.Shutdown()
	var stopped []int
	t.Cleanup(func() {
		for _, pid := range stopped {
			syscall.Kill(pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	procs := map[string]*exec.Cmd{}
	for _, id := range []string{"h1", "h2"} {
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
	ctx, rt, done := connectDriver(t, tok, head.Addr(), 3, 60*time.Second)
	defer done()
	a, err := actors.Spawn[rfrozen](ctx, rt, "RFrozen", 0, actors.Name("fenced"), actors.Resources(map[string]float64{"special": 1}), actors.MaxRestarts(1))
	if err != nil {
		t.Fatal(err)
	}
	w0, err := actors.Call(ctx, a, (*rfrozen).Where, 0).Get(ctx)
	if err != nil || procs[w0.Node] == nil {
		t.Fatalf("placed at %+v, %v", w0, err)
	}
	v0, err := rt.client.GetActorByID(ctx, a.ID())
	if err != nil || v0.Address == "" {
		t.Fatalf("committed view of incarnation 0: %+v, %v", v0, err)
	}
	node := procs[w0.Node].Process.Pid
	stopped = append(stopped, node, w0.Pid)
	if err := syscall.Kill(node, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := rt.client.GetActorByID(ctx, a.ID())
		if err == nil && v.Restarts == 1 && v.Address != "" && v.State == "ALIVE" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("actor not restarted after its node stopped: %+v, %v", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := actors.GetActor[rfrozen](ctx, rt, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	if w, err := actors.Call(ctx, b, (*rfrozen).Where, 0).Get(ctx); err != nil || w.Restarts != 1 {
		t.Fatalf("new reference: %+v, %v; want incarnation 1", w, err)
	}
	if w, err := actors.Call(ctx, a, (*rfrozen).Where, 0).Get(ctx); err != nil || w.Restarts != 1 || w.Node == w0.Node {
		t.Fatalf("old reference after the driver saw incarnation 1: %+v, %v; want incarnation 1 elsewhere", w, err)
	}
	cl, err := wire.Dial(ctx, rt.sec, "tcp", v0.Address, 0)
	if err != nil {
		t.Fatalf("dial the old worker at %s: %v", v0.Address, err)
	}
	defer cl.Close()
	arg, _ := msgpack.Marshal(0)
	for {
		p := actors.NewPromise()
		cl.InvokeIncarnation(a.ID(), 0, &actors.Invocation{Method: "Where", Arg: arg, Reply: p})
		_, err := p.Wait(ctx)
		if errors.Is(err, actors.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("incarnation 0 still answers at the old worker: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCallBehindARestartIsResent: a driver that has not seen an actor's
// restart in the same worker process sends a call naming the old
// incarnation to the same address; the worker refuses it before running
// it (ErrStaleIncarnation), so the driver sends it to the new
// incarnation, which answers, although the actor has no task retries.
func TestCallBehindARestartIsResent(t *testing.T) {
	const tok = "behind-token"
	n := startHead(t, tok)
	defer n.Shutdown()
	ctx, rt, done := connectDriver(t, tok, n.Addr(), 1, 50*time.Second)
	defer done()
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: 5}, actors.Name("behind"), actors.MaxRestarts(1))
	if err != nil {
		t.Fatal(err)
	}
	rt2, err := connect(ctx, n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Shutdown(ctx)
	g, err := actors.GetActor[rcounter](ctx, rt2, "behind")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := actors.Call(ctx, g, (*rcounter).Whoami, 0).Get(ctx); err != nil || info.Restarts != 0 {
		t.Fatalf("second driver: %+v, %v; want incarnation 0", info, err)
	}
	pid, _ := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
	if _, err := actors.Call(ctx, h, (*rcounter).Boom, 0).Get(ctx); !errors.Is(err, actors.ErrActorRestarted) {
		t.Fatalf("crash: %v, want ErrActorRestarted", err)
	}
	info, err := actors.Call(ctx, h, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || info.Restarts != 1 {
		t.Fatalf("after the crash: %+v, %v; want incarnation 1", info, err)
	}
	if p2, _ := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx); p2 != pid {
		t.Fatalf("restart moved to process %d from %d; this test needs the same worker", p2, pid)
	}
	if n := rt2.epochs.newest(h.ID()); n != 0 {
		t.Fatalf("the second driver has seen incarnation %d already; the test needs it behind", n)
	}
	info, err = actors.Call(ctx, g, (*rcounter).Whoami, 0).Get(ctx)
	if err != nil || info.Restarts != 1 {
		t.Fatalf("second driver's call behind the restart: %+v, %v; want an answer of incarnation 1", info, err)
	}
}
