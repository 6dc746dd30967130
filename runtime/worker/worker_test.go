package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
	"troupe/runtime/transport"

	"github.com/vmihailenco/msgpack/v5"

	"troupe/actors"
	rcollective "troupe/runtime/collective"
	"troupe/runtime/wire"
)

type counter struct{ n int }

type counterCfg struct{ Start int }

func (c *counter) Add(ctx context.Context, d int) (int, error) { c.n += d; return c.n, nil }

func (c *counter) Boom(ctx context.Context, _ int) (int, error) { panic(actors.Crash("boom")) }

func (c *counter) Where(ctx context.Context, _ int) ([]int, error) {
	info, _ := actors.Self(ctx)
	return info.GPUs, nil
}

func init() {
	actors.MustRegister[counter]("WCounter", func(ctx context.Context, c counterCfg) (*counter, error) {
		if c.Start < 0 {
			return nil, errors.New("negative start")
		}
		return &counter{n: c.Start}, nil
	})
}

// TestMain serves as a worker when the test starts itself as one.
// testSec is what the test workers authenticate with.
var testSec = transport.Security{Token: "worker-test-token"}

func TestMain(m *testing.M) {
	if v, ok := os.LookupEnv(EnvVar); ok {
		if err := ServeProcess(context.Background(), v, os.Getenv(HostEnvVar), Options{NoCollectiveUnix: os.Getenv(rcollective.UnixEnv) == "0"}); err != nil {
			os.Stderr.WriteString("worker: " + err.Error() + "\n")
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func spec(t *testing.T, start int) actors.Spec {
	cfg, err := msgpack.Marshal(counterCfg{Start: start})
	if err != nil {
		t.Fatal(err)
	}
	return actors.Spec{Type: "WCounter", Config: cfg}
}

func startProc(t *testing.T, ev Events) *Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), StartOptions{Binary: exe, Job: "job-1", Host: "127.0.0.1", Stderr: os.Stderr, Security: testSec}, ev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	return p
}

// TestWorkerProcess: a worker process hosts actors created on request,
// serves calls over the wire, reports constructor failures and crashes,
// and its kill -9 is reported with the signal.
func TestWorkerProcess(t *testing.T) {
	ctx := context.Background()
	died := make(chan string, 4)
	exited := make(chan string, 1)
	p := startProc(t, Events{Died: func(id string, inc int, cause string) { died <- id + ": " + cause }, Exited: func(c string) { exited <- c }})

	if err := p.StartActor(ctx, spec(t, 10), actors.ActorInfo{ID: "a1", Node: "n1", GPUs: []int{2, 3}}); err != nil {
		t.Fatal(err)
	}
	err := p.StartActor(ctx, spec(t, -1), actors.ActorInfo{ID: "a2"})
	if err == nil || !strings.Contains(err.Error(), "negative start") {
		t.Fatalf("failing constructor: err = %v", err)
	}
	cl, err := wire.Dial(ctx, testSec, "tcp", p.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h := actors.HandleOf[counter](cl.Ref("a1", "", "WCounter", nil))
	if v, err := actors.Call(ctx, h, (*counter).Add, 5).Get(ctx); err != nil || v != 15 {
		t.Fatalf("Add = %v, %v; want 15", v, err)
	}
	if g, err := actors.Call(ctx, h, (*counter).Where, 0).Get(ctx); err != nil || len(g) != 2 || g[0] != 2 {
		t.Fatalf("GPUs seen by the actor = %v, %v", g, err)
	}
	// A crash ends the instance (restarts belong to the control plane).
	var de *actors.ActorDiedError
	if _, err := actors.Call(ctx, h, (*counter).Boom, 0).Get(ctx); !errors.As(err, &de) {
		t.Fatalf("Boom: %v, want ActorDiedError", err)
	}
	select {
	case d := <-died:
		if !strings.Contains(d, "a1: boom") {
			t.Errorf("died = %q", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no death reported")
	}
	if _, err := actors.Call(ctx, h, (*counter).Add, 1).Get(ctx); !errors.Is(err, actors.ErrNotFound) {
		t.Errorf("call after death: %v, want ErrNotFound", err)
	}
	// A restart of the same actor (next incarnation) in the same worker.
	if err := p.StartActor(ctx, spec(t, 1), actors.ActorInfo{ID: "a1", Restarts: 1}); err != nil {
		t.Fatal(err)
	}
	if v, err := actors.Call(ctx, h, (*counter).Add, 1).Get(ctx); err != nil || v != 2 {
		t.Fatalf("after restart Add = %v, %v; want 2", v, err)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-exited:
		if !strings.Contains(c, "signal 9") {
			t.Errorf("exit cause = %q, want the signal", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("exit not reported")
	}
	if err := p.StartActor(ctx, spec(t, 1), actors.ActorInfo{ID: "a3"}); !errors.Is(err, ErrExited) {
		t.Errorf("start on exited worker: %v", err)
	}
}

func TestParseEnv(t *testing.T) {
	if j, err := ParseEnv("fd:3/j7"); j != "j7" || err != nil {
		t.Errorf("ParseEnv = %q %v", j, err)
	}
	if _, err := ParseEnv("bogus"); !errors.Is(err, ErrBadEnv) {
		t.Errorf("bad env: %v", err)
	}
}

// TestWorkerExitsWithItsNode: when the control channel closes (its node
// died), the worker process exits by itself.
func TestWorkerExitsWithItsNode(t *testing.T) {
	exited := make(chan string, 1)
	p := startProc(t, Events{Exited: func(c string) { exited <- c }})
	p.c.rw.Close() // what the kernel does to the node's end when the node is killed
	select {
	case c := <-exited:
		if !strings.Contains(c, "exited with code 0") {
			t.Errorf("exit cause = %q, want a clean exit", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker outlived its control channel")
	}
}

// TestStaleKillSparesRestart: a kill for an incarnation that already died
// (sent before the node saw the death) does not end the restart running
// in the same worker process; a kill for the running incarnation does.
// Control messages are handled in order, so once a start sent after a
// kill has been answered the kill has been handled: no sleeps.
func TestStaleKillSparesRestart(t *testing.T) {
	ctx := context.Background()
	died := make(chan string, 4)
	p := startProc(t, Events{Died: func(id string, inc int, cause string) { died <- fmt.Sprintf("%s/%d", id, inc) }})
	if err := p.StartActor(ctx, spec(t, 0), actors.ActorInfo{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	cl, err := wire.Dial(ctx, testSec, "tcp", p.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h := actors.HandleOf[counter](cl.Ref("a1", "", "WCounter", nil))
	var de *actors.ActorDiedError
	if _, err := actors.Call(ctx, h, (*counter).Boom, 0).Get(ctx); !errors.As(err, &de) {
		t.Fatalf("Boom: %v, want ActorDiedError", err)
	}
	select {
	case d := <-died:
		if d != "a1/0" {
			t.Fatalf("died = %q, want a1/0", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no death reported")
	}
	if err := p.StartActor(ctx, spec(t, 100), actors.ActorInfo{ID: "a1", Restarts: 1}); err != nil {
		t.Fatal(err)
	}
	if err := p.KillActor("a1", 0, "late kill of incarnation 0"); err != nil {
		t.Fatal(err)
	}
	if err := p.StartActor(ctx, spec(t, 0), actors.ActorInfo{ID: "probe-1"}); err != nil { // after the kill
		t.Fatal(err)
	}
	if v, err := actors.Call(ctx, h, (*counter).Add, 1).Get(ctx); err != nil || v != 101 {
		t.Fatalf("incarnation 1 after a stale kill: Add = %v, %v; want 101", v, err)
	}
	if err := p.KillActor("a1", 1, "killed by the test"); err != nil {
		t.Fatal(err)
	}
	if err := p.StartActor(ctx, spec(t, 0), actors.ActorInfo{ID: "probe-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := actors.Call(ctx, h, (*counter).Add, 1).Get(ctx); !errors.Is(err, actors.ErrNotFound) {
		t.Errorf("after a kill of the running incarnation: %v, want ErrNotFound", err)
	}
}

// TestKillWithoutIncarnation: a kill from a node that does not name the
// incarnation (an older node) still ends the actor.
func TestKillWithoutIncarnation(t *testing.T) {
	ctx := context.Background()
	p := startProc(t, Events{})
	if err := p.StartActor(ctx, spec(t, 0), actors.ActorInfo{ID: "a1", Restarts: 3}); err != nil {
		t.Fatal(err)
	}
	if err := p.c.send(&msg{Op: opKill, ID: "a1", Cause: "old node"}); err != nil {
		t.Fatal(err)
	}
	if err := p.StartActor(ctx, spec(t, 0), actors.ActorInfo{ID: "probe"}); err != nil {
		t.Fatal(err)
	}
	cl, err := wire.Dial(ctx, testSec, "tcp", p.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	h := actors.HandleOf[counter](cl.Ref("a1", "", "WCounter", nil))
	if _, err := actors.Call(ctx, h, (*counter).Add, 1).Get(ctx); !errors.Is(err, actors.ErrNotFound) {
		t.Errorf("after an inexact kill: %v, want ErrNotFound", err)
	}
}

// nopCloser is a control channel over fixed input (writes discarded).
type nopCloser struct{ io.Reader }

func (nopCloser) Write(b []byte) (int, error) { return len(b), nil }
func (nopCloser) Close() error                { return nil }

// FuzzCtrlRecv: whatever arrives on the control channel, the decoder
// returns messages or an error, never panics.
func FuzzCtrlRecv(f *testing.F) {
	for _, s := range []string{
		`{"op":"kill","id":"a1","inc":2,"exact":true,"cause":"x"}` + "\n",
		`{"op":"kill","id":"a1"}` + "\n",
		`{"op":"start","id":"a","inc":1,"spec":{"Type":"T"},"info":{"ID":"a"}}` + "\n",
		`{"op":"died","id":"a","inc":-1}` + "\n" + `{"op":"ready","addr":"x"}`,
		`{"op":"kill","inc":"2"}` + "\n",
		`{"op":"kill","exact":1}` + "\n",
		"\n\n{", `null`, `[]`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := newCtrl(nopCloser{bytes.NewReader(b)})
		for i := 0; i < 1000; i++ {
			m, err := c.recv()
			if err != nil {
				if err != io.EOF && !strings.HasPrefix(err.Error(), "worker control:") {
					t.Fatalf("error without context: %v", err)
				}
				return
			}
			if m == nil {
				t.Fatal("nil message without an error")
			}
		}
	})
}
