package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type echoReq struct {
	Text    string            `msgpack:"text"`
	Payload []byte            `msgpack:"payload,omitempty"`
	Tags    map[string]string `msgpack:"tags,omitempty"`
	Nums    []int64           `msgpack:"nums,omitempty"`
	Nested  *echoReq          `msgpack:"nested,omitempty"`
}

type echoResp struct {
	Text string `msgpack:"text"`
	Size int    `msgpack:"size"`
}

type echoServer struct{ calls int }

func (s *echoServer) Echo(ctx context.Context, r *echoReq) (*echoResp, error) {
	s.calls++
	return &echoResp{Text: r.Text, Size: len(r.Payload)}, nil
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "troupe.test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		UnaryMethod("troupe.test.Echo", "Echo", (*echoServer).Echo),
	},
}

// startEcho serves the echo service with opts and returns its address.
func startEcho(t *testing.T, o Options) (string, *echoServer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(o)
	impl := &echoServer{}
	srv.RegisterService(&echoDesc, impl)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), impl
}

func call(t *testing.T, addr string, o Options, req *echoReq, extra ...grpc.CallOption) (*echoResp, error) {
	t.Helper()
	cc, err := Dial(addr, o)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp := new(echoResp)
	err = cc.Invoke(ctx, "/troupe.test.Echo/Echo", req, resp, extra...)
	return resp, err
}

func TestTokenAuth(t *testing.T) {
	addr, impl := startEcho(t, Options{Security: Security{Token: "s3cret"}})
	resp, err := call(t, addr, Options{Security: Security{Token: "s3cret"}}, &echoReq{Text: "hi", Payload: []byte("abc")})
	if err != nil {
		t.Fatalf("right token: %v", err)
	}
	if resp.Text != "hi" || resp.Size != 3 {
		t.Fatalf("echo = %+v", resp)
	}
	for _, tc := range []struct{ token, want string }{
		{"", "missing cluster token"},
		{"wrong", "invalid cluster token"},
	} {
		_, err := call(t, addr, Options{Security: Security{Token: tc.token}}, &echoReq{Text: "x"})
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %q: err = %v, want Unauthenticated %q", tc.token, err, tc.want)
		}
	}
	if impl.calls != 1 {
		t.Errorf("handler ran %d times, want 1 (refused calls must not reach it)", impl.calls)
	}
}

func TestAuthOffAcceptsAll(t *testing.T) {
	addr, _ := startEcho(t, Options{})
	if _, err := call(t, addr, Options{}, &echoReq{Text: "x"}); err != nil {
		t.Fatal(err)
	}
}

func TestInterceptorRefusesWithoutTap(t *testing.T) {
	// The interceptors are a second line behind the tap handle: check them
	// on their own.
	a := NewAuthenticator("tok")
	_, err := a.UnaryInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, req any) (any, error) {
		t.Fatal("handler ran without a token")
		return nil, nil
	})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("err = %v", err)
	}
}

func TestMessageSizeLimits(t *testing.T) {
	const limit = 64 << 10
	addr, impl := startEcho(t, Options{Security: Security{Token: "t"}, MaxMessageSize: limit})
	// Client-side limit: the client refuses to send.
	_, err := call(t, addr, Options{Security: Security{Token: "t"}, MaxMessageSize: limit}, &echoReq{Payload: make([]byte, 2*limit)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized send: %v, want ResourceExhausted", err)
	}
	// Server-side limit: a client with a bigger limit sends; the server refuses.
	_, err = call(t, addr, Options{Security: Security{Token: "t"}, MaxMessageSize: 8 * limit}, &echoReq{Payload: make([]byte, 2*limit)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized receive: %v, want ResourceExhausted", err)
	}
	if impl.calls != 0 {
		t.Fatalf("oversized calls reached the handler")
	}
	// The server still works.
	if _, err := call(t, addr, Options{Security: Security{Token: "t"}}, &echoReq{Payload: make([]byte, limit/2)}); err != nil {
		t.Fatalf("after oversized: %v", err)
	}
}

// rawCodec sends []byte as is under the msgpack name: a client that sends
// garbage frames.
type rawCodec struct{}

func (rawCodec) Name() string { return CodecName }
func (rawCodec) Marshal(v any) ([]byte, error) {
	return *(v.(*[]byte)), nil
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

func TestMalformedFrame(t *testing.T) {
	addr, impl := startEcho(t, Options{Security: Security{Token: "t"}})
	cc, err := Dial(addr, Options{Security: Security{Token: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, garbage := range [][]byte{{0xc1}, {0x81, 0xa4, 't', 'e', 'x', 't', 0xdb, 0xff, 0xff, 0xff, 0xff}, bytes.Repeat([]byte{0x91}, 100000), {0xdd, 0x7f, 0xff, 0xff, 0xff}} {
		in, out := garbage, []byte(nil)
		err := cc.Invoke(context.Background(), "/troupe.test.Echo/Echo", &in, &out, grpc.ForceCodec(rawCodec{}))
		if err == nil {
			t.Errorf("garbage % x... accepted", garbage[:min(8, len(garbage))])
		}
	}
	if impl.calls != 0 {
		t.Fatalf("garbage reached the handler")
	}
	if _, err := call(t, addr, Options{Security: Security{Token: "t"}}, &echoReq{Text: "still up"}); err != nil {
		t.Fatalf("after garbage: %v", err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	in := &echoReq{Text: "a", Payload: []byte{1, 2}, Tags: map[string]string{"k": "v"}, Nums: []int64{-1, 1 << 40}, Nested: &echoReq{Text: "b"}}
	b, err := Codec{}.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := new(echoReq)
	if err := (Codec{}).Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	if out.Text != "a" || out.Tags["k"] != "v" || out.Nums[1] != 1<<40 || out.Nested.Text != "b" {
		t.Fatalf("round trip: %+v", out)
	}
	if err := (Codec{}).Unmarshal([]byte{0xc1}, out); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad byte: %v", err)
	}
}

// FuzzCodecDecode: decoding arbitrary bytes never panics or hangs, and
// whatever decodes re-encodes.
func FuzzCodecDecode(f *testing.F) {
	good, _ := Codec{}.Marshal(&echoReq{Text: "seed", Payload: []byte{1}, Tags: map[string]string{"a": "b"}, Nums: []int64{3}, Nested: &echoReq{}})
	for _, s := range [][]byte{good, {}, {0xc1}, {0x80}, {0xdd, 0x7f, 0xff, 0xff, 0xff}, {0xdf, 0xff, 0xff, 0xff, 0xff}, {0xc6, 0xff, 0xff, 0xff, 0xff}, bytes.Repeat([]byte{0x81, 0xa6, 'n', 'e', 's', 't', 'e', 'd'}, 50)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := new(echoReq)
		if err := (Codec{}).Unmarshal(data, v); err != nil {
			return
		}
		if _, err := (Codec{}).Marshal(v); err != nil {
			t.Fatalf("decoded value does not re-encode: %v", err)
		}
	})
}
