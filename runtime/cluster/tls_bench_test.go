package cluster

import (
	"context"
	"testing"
)

// BenchmarkJoin: a worker node starting and joining a running head on
// loopback: with TLS (fetching and checking the CA, a CSR signed by the
// head, then the join over mutual TLS) against --insecure. One op is
// cluster.Start of the worker (it returns once joined); the shutdown is
// not timed.
func BenchmarkJoin(b *testing.B) {
	for _, insecure := range []bool{false, true} {
		name := "tls-bootstrap"
		if insecure {
			name = "insecure"
		}
		b.Run(name, func(b *testing.B) {
			const tok = "bench-join-token"
			hc := testConfig(b, "head", RoleHead, tok)
			hc.TLS.Insecure = insecure
			head := startNode(b, hc)
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				wc := testConfig(b, "w", RoleWorker, tok)
				wc.DataDir = "" // no saved certificate: a bootstrap every time
				wc.TLS.Insecure = insecure
				wc.Join = []string{head.Addr()}
				b.StartTimer()
				n, err := Start(context.Background(), wc)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				n.Shutdown()
				b.StartTimer()
			}
		})
	}
}
