package runtime

import (
	"context"
	"sync/atomic"
	"testing"

	"troupe/actors"
)

// BenchmarkRemoteSpawn measures remote actor creation on a one-node
// cluster from a driver in this process: create through the leader, start
// in the job's worker process (one per job, already running after the
// first), wait until ALIVE, connect. Parallel: 32 spawns at once.
func BenchmarkRemoteSpawn(b *testing.B) {
	const tok = "bench-token"
	n := startHeadB(b, tok)
	defer n.Shutdown()
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := Init(ctx, Address(n.Addr()))
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Shutdown(ctx)
	waitNodesB(b, rt, 1)
	// Warm up: the job's worker process starts with the first actor.
	if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}); err != nil {
		b.Fatal(err)
	}
	var failed atomic.Int64
	b.SetParallelism(64) // 64 × GOMAXPROCS spawns in flight
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := actors.Spawn[rcounter](ctx, rt, "RCounter", rcounterCfg{}); err != nil {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d spawns failed", f)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "actors/s")
}

// BenchmarkRemoteCall measures sync calls from a driver to an actor in a
// worker process of a one-node cluster (the wire path, after resolution).
func BenchmarkRemoteCall(b *testing.B) {
	const tok = "bench-token"
	n := startHeadB(b, tok)
	defer n.Shutdown()
	b.Setenv("TROUPE_TOKEN", tok)
	ctx := context.Background()
	rt, err := Init(ctx, Address(n.Addr()))
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
	rt, err := Init(ctx, Address(n.Addr()))
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
	rt, err := Init(ctx, Address(n.Addr()))
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
