package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"troupe/scheduler"
)

// startBenchCluster starts three server processes (LAN timing, the
// default of troupe start) formed with bootstrap-expect and waits for a
// leader.
func startBenchCluster(b *testing.B, tok string) ([]*proc, []procSpec) {
	b.Helper()
	var servers []*proc
	var specs []procSpec
	for i := 0; i < 3; i++ {
		s := newSpec(b, fmt.Sprintf("srv%d", i+1), fmt.Sprintf("127.0.0.%d", 41+i), RoleServer, tok, "")
		s.Expect, s.LAN = 3, true
		if i > 0 {
			s.Join = []string{specs[0].Bind}
		}
		specs = append(specs, s)
		servers = append(servers, spawn(b, s))
	}
	waitHealthy(b, servers, tok)
	return servers, specs
}

// waitHealthy waits until the servers agree on a leader, all three are
// voters and every node is registered alive.
func waitHealthy(b testing.TB, servers []*proc, tok string) {
	waitFor(b, "a healthy 3-server cluster", 30*time.Second, func() bool {
		for _, s := range servers {
			st, err := statusFrom(s.addr(), tok)
			if err != nil || st.Leader == "" || len(st.Servers) != 3 || len(st.Nodes) != 3 {
				return false
			}
			for _, n := range st.Nodes {
				if n.State != "alive" {
					return false
				}
			}
		}
		return true
	})
}

// BenchmarkCommittedPlacements measures actor placements decided by the
// leader and committed through raft on a 3-server loopback cluster of
// separate processes (raft-wal fsyncs on every server), with clients
// sending CreateActors RPCs. batch is the number of actors per RPC;
// concurrent RPCs are batched further by the leader's placer into one raft
// entry. One op is one committed placement.
func BenchmarkCommittedPlacements(b *testing.B) {
	const tok = "bench-token"
	servers, _ := startBenchCluster(b, tok)
	// The leader is looked up once, while the state is small: a status
	// lists actors, and after a few hundred thousand placements it no
	// longer answers within statusFrom's timeout on a loaded machine. Calls
	// reaching a server that no longer leads are forwarded anyway.
	st, err := statusFrom(multiAddr(servers...), tok)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		batch, clients int
		via            string
	}{{1, 64, "leader"}, {64, 8, "leader"}, {64, 8, "follower"}} {
		b.Run(fmt.Sprintf("batch=%d/clients=%d/via=%s", bc.batch, bc.clients, bc.via), func(b *testing.B) {
			addr := st.LeaderAddr
			if bc.via == "follower" { // the follower forwards each call to the leader
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
			prefix := fmt.Sprintf("%s-%d-%d-", b.Name(), b.N, time.Now().UnixNano())
			var next, failed atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			lat := make([][]time.Duration, bc.clients) // per client: each call's commit latency
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < bc.clients; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for {
						lo := next.Add(int64(bc.batch)) - int64(bc.batch)
						if lo >= int64(b.N) {
							return
						}
						hi := min(lo+int64(bc.batch), int64(b.N))
						specs := make([]scheduler.ActorSpec, 0, hi-lo)
						for i := lo; i < hi; i++ {
							specs = append(specs, scheduler.ActorSpec{ID: scheduler.ActorID(fmt.Sprint(prefix, i)), Class: "Bench",
								Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 0}}})
						}
						t0 := time.Now()
						res, err := c.CreateActors(context.Background(), specs)
						lat[g] = append(lat[g], time.Since(t0))
						if err != nil {
							failed.Add(int64(len(specs)))
							firstErr.CompareAndSwap(nil, err.Error())
							continue
						}
						for _, r := range res {
							if r.Err != nil || r.Placement == nil {
								failed.Add(1)
								firstErr.CompareAndSwap(nil, fmt.Sprintf("%+v", r))
							}
						}
					}
				}(g)
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			if f := failed.Load(); f > 0 {
				b.Fatalf("%d of %d placements failed; first: %v", f, b.N, firstErr.Load())
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "placements/s")
			reportLatency(b, lat)
		})
	}
}

// reportLatency reports the median and 99th percentile of the calls'
// latencies (a call returns once its placements are committed) in ms.
func reportLatency(b *testing.B, per [][]time.Duration) {
	var all []time.Duration
	for _, l := range per {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	at := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// BenchmarkLeaderFailover measures, per op, the time from kill -9 of the
// raft leader of a 3-server cluster (LAN timing) to the first write
// committed through the survivors; the killed server is restarted from its
// data dir between ops (not timed). Reported: median and max in ms.
func BenchmarkLeaderFailover(b *testing.B) {
	const tok = "bench-token"
	servers, _ := startBenchCluster(b, tok)
	var times []time.Duration
	for i := 0; i < b.N; i++ {
		st, err := statusFrom(multiAddr(servers...), tok)
		if err != nil || st.Leader == "" {
			b.Fatalf("no leader before kill %d: %v", i, err)
		}
		li := -1
		for k, s := range servers {
			if s.spec.ID == st.Leader {
				li = k
			}
		}
		var surv []*proc
		for k, s := range servers {
			if k != li {
				surv = append(surv, s)
			}
		}
		c, err := NewClient(multiAddr(surv...), tok)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		servers[li].kill()
		for k := 0; ; k++ {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			res, err := c.CreateActors(ctx, []scheduler.ActorSpec{{ID: scheduler.ActorID(fmt.Sprintf("fo-%d-%d-%d", i, k, start.UnixNano())), Class: "F"}})
			cancel()
			if err == nil && res[0].Err == nil {
				break
			}
			if time.Since(start) > 10*time.Second {
				b.Fatalf("no write committed 10 s after killing the leader: %v", err)
			}
		}
		times = append(times, time.Since(start))
		c.Close()
		b.StopTimer()
		sp := servers[li].spec
		sp.Join = []string{surv[0].addr()}
		servers[li] = spawn(b, sp)
		waitHealthy(b, servers, tok)
		b.StartTimer()
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(times[len(times)-1].Microseconds())/1000, "ms-max")
}
