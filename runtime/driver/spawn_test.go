package driver

import (
	"sync"
	"testing"
	"time"

	"troupe/actors"
)

// TestRemoteJobEndsManyActors: a driver spawns thousands of actors at once
// (batched creates and waits) and shuts down; its job's end makes the node
// end them all in one sync. The node must not deadlock with its worker
// (kill messages one way and death reports the other filled both directions
// of the control socket while the node held its lock), so the node shuts
// down and the worker process exits.
func TestRemoteJobEndsManyActors(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns 4000 actors")
	}
	const tok = "many-actors-token"
	n := startHead(t, tok)
	ctx, rt, _ := connectDriver(t, tok, n.Addr(), 1, 60*time.Second) // shut down below, before the node
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{})
	if err != nil {
		t.Fatal(err)
	}
	wpid, err := actors.Call(ctx, h, (*rcounter).Pid, 0).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const total, par = 4000, 200
	var wg sync.WaitGroup
	errs := make(chan error, par)
	for g := 0; g < par; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < total/par; i++ {
				if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{Start: i}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("spawn: %v", err)
	}
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The job's end reaches the node within a sync; give it time to end
	// every actor before the node itself is stopped.
	deadline := time.Now().Add(20 * time.Second)
	for alive(wpid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { n.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("node shutdown hangs after its job's actors were ended")
	}
	if alive(wpid) {
		t.Errorf("worker process %d still running", wpid)
	}
}
