package actors_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime"
)

// Acc is the test actor: an accumulator with methods for every behaviour.
type Acc struct {
	sum     int
	started chan struct{} // closed by Block when it starts, if set
	release chan struct{}
	mu      sync.Mutex
	log     []int
}

type AccConfig struct {
	Start     int
	FailCtor  bool
	PanicCtor bool
}

func NewAcc(ctx context.Context, cfg AccConfig) (*Acc, error) {
	if cfg.PanicCtor {
		panic("constructor exploded")
	}
	if cfg.FailCtor {
		return nil, errors.New("no config for you")
	}
	return &Acc{sum: cfg.Start}, nil
}

func (a *Acc) Add(ctx context.Context, d int) (int, error) {
	a.sum += d
	a.mu.Lock()
	a.log = append(a.log, d)
	a.mu.Unlock()
	return a.sum, nil
}
func (a *Acc) Sum(ctx context.Context, _ struct{}) (int, error)   { return a.sum, nil }
func (a *Acc) Fail(ctx context.Context, msg string) (int, error)  { return 0, errors.New(msg) }
func (a *Acc) Panic(ctx context.Context, msg string) (int, error) { panic(msg) }
func (a *Acc) Crash(ctx context.Context, msg string) (int, error) { panic(actors.Crash(msg)) }
func (a *Acc) Log(ctx context.Context, _ struct{}) ([]int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.log...), nil
}
func (a *Acc) Self(ctx context.Context, _ struct{}) (actors.ActorInfo, error) {
	info, _ := actors.Self(ctx)
	return info, nil
}

// WaitCtx blocks until its context is cancelled and reports that.
func (a *Acc) WaitCtx(ctx context.Context, _ struct{}) (string, error) {
	<-ctx.Done()
	return "cancelled", ctx.Err()
}

// Gate is a MaxConcurrency actor: Enter blocks until n callers are inside.
type Gate struct {
	mu      sync.Mutex
	inside  int
	n       int
	allIn   chan struct{}
	maxSeen int
}

func NewGate(ctx context.Context, n int) (*Gate, error) {
	return &Gate{n: n, allIn: make(chan struct{})}, nil
}

func (g *Gate) Enter(ctx context.Context, _ int) (int, error) {
	g.mu.Lock()
	g.inside++
	g.maxSeen = max(g.maxSeen, g.inside)
	if g.inside == g.n {
		close(g.allIn)
	}
	g.mu.Unlock()
	select {
	case <-g.allIn:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return g.maxSeen, nil
}

func init() {
	actors.MustRegister("Acc", NewAcc)
	actors.MustRegister("Gate", NewGate)
}

func newRT(t testing.TB, opts ...runtime.Option) runtime.Runtime {
	t.Helper()
	rt, err := runtime.Init(context.Background(), append([]runtime.Option{runtime.Address("")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	return rt
}

func spawnAcc(t testing.TB, rt runtime.Runtime, cfg AccConfig, opts ...actors.Option) actors.Handle[Acc] {
	t.Helper()
	h, err := actors.Spawn[Acc](context.Background(), rt, "Acc", cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestCallReturnsResult(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{Start: 10})
	got, err := actors.Call(ctx, h, (*Acc).Add, 5).Get(ctx)
	if err != nil || got != 15 {
		t.Fatalf("Add(5) = %d, %v; want 15, nil", got, err)
	}
}

func TestMethodErrorIsReturned(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{})
	_, err := actors.Call(ctx, h, (*Acc).Fail, "boom").Get(ctx)
	if err == nil || err.Error() != "boom" {
		t.Fatalf("err = %v; want boom", err)
	}
}

func TestCallsRunInArrivalOrder(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{})
	var futs []*actors.Future[int]
	for i := 1; i <= 1000; i++ {
		futs = append(futs, actors.Call(ctx, h, (*Acc).Add, i))
	}
	if err := actors.WaitAll(ctx, awaitables(futs)...); err != nil {
		t.Fatal(err)
	}
	log, err := actors.Call(ctx, h, (*Acc).Log, struct{}{}).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range log {
		if d != i+1 {
			t.Fatalf("call %d ran as %d: order not kept", i+1, d)
		}
	}
	if v, _ := futs[999].Get(ctx); v != 1000*1001/2 {
		t.Fatalf("final sum %d", v)
	}
}

func TestMaxConcurrencyRunsCallsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt := newRT(t)
	g, err := actors.Spawn[Gate](ctx, rt, "Gate", 3, actors.MaxConcurrency(3))
	if err != nil {
		t.Fatal(err)
	}
	var futs []*actors.Future[int]
	for i := 0; i < 3; i++ {
		futs = append(futs, actors.Call(ctx, g, (*Gate).Enter, i))
	}
	for _, f := range futs {
		if v, err := f.Get(ctx); err != nil || v != 3 {
			t.Fatalf("Enter = %d, %v; want 3 callers inside at once", v, err)
		}
	}
}

func TestPanicReturnsCallErrorAndActorKeepsServing(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{Start: 1})
	_, err := actors.Call(ctx, h, (*Acc).Panic, "kaboom").Get(ctx)
	var ce *actors.CallError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T); want *CallError", err, err)
	}
	if ce.Panic != "kaboom" || ce.Method != "Panic" || !strings.Contains(ce.Stack, "Panic") {
		t.Fatalf("CallError = %+v", ce)
	}
	if v, err := actors.Call(ctx, h, (*Acc).Add, 1).Get(ctx); err != nil || v != 2 {
		t.Fatalf("after panic Add(1) = %d, %v; want 2 (state kept)", v, err)
	}
}

