package driver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/actors"
	"troupe/runtime/api"
	"troupe/runtime/client"
	"troupe/scheduler"
)

// The driver against the control plane in memory (client.Inmem), in
// bubble time: no node, no network, and every wait is exact.

// connectInmem connects a driver to a fresh in-memory control plane with
// one 4-CPU node, keep-alives every second.
func connectInmem(t *testing.T) (*Driver, *client.Inmem) {
	t.Helper()
	m, err := client.NewInmem(time.Second, scheduler.NodeInfo{ID: "n1", Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	// "inmem" has no port: the driver serves no objects of its own, so
	// nothing of it waits on the network.
	d, err := Connect(context.Background(), Config{Address: "inmem", Control: m})
	if err != nil {
		t.Fatal(err)
	}
	return d, m
}

// actorNamed returns the ID of the actor named name.
func actorNamed(t *testing.T, m *client.Inmem, name string) string {
	t.Helper()
	id := ""
	m.Read(func(s *scheduler.State) {
		if a := s.ActorByName("", name); a != nil {
			id = string(a.Spec.ID)
		}
	})
	if id == "" {
		t.Fatalf("no actor named %q", name)
	}
	return id
}

// TestSpawnWaitRetries: when the control plane is unreachable while a
// spawn waits for its actor, the driver asks again every 10 ms (three
// failures: 30 ms), then waits on the cluster side; the actor's death
// ends the spawn with its cause. Shutdown leaves no goroutine behind
// (synctest.Test fails on any left in the bubble).
func TestSpawnWaitRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, m := connectInmem(t)
		defer d.Shutdown(context.Background())
		var mu sync.Mutex
		var waits []time.Time // when WaitActors was called
		m.Fail(func(method string) error {
			if method != "WaitActors" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			waits = append(waits, time.Now())
			if len(waits) <= 3 {
				return status.Error(codes.Unavailable, "no node reachable")
			}
			return nil
		})
		errc := make(chan error, 1)
		go func() {
			_, err := actors.Spawn[rcounter](context.Background(), d, "RCounter", rcounterCfg{}, actors.Name("r1"))
			errc <- err
		}()
		time.Sleep(time.Second) // the spawn waits on the cluster side by now
		mu.Lock()
		if len(waits) != 4 {
			t.Fatalf("%d WaitActors calls, want 3 failed and 1 waiting", len(waits))
		}
		for i := 1; i < 4; i++ {
			if gap := waits[i].Sub(waits[i-1]); gap != 10*time.Millisecond {
				t.Errorf("WaitActors call %d came %v after the failed one, want 10 ms", i+1, gap)
			}
		}
		mu.Unlock()
		if err := m.Kill(actorNamed(t, m, "r1"), "node n1 lost", false); err != nil {
			t.Fatal(err)
		}
		err := <-errc
		var died *actors.ActorDiedError
		if !errors.As(err, &died) || died.Cause != "node n1 lost" {
			t.Fatalf("spawn of an actor that died: %v, want its ActorDiedError", err)
		}
		if err := d.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSpawnPendingAbandoned: a spawn that waits for room and whose context
// ends returns the context's error and kills its actor, so it does not
// start later.
func TestSpawnPendingAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, m := connectInmem(t)
		defer d.Shutdown(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := actors.Spawn[rcounter](ctx, d, "RCounter", rcounterCfg{}, actors.CPUs(4), actors.Name("big"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("spawn that cannot fit, given 3 s: %v", err)
		}
		synctest.Wait() // the kill of the abandoned actor commits
		m.Read(func(s *scheduler.State) {
			a := s.Actor(scheduler.ActorID(actorNamedOrDead(s, "big")))
			if a == nil || a.State != scheduler.ActorDead {
				t.Errorf("abandoned actor: %+v, want it dead", a)
			}
		})
		if err := d.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// actorNamedOrDead finds an actor by name among all, dead ones included.
func actorNamedOrDead(s *scheduler.State, name string) string {
	for _, a := range s.Actors() {
		if a.Spec.Name == name {
			return string(a.Spec.ID)
		}
	}
	return ""
}

// TestJobLease: the driver renews its job's lease at the interval the
// cluster answers; when the cluster ends the job (troupe stop-job, or its
// lease lost), the renewals stop; Shutdown finishes a job that runs.
func TestJobLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, m := connectInmem(t)
		defer d.Shutdown(context.Background())
		job := string(d.JobID())
		start := time.Now()
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		// One renewal at Connect, then one per second.
		if n := m.Calls("KeepAlive"); n != 4 {
			t.Fatalf("%d keep-alives in 3.5 s, want 1 + 3", n)
		}
		if got := m.Renewed(job).Sub(start); got != 3*time.Second {
			t.Fatalf("last renewal at %v, want 3 s", got)
		}
		if _, err := m.ApplyCommand(context.Background(), &scheduler.JobFinished{Job: d.JobID(), State: scheduler.JobStopped,
			Message: "stopped by troupe stop-job", At: time.Now().UnixNano()}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := m.Calls("KeepAlive"); n != 5 {
			t.Fatalf("%d keep-alives, want 5: the one that learnt the job ended, then none", n)
		}
		// The job ended already: Shutdown's finish is refused as a
		// conflict, which it expects.
		if err := d.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestShutdownFinishesJob: Shutdown commits the end of the driver's job,
// which kills its actors, and later calls fail with ErrShutdown.
func TestShutdownFinishesJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, m := connectInmem(t)
		if err := d.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		m.Read(func(s *scheduler.State) {
			if j := s.Job(d.JobID()); j == nil || j.State != scheduler.JobSucceeded {
				t.Errorf("job after Shutdown: %+v, want SUCCEEDED", j)
			}
		})
		if _, err := actors.Spawn[rcounter](context.Background(), d, "RCounter", rcounterCfg{}); !errors.Is(err, api.ErrShutdown) {
			t.Fatalf("spawn after Shutdown: %v", err)
		}
	})
}
