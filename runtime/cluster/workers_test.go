package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"troupe/actors"
	"troupe/scheduler"
)

// TestWorkerStartFailures: an actor whose job binary cannot run, or whose
// launch description is garbage, is committed dead with a cause saying so
// (no restart loop), by the node it was placed on.
func TestWorkerStartFailures(t *testing.T) {
	const tok = "workers-token"
	n := startNode(t, testConfig(t, "head", RoleHead, tok))
	ctx := context.Background()
	waitFor(t, "node registered", 10*time.Second, func() bool { return nodeState(n.Status(), "head") == "alive" })
	bad, err := EncodeLaunch(&Launch{Spec: actors.Spec{Type: "X"}, Binary: "/nonexistent/troupe-job"})
	if err != nil {
		t.Fatal(err)
	}
	specs := []scheduler.ActorSpec{
		{ID: "nobin", Class: "X", MaxRestarts: 3, Args: bad},
		{ID: "garbage", Class: "X", MaxRestarts: 3, Args: []byte{0xc1}},
		{ID: "record", Class: "X"}, // no Launch: a placement record, left alone
	}
	if _, err := n.CreateActors(ctx, specs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"nobin": "/nonexistent/troupe-job", "garbage": "decode launch"}
	for id, cause := range want {
		var a ActorView
		waitFor(t, id+" dead", 10*time.Second, func() bool {
			for _, v := range n.Status().Actors {
				if v.ID == id {
					a = v
				}
			}
			return a.State == "DEAD"
		})
		if !strings.Contains(a.Death, cause) || a.Restarts != 0 {
			t.Errorf("%s: death %q after %d restarts, want a cause with %q and no restarts", id, a.Death, a.Restarts, cause)
		}
	}
	for _, v := range n.Status().Actors {
		if v.ID == "record" && v.State != "PENDING" {
			t.Errorf("actor without a launch description: %+v, want left PENDING on its node", v)
		}
	}
}