func TestConstructorFailureFailsSpawn(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	if _, err := actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{FailCtor: true}); err == nil || !strings.Contains(err.Error(), "no config for you") {
		t.Fatalf("err = %v", err)
	}
	if _, err := actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{PanicCtor: true}); err == nil || !strings.Contains(err.Error(), "constructor panicked: constructor exploded") {
		t.Fatalf("err = %v", err)
	}
	// The failed spawns are recorded dead and hold nothing.
	st, _ := rt.Status(ctx)
	for _, a := range st.Actors {
		if a.State != "DEAD" || !strings.Contains(a.Death, "constructor") {
			t.Fatalf("actor after a failed spawn: %+v", a)
		}
	}
	if used := st.Nodes[0].Used; used.CPUs != 0 || used.GPUs != 0 {
		t.Fatalf("resources held after failed spawns: %+v", used)
	}
}

func TestCrashRestartsThenDies(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	h := spawnAcc(t, rt, AccConfig{Start: 7}, actors.MaxRestarts(2), actors.Name("crashy"))
	for i := 1; i <= 2; i++ {
		actors.Call(ctx, h, (*Acc).Add, 100)
		_, err := actors.Call(ctx, h, (*Acc).Crash, "disk gone").Get(ctx)
		if !errors.Is(err, actors.ErrActorRestarted) {
			t.Fatalf("crash %d: err = %v; want ErrActorRestarted", i, err)
		}
		v, err := actors.Call(ctx, h, (*Acc).Sum, struct{}{}).Get(ctx)
		if err != nil || v != 7 {
			t.Fatalf("after restart %d: Sum = %d, %v; want 7 (constructor re-run)", i, v, err)
		}
		info, _ := actors.Call(ctx, h, (*Acc).Self, struct{}{}).Get(ctx)
		if info.Restarts != i {
			t.Fatalf("Self().Restarts = %d; want %d", info.Restarts, i)
		}
	}
	// Third crash: out of restarts. Calls queued behind it fail too.
	crash := actors.Call(ctx, h, (*Acc).Crash, "disk gone for good")
	queued := actors.Call(ctx, h, (*Acc).Add, 1)
	for _, err := range []error{get(ctx, crash), get(ctx, queued), get(ctx, actors.Call(ctx, h, (*Acc).Add, 1))} {
		var died *actors.ActorDiedError
		if !errors.As(err, &died) || died.Cause != "disk gone for good" || died.Restarts != 2 {
			t.Fatalf("err = %v; want ActorDiedError naming the cause after 2 restarts", err)
		}
	}
	// Its name is free again and its resources released.
	if _, err := rt.GetActor(ctx, "crashy"); !errors.Is(err, actors.ErrNotFound) {
		t.Fatalf("GetActor after death: %v", err)
	}
}

