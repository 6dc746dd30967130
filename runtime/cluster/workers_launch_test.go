package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime/worker"
	"troupe/scheduler"
)

// TestWorkerStartDoesNotBlockOtherJobs: while one job's worker process is
// starting (a starter that blocks until the test lets it go), another
// job's actor is started and its outcome (here a start failure, committed
// as a death) goes through; before, the node held its lock for the whole
// process start and everything else waited. Two actors of the slow job
// share its one process start.
func TestWorkerStartDoesNotBlockOtherJobs(t *testing.T) {
	n := startNode(t, testConfig(t, "head", RoleHead, "launch-token"))
	ctx := context.Background()
	waitFor(t, "node registered", 10*time.Second, func() bool { return nodeState(n.Status(), "head") == "alive" })

	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	var mu sync.Mutex
	calls := map[string]int{}
	n.workers.mu.Lock()
	n.workers.startProc = func(ctx context.Context, o worker.StartOptions, _ worker.Events) (*worker.Proc, error) {
		mu.Lock()
		calls[o.Job]++
		mu.Unlock()
		if o.Job == "slow-job" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, errors.New("slow starter released")
		}
		return nil, errors.New("fast starter refused " + o.Job)
	}
	n.workers.mu.Unlock()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the node stops (cleanups run last-in first-out)

	launch := func(job string) []byte {
		b, err := EncodeLaunch(&Launch{Spec: actors.Spec{Type: "X"}, Binary: "/bin/true-" + job})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := n.CreateActors(ctx, []scheduler.ActorSpec{
		{ID: "slow-1", Class: "X", JobID: "slow-job", Args: launch("slow")},
		{ID: "slow-2", Class: "X", JobID: "slow-job", Args: launch("slow")},
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("slow job's worker start never began")
	}
	if _, err := n.CreateActors(ctx, []scheduler.ActorSpec{{ID: "other-1", Class: "X", JobID: "other-job", Args: launch("other")}}); err != nil {
		t.Fatal(err)
	}
	state := func(id string) ActorView {
		for _, v := range n.Status().Actors {
			if v.ID == id {
				return v
			}
		}
		return ActorView{}
	}
	waitFor(t, "other job's actor dead while the slow job's worker starts", 20*time.Second, func() bool { return state("other-1").State == "DEAD" })
	if d := state("other-1").Death; !strings.Contains(d, "fast starter refused other-job") {
		t.Errorf("other-1 death %q, want the other job's starter's error", d)
	}
	for _, id := range []string{"slow-1", "slow-2"} {
		if s := state(id).State; s == "DEAD" {
			t.Errorf("%s is %s before its worker start was released", id, s)
		}
	}
	// Both slow-job starts are in: one starts the process, one waits for it.
	waitFor(t, "second slow-job start waiting for the first", 20*time.Second, func() bool {
		n.workers.mu.Lock()
		defer n.workers.mu.Unlock()
		st := n.workers.launching["slow-job"]
		return st != nil && st.waiters == 1
	})
	free()
	for _, id := range []string{"slow-1", "slow-2"} {
		waitFor(t, id+" dead after its worker start failed", 20*time.Second, func() bool { return state(id).State == "DEAD" })
		if d := state(id).Death; !strings.Contains(d, "slow starter released") {
			t.Errorf("%s death %q, want the slow starter's error", id, d)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["slow-job"] != 1 {
		t.Errorf("slow job's worker started %d times for two concurrent actor starts, want once", calls["slow-job"])
	}
}
