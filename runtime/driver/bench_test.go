package driver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"troupe/runtime/client"

	"troupe/actors"
)

// BenchmarkRemoteSpawn measures remote actor creation across two nodes
// (the target; Ray's anchor: 638/s): the head (raft leader, in
// this process) and a worker node in a process of its own, the driver in
// this process. Spawns alternate between the two nodes (hard node
// affinity: the default placement packs zero-resource actors on one node).
// Each spawn is created through the leader, started in the job's worker
// process on its node (one per job and node, already running after the
// warm-up), waited for until ALIVE, and connected to. 64 × GOMAXPROCS
// spawns in flight.
func BenchmarkRemoteSpawn(b *testing.B) {
	const tok = "bench-token"
	n := startHeadB(b, tok)
	defer n.Shutdown()
	startNodeProcB(b, tok, n.Addr(), "p1")
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := connect(ctx, n.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	waitNodesB(b, rt, 2)
	nodes := []string{"head", "p1"}
	benchSpawn(b, rt, func(i int64) []actors.Option {
		return []actors.Option{actors.NodeAffinity(nodes[i%2], false)}
	})
}

// BenchmarkRemoteSpawnOneNode is BenchmarkRemoteSpawn on a one-node
// cluster (the head alone).
func BenchmarkRemoteSpawnOneNode(b *testing.B) {
	const tok = "bench-token"
	n := startHeadB(b, tok)
	defer n.Shutdown()
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := connect(ctx, n.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	waitNodesB(b, rt, 1)
	benchSpawn(b, rt, func(int64) []actors.Option { return nil })
}

// benchSpawn warms up (the job's worker process on each node starts with
// its first actor) and then spawns b.N actors, 64 × GOMAXPROCS at once;
// opts gives the options of the i-th spawn. Every spawn has a deadline, so
// a lost one fails the benchmark instead of hanging it.
func benchSpawn(b *testing.B, rt *Driver, opts func(i int64) []actors.Option) {
	ctx := context.Background()
	for i := int64(0); i < 2; i++ {
		if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}, opts(i)...); err != nil {
			b.Fatal(err)
		}
	}
	var failed, seq atomic.Int64
	var firstErr atomic.Value
	b.SetParallelism(64) // 64 × GOMAXPROCS spawns in flight
	cpu0 := treeCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			_, err := actors.Spawn[rcounter](sctx, rt, "RCounter", rcounterCfg{}, opts(seq.Add(1))...)
			cancel()
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		}
	})
	b.StopTimer()
	cpu := treeCPU() - cpu0
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d spawns failed; first: %v", f, firstErr.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "actors/s")
	if cpu > 0 {
		// All processes of the cluster together (this one, the node
		// process, the workers): less noisy than the rate on a shared
		// machine.
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/actor")
	}
}

// treeCPU is the CPU time (user + system) used so far by this process and
// its descendants still running (Linux /proc; 0 elsewhere).
func treeCPU() time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type st struct {
		ppid  int
		ticks int64
	}
	procs := map[int]st{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) in parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		stt, _ := strconv.ParseInt(f[12], 10, 64)
		procs[pid] = st{ppid, ut + stt}
	}
	in := map[int]bool{os.Getpid(): true}
	for changed := true; changed; {
		changed = false
		for pid, p := range procs {
			if !in[pid] && in[p.ppid] {
				in[pid], changed = true, true
			}
		}
	}
	var ticks int64
	for pid := range in {
		ticks += procs[pid].ticks
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// startNodeProcB starts a worker node (runNodeProc) in a child process of
// this test binary, joined to the head at join; cleanup stops it through
// the Stop RPC (so it removes its data dir) and kills it if it lingers.
func startNodeProcB(b testing.TB, tok, join, id string) {
	b.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(b))
	cmd := nodeProcCmd(b, fmt.Sprintf("%s,%s,%d,%s,%s", id, addr, freeTCPPort(b), tok, join))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		if c, err := client.NewClient(addr, tok); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			c.Stop(ctx, "benchmark over")
			cancel()
			c.Close()
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
}

// BenchmarkRemoteCall measures sync calls from a driver to an actor in a
// worker process of a one-node cluster (the wire path, after resolution).
func BenchmarkRemoteCall(b *testing.B) {
	const tok = "bench-token"
	n := startHeadB(b, tok)
	defer n.Shutdown()
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := connect(ctx, n.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	waitNodesB(b, rt, 1)
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := actors.Call(ctx, h, (*rcounter).Add, 1).Get(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkRemoteSpawnSerial is the latency of one remote spawn at a time.
func BenchmarkRemoteSpawnSerial(b *testing.B) {
	const tok = "bench-token"
	n := startHeadB(b, tok)
	defer n.Shutdown()
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := connect(ctx, n.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	waitNodesB(b, rt, 1)
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRemoteCallPipelined issues calls without waiting for each reply
// (windows of 256), through the same remote ref.
func BenchmarkRemoteCallPipelined(b *testing.B) {
	const tok = "bench-token"
	n := startHeadB(b, tok)
	defer n.Shutdown()
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := connect(ctx, n.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	waitNodesB(b, rt, 1)
	h, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{})
	if err != nil {
		b.Fatal(err)
	}
	futs := make([]*actors.Future[int], 0, 256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		futs = append(futs, actors.Call(ctx, h, (*rcounter).Add, 1))
		if len(futs) == cap(futs) || i == b.N-1 {
			for _, f := range futs {
				if _, err := f.Get(ctx); err != nil {
					b.Fatal(err)
				}
			}
			futs = futs[:0]
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}