func TestUnlimitedRestarts(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{}, actors.MaxRestarts(-1))
	for i := 0; i < 20; i++ {
		if err := get(ctx, actors.Call(ctx, h, (*Acc).Crash, "again")); !errors.Is(err, actors.ErrActorRestarted) {
			t.Fatalf("crash %d: %v", i, err)
		}
	}
}

func TestNoRestartsByDefault(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{})
	var died *actors.ActorDiedError
	if err := get(ctx, actors.Call(ctx, h, (*Acc).Crash, "x")); !errors.As(err, &died) {
		t.Fatalf("err = %v; want ActorDiedError", err)
	}
}

func TestKill(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{}, actors.MaxRestarts(-1))
	if err := actors.Kill(ctx, h); err != nil {
		t.Fatal(err)
	}
	var died *actors.ActorDiedError
	if err := get(ctx, actors.Call(ctx, h, (*Acc).Add, 1)); !errors.As(err, &died) || !strings.Contains(died.Cause, "killed") {
		t.Fatalf("call after Kill: %v", err)
	}
	if err := actors.Kill(ctx, actors.Handle[Acc]{}); err == nil {
		t.Fatal("Kill of a zero handle succeeded")
	}
}

func TestFutureAsArgument(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	a := spawnAcc(t, rt, AccConfig{Start: 1})
	b := spawnAcc(t, rt, AccConfig{Start: 100})
	fa := actors.Call(ctx, a, (*Acc).Add, 1) // 2
	fb := actors.CallRef(ctx, b, (*Acc).Add, fa)
	if v, err := fb.Get(ctx); err != nil || v != 102 {
		t.Fatalf("CallRef = %d, %v; want 102", v, err)
	}
	// A failed dependency fails the dependent call with its error.
	bad := actors.Call(ctx, a, (*Acc).Fail, "upstream broke")
	if err := get(ctx, actors.CallRef(ctx, b, (*Acc).Add, bad)); err == nil || !strings.Contains(err.Error(), "upstream broke") {
		t.Fatalf("err = %v; want the dependency's error", err)
	}
	if v, err := actors.CallRef(ctx, b, (*Acc).Add, actors.Ready(5)).Get(ctx); err != nil || v != 107 {
		t.Fatalf("CallRef(Ready(5)) = %d, %v", v, err)
	}
	if err := get(ctx, actors.CallRef[Acc, int, int](ctx, b, (*Acc).Add, nil)); err == nil {
		t.Fatal("nil future accepted")
	}
}

func TestWaitAnyAllAndWait(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	g, err := actors.Spawn[Gate](ctx, rt, "Gate", 2, actors.MaxConcurrency(2))
	if err != nil {
		t.Fatal(err)
	}
	h := spawnAcc(t, rt, AccConfig{})
	blocked := actors.Call(ctx, g, (*Gate).Enter, 0) // waits for a second caller
	quick := actors.Call(ctx, h, (*Acc).Add, 1)
	if i, err := actors.WaitAny(ctx, blocked, quick); err != nil || i != 1 {
		t.Fatalf("WaitAny = %d, %v; want 1", i, err)
	}
	ready, notReady, err := actors.Wait(ctx, []actors.Awaitable{blocked, quick}, 1)
	if err != nil || len(ready) != 1 || ready[0] != 1 || len(notReady) != 1 || notReady[0] != 0 {
		t.Fatalf("Wait = %v %v %v", ready, notReady, err)
	}
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := actors.WaitAll(tctx, blocked, quick); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitAll with a blocked call: %v", err)
	}
	if _, err := blocked.Get(tctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get on expired ctx: %v", err)
	}
	second := actors.Call(ctx, g, (*Gate).Enter, 1)
	if err := actors.WaitAll(ctx, blocked, quick, second); err != nil {
		t.Fatal(err)
	}
	if v, err := blocked.Get(ctx); err != nil || v != 2 { // Get works again after a timed-out Get
		t.Fatalf("blocked.Get = %d, %v", v, err)
	}
	if i, err := actors.WaitAny(ctx); i != -1 || err != nil {
		t.Fatalf("WaitAny() = %d, %v", i, err)
	}
}

