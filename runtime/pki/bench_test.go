package pki

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"troupe/runtime/transport"
)

type benchReq struct {
	Payload []byte `msgpack:"p"`
}

type benchEcho struct{}

func (benchEcho) echo(ctx context.Context, r *benchReq) (*benchReq, error) { return r, nil }

var benchDesc = grpc.ServiceDesc{
	ServiceName: "troupe.BenchEcho",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{transport.UnaryMethod("troupe.BenchEcho", "Echo", benchEcho.echo)},
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGRPCCall: a unary gRPC call with a 1 KiB payload over loopback
// TCP, plaintext against TLS 1.3 (cluster certificates, token on both),
// one call at a time (sync) and 16 in flight (parallel). cpu-ns/op is the
// CPU of client and server (one process) per call.
func BenchmarkGRPCCall(b *testing.B) {
	ca, _, err := NewCA("bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	id, err := IssueLocal(ca, Names{CommonName: "n", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, "")
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		sec  transport.Security
	}{
		{"plain", transport.Security{Token: "tok"}},
		{"tls", transport.Security{Token: "tok", Server: id.ServerTLS(), Client: id.ClientTLS()}},
	} {
		srv := transport.NewServer(transport.Options{Security: mode.sec})
		srv.RegisterService(&benchDesc, benchEcho{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); srv.Serve(ln) }()
		cc, err := transport.Dial(ln.Addr().String(), transport.Options{Security: mode.sec})
		if err != nil {
			b.Fatal(err)
		}
		req := &benchReq{Payload: make([]byte, 1024)}
		call := func() error {
			return cc.Invoke(context.Background(), "/troupe.BenchEcho/Echo", req, new(benchReq))
		}
		if err := call(); err != nil {
			b.Fatal(err)
		}
		b.Run("sync/"+mode.name, func(b *testing.B) {
			c0 := cpuTime()
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
		b.Run("parallel16/"+mode.name, func(b *testing.B) {
			b.SetParallelism(16)
			c0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := call(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
		})
		cc.Close()
		srv.Stop()
		<-done
	}
}
