package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"troupe/actors"
)

type probe struct{ gpus []int }

func newProbe(ctx context.Context, _ struct{}) (*probe, error) {
	info, _ := actors.Self(ctx)
	return &probe{gpus: info.GPUs}, nil
}

// GPUs returns the GPU indices the actor was given.
func (p *probe) GPUs(ctx context.Context, _ struct{}) ([]int, error) { return p.gpus, nil }

func init() { actors.MustRegister("probe", newProbe) }

func initLocal(t *testing.T, opts ...Option) Runtime {
	t.Helper()
	rt, err := Init(context.Background(), append([]Option{Address("")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	return rt
}

func spawnProbe(ctx context.Context, rt Runtime, opts ...actors.Option) (actors.Handle[probe], error) {
	return actors.Spawn[probe](ctx, rt, "probe", struct{}{}, opts...)
}

func TestInitDefaultsToTheMachine(t *testing.T) {
	t.Setenv("TROUPE_SIMULATE_GPUS", "")
	rt := initLocal(t)
	st, err := rt.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 1 || st.Nodes[0].Total.CPUs < 1 || st.Nodes[0].Total.MemoryBytes <= 0 || st.Nodes[0].Total.GPUs != 0 {
		t.Fatalf("node = %+v", st.Nodes)
	}
}

func TestSimulatedGPUs(t *testing.T) {
	t.Setenv("TROUPE_SIMULATE_GPUS", "4")
	rt := initLocal(t)
	st, _ := rt.Status(context.Background())
	if n := st.Nodes[0]; n.Total.GPUs != 4 || !n.Simulated || len(n.GPUs) != 4 {
		t.Fatalf("node = %+v", n)
	}
	for _, bad := range []string{"-1", "lots", "dgx-h200"} {
		if _, err := Init(context.Background(), Address(""), SimulateGPUs(bad)); err == nil || !strings.Contains(err.Error(), "simulated GPU profile") {
			t.Errorf("SimulateGPUs(%q): err = %v", bad, err)
		}
	}
	rt2 := initLocal(t, SimulateGPUs("dgx-h100"))
	if st, _ := rt2.Status(context.Background()); st.Nodes[0].Total.GPUs != 8 {
		t.Errorf("dgx-h100 has %g GPUs", st.Nodes[0].Total.GPUs)
	}
}

func TestAddressIsRefusedUntilClustersExist(t *testing.T) {
	if _, err := Init(context.Background(), Address("10.0.0.1:1")); !errors.Is(err, ErrNoClusterSupport) {
		t.Skipf("remote clusters are supported now: %v", err)
	}
}

func TestGPUAssignment(t *testing.T) {
	ctx := context.Background()
	rt := initLocal(t, SimulateGPUs("4"))
	gpusOf := func(h actors.Handle[probe]) []int {
		g, err := actors.Call(ctx, h, (*probe).GPUs, struct{}{}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	two, err := spawnProbe(ctx, rt, actors.GPUs(2))
	if err != nil {
		t.Fatal(err)
	}
	if g := gpusOf(two); len(g) != 2 || g[0] != 0 || g[1] != 1 {
		t.Fatalf("2-GPU actor got %v", g)
	}
	// Two halves share one GPU; a third half takes another.
	h1, _ := spawnProbe(ctx, rt, actors.GPUs(0.5))
	h2, _ := spawnProbe(ctx, rt, actors.GPUs(0.5))
	h3, _ := spawnProbe(ctx, rt, actors.GPUs(0.5))
	if a, b, c := gpusOf(h1), gpusOf(h2), gpusOf(h3); a[0] != b[0] || c[0] == a[0] {
		t.Fatalf("fractional GPUs: %v %v %v; want the first two sharing", a, b, c)
	}
	st, _ := rt.Status(ctx)
	if used := st.Nodes[0].Used.GPUs; used != 3.5 {
		t.Fatalf("used GPUs = %g; want 3.5", used)
	}
	actors.Kill(ctx, two)
	actors.Kill(ctx, h1)
	actors.Kill(ctx, h2)
	actors.Kill(ctx, h3)
	st, _ = rt.Status(ctx)
	if used := st.Nodes[0].Used.GPUs; used != 0 {
		t.Fatalf("used GPUs after kills = %g; want 0", used)
	}
}

func TestSpawnWaitsForResources(t *testing.T) {
	ctx := context.Background()
	rt := initLocal(t, NodeCPUs(2))
	first, err := spawnProbe(ctx, rt, actors.CPUs(2))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		h   actors.Handle[probe]
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := spawnProbe(ctx, rt, actors.CPUs(1))
		done <- result{h, err}
	}()
	// It queues: the status shows it pending, and it has not returned.
	waitFor(t, func() bool {
		st, _ := rt.Status(ctx)
		return len(st.Actors) == 2 && st.Actors[1].State == "PENDING"
	})
	select {
	case r := <-done:
		t.Fatalf("spawn returned before resources were free: %+v", r)
	default:
	}
	actors.Kill(ctx, first)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	// A queued spawn gives up when its context ends.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := spawnProbe(cctx, rt, actors.CPUs(2)); errc <- err }()
	waitFor(t, func() bool { st, _ := rt.Status(ctx); return st.Actors[len(st.Actors)-1].State == "PENDING" })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for resources (CPUs=2)") {
		t.Fatalf("cancelled pending spawn: %v", err)
	}
	st, _ := rt.Status(ctx)
	if used := st.Nodes[0].Used.CPUs; used != 1 {
		t.Fatalf("used CPUs = %g; want 1 (the cancelled spawn holds nothing)", used)
	}
}

func TestInfeasibleFailsAtOnce(t *testing.T) {
	ctx := context.Background()
	rt := initLocal(t, NodeCPUs(2), NodeMemory(1<<30), NodeResources(map[string]float64{"tpu": 1}))
	for _, c := range []struct {
		opt  actors.Option
		want string
	}{
		{actors.CPUs(3), "short of CPU (needs 3, has 2)"},
		{actors.Memory(2 << 30), "short of memory (needs 2GiB, has 1GiB)"},
		{actors.GPUs(1), "short of GPUs (needs 1 GPU, has 0)"},
		{actors.Resources(map[string]float64{"tpu": 2}), "short of tpu (needs 2, has 1)"},
	} {
		_, err := spawnProbe(ctx, rt, c.opt)
		if !errors.Is(err, actors.ErrInfeasible) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v; want %q", err, c.want)
		}
	}
	if _, err := spawnProbe(ctx, rt, actors.Resources(map[string]float64{"tpu": 1})); err != nil {
		t.Errorf("feasible custom resource: %v", err)
	}
}

func TestShutdownKillsActorsAndRefusesSpawns(t *testing.T) {
	ctx := context.Background()
	rt := initLocal(t)
	h, err := spawnProbe(ctx, rt)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	var died *actors.ActorDiedError
	if _, err := actors.Call(ctx, h, (*probe).GPUs, struct{}{}).Get(ctx); !errors.As(err, &died) {
		t.Fatalf("call after shutdown: %v", err)
	}
	if _, err := spawnProbe(ctx, rt); !errors.Is(err, ErrShutdown) {
		t.Fatalf("spawn after shutdown: %v", err)
	}
}

// waitFor polls cond: state changes here happen on other goroutines with no
// event to wait on.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPlacementFollowsGPUTopology(t *testing.T) {
	ctx := context.Background()
	rt := initLocal(t, SimulateGPUs("2x4-nvlink")) // NVLink islands {0-3} and {4-7}
	gpusOf := func(h actors.Handle[probe]) []int {
		g, err := actors.Call(ctx, h, (*probe).GPUs, struct{}{}).Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	two, err := spawnProbe(ctx, rt, actors.GPUs(2))
	if err != nil {
		t.Fatal(err)
	}
	four, err := spawnProbe(ctx, rt, actors.GPUs(4))
	if err != nil {
		t.Fatal(err)
	}
	island := func(g []int) int { return g[0] / 4 }
	g2, g4 := gpusOf(two), gpusOf(four)
	for _, g := range g2 {
		if island([]int{g}) != island(g2) {
			t.Fatalf("2-GPU actor spans islands: %v", g2)
		}
	}
	for _, g := range g4 {
		if island([]int{g}) != island(g4) {
			t.Fatalf("4-GPU actor spans islands: %v (the 2-GPU actor has %v)", g4, g2)
		}
	}
	if island(g2) == island(g4) {
		t.Fatalf("both on one island: %v %v", g2, g4)
	}
}
