package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"troupe/actors"
	"troupe/internal/testnet"
	"troupe/runtime/cluster"
	"troupe/runtime/worker"
	"troupe/scheduler"
)

// The placement group tests run the same actor on the embedded cluster and
// on a cluster of real nodes (in worker processes: this test binary,
// started by a node in worker mode). The driver's own tests are in
// runtime/driver.

// rcounter is the actor of the placement group tests.
type rcounter struct{ n int }

type rcounterCfg struct{ Start int }

func (c *rcounter) Add(ctx context.Context, d int) (int, error) { c.n += d; return c.n, nil }

func (c *rcounter) Whoami(ctx context.Context, _ int) (actors.ActorInfo, error) {
	info, _ := actors.Self(ctx)
	return info, nil
}

func init() {
	actors.MustRegister("RCounter", func(ctx context.Context, c rcounterCfg) (*rcounter, error) {
		if c.Start < 0 {
			return nil, fmt.Errorf("negative start %d", c.Start)
		}
		return &rcounter{n: c.Start}, nil
	})
}

// TestMain turns the test binary into a worker when a node starts it as
// one: Init serves the registered types and returns ErrWorkerDone when the
// node ends the worker.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(worker.EnvVar); ok {
		if _, err := Init(context.Background()); !errors.Is(err, ErrWorkerDone) {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		if code, err := strconv.Atoi(os.Getenv(workerCodeEnv)); err == nil {
			os.Exit(code) // TestInitWorkerReturns: Init returned
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// freeTCPPort is a loopback port free for TCP and UDP, from below the
// ephemeral range (testnet): a port the kernel chose for :0 can be taken by
// another test binary's outgoing connection before the node binds it.
func freeTCPPort(t testing.TB) int { return testnet.Port(t, "127.0.0.1") }

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func startHead(t *testing.T, tok string) *cluster.Node {
	t.Helper()
	n, err := cluster.Start(context.Background(), cluster.Config{NodeID: "head", Role: cluster.RoleHead, DataDir: t.TempDir(),
		BindAddr: fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), GossipPort: freeTCPPort(t), RaftPort: freeTCPPort(t), Token: tok,
		Timing: cluster.FastTiming(), Logger: slog.New(slog.NewTextHandler(discard{}, nil)),
		Resources: scheduler.Resources{MilliCPU: 4000, MemoryBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// connectDriver connects a driver with token tok to the cluster at addr
// through Init and waits for its k live nodes. Its context ends after
// timeout. The caller defers done, which shuts the driver down.
func connectDriver(t *testing.T, tok, addr string, k int, timeout time.Duration) (ctx context.Context, rt Runtime, done func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	rt, err := Init(ctx, Address(addr), Token(tok))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done = func() {
		rt.Shutdown(context.Background())
		cancel()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := rt.Status(context.Background())
		live := 0
		for _, nd := range st.Nodes {
			if nd.State == "alive" {
				live++
			}
		}
		if err == nil && live >= k {
			return ctx, rt, done
		}
		if time.Now().After(deadline) {
			done()
			t.Fatalf("cluster never had %d live nodes: %+v %v", k, st.Nodes, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
