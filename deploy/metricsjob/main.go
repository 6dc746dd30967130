// Command metricsjob is the driver the Prometheus test submits: it spawns
// an actor holding a simulated GPU on a node with the "probe" resource,
// calls it (n successful calls and one failing one), keeps a 1 MiB result
// in the actor's worker, prints "ready" and then waits until it is
// stopped, so that a scrape sees calls, a GPU held by an actor and an
// object.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"troupe/actors"
	"troupe/runtime"
)

// Echo answers calls.
type Echo struct{}

// Echo returns its argument.
func (e *Echo) Echo(ctx context.Context, s string) (string, error) { return s, nil }

// Fail always fails.
func (e *Echo) Fail(ctx context.Context, _ int) (int, error) {
	return 0, errors.New("failing on purpose")
}

// Blob returns n zero bytes.
func (e *Echo) Blob(ctx context.Context, n int) ([]byte, error) { return make([]byte, n), nil }

func init() {
	actors.MustRegister("Echo", func(ctx context.Context, _ int) (*Echo, error) { return &Echo{}, nil })
}

func main() {
	calls := flag.Int("calls", 50, "successful calls to make")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rt, err := runtime.Init(ctx)
	if errors.Is(err, runtime.ErrWorkerDone) {
		return // this process was a worker
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	defer rt.Shutdown(context.Background())
	h, err := actors.Spawn[Echo](ctx, rt, "Echo", 0, actors.GPUs(1), actors.Name("echo"), actors.Resources(map[string]float64{"probe": 1}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "spawn:", err)
		os.Exit(1)
	}
	for i := 0; i < *calls; i++ {
		if _, err := actors.Call(ctx, h, (*Echo).Echo, "hi").Get(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "call:", err)
			os.Exit(1)
		}
	}
	if _, err := actors.Call(ctx, h, (*Echo).Fail, 0).Get(ctx); err == nil {
		fmt.Fprintln(os.Stderr, "Fail did not fail")
		os.Exit(1)
	}
	blob := actors.Call(ctx, h, (*Echo).Blob, 1<<20)
	if _, err := blob.Get(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "blob:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	<-ctx.Done()
	blob.Release()
}
