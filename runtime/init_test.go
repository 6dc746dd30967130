package runtime

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"troupe/runtime/worker"
)

// workerCodeEnv makes the test binary, started as a worker, exit with this
// code once Init has returned ErrWorkerDone (see TestMain).
const workerCodeEnv = "TROUPE_RUNTIME_TEST_WORKER_CODE"

// TestInitWorkerReturns: in a worker process Init serves until the node
// stops the worker and then returns ErrWorkerDone instead of exiting the
// process: the worker exits with the code its main chose after Init
// returned (7 here; the old Init exited with 0 by itself).
func TestInitWorkerReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exited := make(chan string, 1)
	p, err := worker.Start(ctx, worker.StartOptions{Binary: os.Args[0], Args: []string{"-test.run=^$"}, Job: "job-init-test",
		Env: []string{workerCodeEnv + "=7"}, Stderr: os.Stderr}, worker.Events{Exited: func(cause string) { exited <- cause }})
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(10 * time.Second)
	select {
	case cause := <-exited:
		if !strings.Contains(cause, "exited with code 7") {
			t.Fatalf("worker %s; want it to exit with code 7 after Init returned ErrWorkerDone", cause)
		}
	case <-ctx.Done():
		t.Fatal("worker did not exit")
	}
}

// TestInitWorkerBadEnv: a malformed TROUPE_WORKER makes Init return an
// error naming it, and the process goes on (it used to exit).
func TestInitWorkerBadEnv(t *testing.T) {
	t.Setenv(worker.EnvVar, "not-a-channel")
	rt, err := Init(context.Background())
	if rt != nil || !errors.Is(err, worker.ErrBadEnv) || errors.Is(err, ErrWorkerDone) {
		t.Fatalf("Init in a worker with a bad %s = %v, %v; want an error wrapping worker.ErrBadEnv", worker.EnvVar, rt, err)
	}
	if !strings.Contains(err.Error(), "not-a-channel") {
		t.Fatalf("error %q does not name the bad value", err)
	}
}
