// Command counter is the smallest troupe program: it starts the embedded
// local cluster, spawns counter actors, calls them (directly, pipelined and
// with one call's future feeding another), and shows an actor restarting
// after a crash and dying for good once it is out of restarts.
//
//	go run ./examples/counter
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"troupe/actors"
	"troupe/runtime"
)

// CounterConfig configures a Counter.
type CounterConfig struct {
	Start int
}

// Counter is an actor holding one integer.
type Counter struct {
	n int
}

// NewCounter is the Counter constructor.
func NewCounter(ctx context.Context, cfg CounterConfig) (*Counter, error) {
	return &Counter{n: cfg.Start}, nil
}

// Add adds d and returns the new value.
func (c *Counter) Add(ctx context.Context, d int) (int, error) {
	c.n += d
	return c.n, nil
}

// Get returns the value.
func (c *Counter) Get(ctx context.Context, _ struct{}) (int, error) { return c.n, nil }

// Crash simulates the actor's process dying.
func (c *Counter) Crash(ctx context.Context, reason string) (int, error) {
	panic(actors.Crash(reason))
}

func init() { actors.MustRegister("Counter", NewCounter) }

func main() {
	if err := run(context.Background()); err != nil && !errors.Is(err, runtime.ErrWorkerDone) {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	rt, err := runtime.Init(ctx)
	if err != nil {
		return err
	}
	defer rt.Shutdown(context.Background())
	st, _ := rt.Status(ctx)
	n := st.Nodes[0]
	fmt.Printf("embedded cluster: 1 node, %g CPUs, %.1f GiB, %g GPUs\n", n.Total.CPUs, float64(n.Total.MemoryBytes)/(1<<30), n.Total.GPUs)

	// 1. Spawn a named actor and call it.
	h, err := actors.Spawn[Counter](ctx, rt, "Counter", CounterConfig{Start: 10}, actors.Name("main"), actors.MaxRestarts(1))
	if err != nil {
		return err
	}
	v, err := actors.Call(ctx, h, (*Counter).Add, 5).Get(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("spawned %v; Add(5) -> %d\n", h, v)

	// 2. Pipelined calls: issue many, then wait; they run in order.
	const calls = 100_000
	start := time.Now()
	futs := make([]*actors.Future[int], calls)
	for i := range futs {
		futs[i] = actors.Call(ctx, h, (*Counter).Add, 1)
	}
	last, err := futs[calls-1].Get(ctx)
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Printf("%d pipelined calls in %v (%.0f calls/s); last value %d\n", calls, el.Round(time.Millisecond), calls/el.Seconds(), last)

	// 3. A future as an argument: b adds whatever a returns, without the
	// value passing through this program.
	b, err := actors.Spawn[Counter](ctx, rt, "Counter", CounterConfig{Start: 1000})
	if err != nil {
		return err
	}
	fa := actors.Call(ctx, h, (*Counter).Add, 0)
	fb := actors.CallRef(ctx, b, (*Counter).Add, fa)
	vb, err := fb.Get(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("future passed between actors: 1000 + %d = %d\n", last, vb)

	// 4. Find the named actor from anywhere in the program.
	again, err := actors.GetActor[Counter](ctx, rt, "main")
	if err != nil {
		return err
	}
	v, _ = actors.Call(ctx, again, (*Counter).Get, struct{}{}).Get(ctx)
	fmt.Printf("GetActor(\"main\") sees value %d\n", v)

	// 5. Crash it: it restarts once (MaxRestarts(1)) with its config, then
	// dies for good on the second crash.
	_, err = actors.Call(ctx, h, (*Counter).Crash, "simulated fault").Get(ctx)
	fmt.Printf("crash #1: %v\n", err)
	v, err = actors.Call(ctx, h, (*Counter).Get, struct{}{}).Get(ctx)
	fmt.Printf("after restart, value is back to the config's start: %d (err %v)\n", v, err)
	_, err = actors.Call(ctx, h, (*Counter).Crash, "simulated fault again").Get(ctx)
	fmt.Printf("crash #2: %v\n", err)
	_, err = actors.Call(ctx, h, (*Counter).Get, struct{}{}).Get(ctx)
	var died *actors.ActorDiedError
	fmt.Printf("later call fails with ActorDiedError=%v: %v\n", errors.As(err, &died), err)

	st, _ = rt.Status(ctx)
	fmt.Println("actors:")
	for _, a := range st.Actors {
		fmt.Printf("  %s %-8s %-6s restarts=%d %s\n", a.ID, a.Type, a.State, a.Restarts, a.Death)
	}
	return nil
}
