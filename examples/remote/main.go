// Command remote runs actors on a troupe cluster: the driver (this program)
// spawns actors through the control plane, each node that is given one runs
// it in a worker process started from this same binary (uploaded once,
// content-addressed), and calls go straight from here to that worker.
//
//	troupe start --head --data-dir /tmp/head           # prints the address and token
//	TROUPE_ADDRESS=127.0.0.1:7370 TROUPE_TOKEN=$(cat /tmp/head/token) go run ./examples/remote
//
// Without TROUPE_ADDRESS it runs the same code on the embedded local cluster.
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

// Greeter is an actor that remembers how often it was called and where it runs.
type Greeter struct {
	calls int
}

// GreeterConfig configures a Greeter (no fields needed).
type GreeterConfig struct{}

// Greet answers with the caller's name, the call count and the actor's
// process and node.
func (g *Greeter) Greet(ctx context.Context, who string) (string, error) {
	g.calls++
	info, _ := actors.Self(ctx)
	return fmt.Sprintf("hello %s, call %d, from pid %d on node %s", who, g.calls, os.Getpid(), info.Node), nil
}

func main() {
	// Types are registered before Init: in a worker process Init serves
	// them, then returns ErrWorkerDone, so the driver code below runs only
	// in the driver.
	actors.MustRegister("Greeter", func(ctx context.Context, _ GreeterConfig) (*Greeter, error) { return &Greeter{}, nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := runtime.Init(ctx)
	if errors.Is(err, runtime.ErrWorkerDone) {
		return // this process was a worker
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	defer rt.Shutdown(context.Background())
	h, err := actors.Spawn[Greeter](ctx, rt, "Greeter", GreeterConfig{}, actors.Name("greeter"), actors.MaxRestarts(2))
	if err != nil {
		fmt.Fprintln(os.Stderr, "spawn:", err)
		os.Exit(1)
	}
	fmt.Printf("driver pid %d\n", os.Getpid())
	for _, who := range []string{"ada", "grace", "barbara"} {
		msg, err := actors.Call(ctx, h, (*Greeter).Greet, who).Get(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "call:", err)
			os.Exit(1)
		}
		fmt.Println(msg)
	}
}
