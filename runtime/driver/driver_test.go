package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"troupe/actors"
	"troupe/internal/testnet"
	"troupe/runtime/api"
	"troupe/runtime/cluster"
	"troupe/scheduler"
)

// freeTCPPort is a loopback port free for TCP and UDP, from below the
// ephemeral range (testnet): a port the kernel chose for :0 can be taken by
// another test binary's outgoing connection before the node binds it.
func freeTCPPort(t testing.TB) int { return testnet.Port(t, "127.0.0.1") }

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestRemoteDriver: Init with an address connects to a cluster (checking
// the token), Status reports its nodes, an unknown name is not found and an
// impossible spawn is infeasible.
func TestRemoteDriver(t *testing.T) {
	const tok = "driver-token"
	n, err := cluster.Start(context.Background(), cluster.Config{NodeID: "head", Role: cluster.RoleHead, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), RaftPort: freeTCPPort(t), Token: tok,
		Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(discard{}, nil)),
		Resources: scheduler.Resources{MilliCPU: 2000, MemoryBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	ctx := context.Background()

	t.Setenv("TROUPE_TOKEN", "wrong")
	if _, err := connect(ctx, n.Addr()); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("wrong token: Init err = %v", err)
	}
	t.Setenv("TROUPE_TOKEN", tok)
	rt, err := connect(ctx, n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	var st api.Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = rt.Status(ctx)
		if err == nil && len(st.Nodes) == 1 && st.Nodes[0].State == "alive" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the node: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Nodes[0].ID != "head" || st.Nodes[0].Total.CPUs != 2 || st.Nodes[0].Role != "head" {
		t.Errorf("node = %+v", st.Nodes[0])
	}
	if _, err := rt.GetActor(ctx, "nobody"); !errors.Is(err, actors.ErrNotFound) {
		t.Errorf("get unknown: %v, want ErrNotFound", err)
	}
	_, err = rt.SpawnActor(ctx, actors.Spec{Type: "Counter", Resources: actors.ResourceSet{CPUs: 64}})
	if !errors.Is(err, actors.ErrInfeasible) {
		t.Errorf("spawn too big: %v, want ErrInfeasible", err)
	} else if n := strings.Count(err.Error(), "infeasible"); n != 1 || !strings.Contains(err.Error(), "closest: ") {
		t.Errorf("spawn too big: %q: want the closest node and \"infeasible\" once, not %d times", err, n)
	}
}