func TestCancellation(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{})
	cctx, cancel := context.WithCancel(ctx)
	running := actors.Call(cctx, h, (*Acc).WaitCtx, struct{}{})
	queued := actors.Call(cctx, h, (*Acc).Add, 1) // behind the running call
	cancel()
	if err := get(ctx, running); !errors.Is(err, context.Canceled) {
		t.Fatalf("running call: %v; want its context cancelled", err)
	}
	if err := get(ctx, queued); !errors.Is(err, context.Canceled) {
		t.Fatalf("queued call: %v; want dropped", err)
	}
	if v, err := actors.Call(ctx, h, (*Acc).Sum, struct{}{}).Get(ctx); err != nil || v != 0 {
		t.Fatalf("Sum = %d, %v; want 0 (the cancelled Add never ran)", v, err)
	}
}

func TestNamedActors(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	h := spawnAcc(t, rt, AccConfig{Start: 3}, actors.Name("acc"))
	if h.Name() != "acc" || h.String() != "Acc(acc)" {
		t.Fatalf("handle %v name %q", h, h.Name())
	}
	got, err := actors.GetActor[Acc](ctx, rt, "acc")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := actors.Call(ctx, got, (*Acc).Sum, struct{}{}).Get(ctx); err != nil || v != 3 {
		t.Fatalf("Sum via GetActor = %d, %v", v, err)
	}
	if _, err := actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.Name("acc")); !errors.Is(err, actors.ErrDuplicate) {
		t.Fatalf("duplicate name: %v", err)
	}
	if _, err := actors.GetActor[Acc](ctx, rt, "nobody"); !errors.Is(err, actors.ErrNotFound) {
		t.Fatalf("missing name: %v", err)
	}
	if _, err := actors.GetActor[Gate](ctx, rt, "acc"); !errors.Is(err, actors.ErrTypeMismatch) {
		t.Fatalf("wrong type: %v", err)
	}
}

func TestSpawnErrors(t *testing.T) {
	ctx := context.Background()
	rt := newRT(t)
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"unregistered", spawnErr(actors.Spawn[Acc](ctx, rt, "Nope", AccConfig{})), "not registered"},
		{"wrong Go type", spawnErr(actors.Spawn[Gate](ctx, rt, "Acc", AccConfig{})), "type mismatch"},
		{"wrong config type", spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", 5)), "config is int"},
		{"fractional > 1 GPU", spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.GPUs(1.5))), "whole numbers"},
		{"negative CPUs", spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.CPUs(-1))), "CPUs(-1)"},
		{"negative memory", spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.Memory(-1))), "Memory(-1)"},
		{"bad MaxRestarts", spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.MaxRestarts(-2))), "MaxRestarts(-2)"},
		{"bad MaxConcurrency", spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.MaxConcurrency(-1))), "MaxConcurrency(-1)"},
		{"infeasible GPUs", spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.GPUs(1))), "short of GPUs"},
		{"infeasible custom", spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.Resources(map[string]float64{"tpu": 1}))), "short of tpu"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: err = %v; want it to mention %q", c.name, c.err, c.want)
		}
	}
	if err := spawnErr(actors.Spawn[Acc](ctx, rt, "Acc", AccConfig{}, actors.GPUs(1))); !errors.Is(err, actors.ErrInfeasible) {
		t.Errorf("infeasible: %v does not wrap ErrInfeasible", err)
	}
}

func spawnErr[T any](_ actors.Handle[T], err error) error { return err }

func TestCallWithPlainFunctionIsRefused(t *testing.T) {
	ctx := context.Background()
	h := spawnAcc(t, newRT(t), AccConfig{})
	notAMethod := func(a *Acc, ctx context.Context, d int) (int, error) { return 0, nil }
	if err := get(ctx, actors.Call(ctx, h, notAMethod, 1)); !errors.Is(err, actors.ErrNoSuchMethod) {
		t.Fatalf("err = %v; want ErrNoSuchMethod", err)
	}
	if err := get(ctx, actors.Call(ctx, actors.Handle[Acc]{}, (*Acc).Add, 1)); err == nil {
		t.Fatal("call on a zero handle succeeded")
	}
}

func get[R any](ctx context.Context, f *actors.Future[R]) error {
	_, err := f.Get(ctx)
	return err
}

func awaitables[R any](fs []*actors.Future[R]) []actors.Awaitable {
	out := make([]actors.Awaitable, len(fs))
	for i, f := range fs {
		out[i] = f
	}
	return out
}
