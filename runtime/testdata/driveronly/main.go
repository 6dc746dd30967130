// Command driveronly is the smallest driver program: it connects to the
// cluster named by TROUPE_ADDRESS and prints its status. TestDriverLinksNoServer
// lists its dependencies: a driver must not link the node daemon's.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"troupe/runtime"
)

func main() {
	ctx := context.Background()
	rt, err := runtime.Init(ctx)
	if errors.Is(err, runtime.ErrWorkerDone) {
		return // this process was a worker
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer rt.Shutdown(ctx)
	st, err := rt.Status(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(len(st.Nodes), "nodes")
}
