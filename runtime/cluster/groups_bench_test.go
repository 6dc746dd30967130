package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"troupe/scheduler"
)

// BenchmarkCommittedPlacementGroups measures placement groups created
// (every bundle reserved, decided by the leader) and then removed, each
// step committed through raft on a 3-server loopback cluster of separate
// processes (raft-wal fsyncs on every server). Each client creates batch
// groups in one call, then removes them in another; the leader's placer
// batches concurrent calls further into one raft entry. One op is one
// group created and removed. Ray's microbenchmark: 838 create+remove/s.
func BenchmarkCommittedPlacementGroups(b *testing.B) {
	const tok = "bench-token"
	servers, _ := startBenchCluster(b, tok)
	for _, bc := range []struct {
		batch, clients, bundles int
		strategy                scheduler.Strategy
		via                     string
	}{
		{1, 64, 1, scheduler.Pack, "leader"},
		{64, 8, 1, scheduler.Pack, "leader"},
		{64, 8, 1, scheduler.Pack, "follower"},
		{64, 8, 3, scheduler.StrictSpread, "leader"},
	} {
		name := fmt.Sprintf("batch=%d/clients=%d/bundles=%d/%v/via=%s", bc.batch, bc.clients, bc.bundles, bc.strategy, bc.via)
		b.Run(name, func(b *testing.B) {
			st, err := statusFrom(multiAddr(servers...), tok)
			if err != nil {
				b.Fatal(err)
			}
			addr := st.LeaderAddr
			if bc.via == "follower" {
				for _, s := range servers {
					if s.addr() != st.LeaderAddr {
						addr = s.addr()
						break
					}
				}
			}
			c, err := NewClient(addr, tok)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			prefix := fmt.Sprintf("%d-%d-", b.N, time.Now().UnixNano())
			var next, failed atomic.Int64
			var firstErr atomic.Value
			fail := func(n int, what string) {
				failed.Add(int64(n))
				firstErr.CompareAndSwap(nil, what)
			}
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < bc.clients; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					for {
						lo := next.Add(int64(bc.batch)) - int64(bc.batch)
						if lo >= int64(b.N) {
							return
						}
						hi := min(lo+int64(bc.batch), int64(b.N))
						specs := make([]scheduler.GroupSpec, 0, hi-lo)
						ids := make([]scheduler.GroupID, 0, hi-lo)
						for i := lo; i < hi; i++ {
							spec := scheduler.GroupSpec{ID: scheduler.GroupID(fmt.Sprint(prefix, i)), Strategy: bc.strategy}
							for k := 0; k < bc.bundles; k++ {
								spec.Bundles = append(spec.Bundles, scheduler.Resources{MilliCPU: 1})
							}
							specs = append(specs, spec)
							ids = append(ids, spec.ID)
						}
						res, err := c.CommitPlacementGroups(ctx, specs, nil)
						if err != nil {
							fail(len(specs), err.Error())
							continue
						}
						for _, r := range res {
							if r.Err != nil || len(r.Bundles) != bc.bundles {
								fail(1, fmt.Sprintf("create: %+v", r))
							}
						}
						res, err = c.CommitPlacementGroups(ctx, nil, ids)
						if err != nil {
							fail(len(ids), err.Error())
							continue
						}
						for _, r := range res {
							if r.Err != nil {
								fail(1, fmt.Sprintf("remove: %v", r.Err))
							}
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d of %d groups failed; first: %v", f, b.N, firstErr.Load())
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "groups/s")
		})
	}
}
