package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/api"
	"troupe/scheduler"
)

type failReq struct {
	I    int  `msgpack:"i"`
	Code bool `msgpack:"code,omitempty"`
}

type failServer struct{}

// Fail returns sentinel I of the codec, wrapped; with Code set, through
// Status with an explicit code, as handlers that choose a code do.
func (failServer) Fail(ctx context.Context, r *failReq) (*echoResp, error) {
	all := api.Sentinels()
	if r.I < 0 || r.I >= len(all) {
		return nil, fmt.Errorf("create actor x: %w", &scheduler.InfeasibleError{Reason: "no GPU"})
	}
	err := fmt.Errorf("handler: %w", all[r.I])
	if r.Code {
		return nil, Status(codes.FailedPrecondition, err)
	}
	return nil, err
}

var failDesc = grpc.ServiceDesc{
	ServiceName: "troupe.test.Fail",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{UnaryMethod("troupe.test.Fail", "Fail", failServer.Fail)},
}

// TestSentinelsCrossGRPC: errors.Is holds on the client for every sentinel
// of api's codec that a handler returned, and the status code stays.
func TestSentinelsCrossGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{Security: Security{Token: "t"}})
	srv.RegisterService(&failDesc, failServer{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := Dial(lis.Addr().String(), Options{Security: Security{Token: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, s := range api.Sentinels() {
		for _, withCode := range []bool{false, true} {
			err := cc.Invoke(ctx, "/troupe.test.Fail/Fail", &failReq{I: i, Code: withCode}, new(echoResp))
			if !errors.Is(err, s) {
				t.Errorf("%v (code %v): errors.Is(%v) = false", s, withCode, err)
			}
			want := codes.Unknown
			switch {
			case withCode:
				want = codes.FailedPrecondition
			case s == context.Canceled:
				want = codes.Canceled
			case s == context.DeadlineExceeded:
				want = codes.DeadlineExceeded
			}
			if got := status.Code(err); got != want {
				t.Errorf("%v: code %v, want %v", s, got, want)
			}
		}
	}
	err = cc.Invoke(ctx, "/troupe.test.Fail/Fail", &failReq{I: -1}, new(echoResp))
	var ie *scheduler.InfeasibleError
	if !errors.As(err, &ie) || ie.Reason != "no GPU" {
		t.Errorf("InfeasibleError did not cross: %v", err)
	}
}
