package transport

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// DefaultMaxMessageSize bounds every gRPC message, sent or received, unless
// Options say otherwise: large enough for a status of thousands of actors,
// small enough that a hostile frame cannot exhaust memory. Bulk data (object
// transfers) goes in chunks below it.
const DefaultMaxMessageSize = 16 << 20

// Options configure a server or a client connection.
type Options struct {
	// Security is the token and the TLS configurations: the server's
	// (Security.Server) for NewServer, the client's (Security.Client) for
	// Dial; nil TLS configurations mean plaintext.
	Security Security
	// Public lists full method names ("/troupe.PKI/CA") a server answers
	// without the token: only methods that reveal nothing secret and change
	// nothing (the CA bootstrap).
	Public []string
	// MaxMessageSize bounds sent and received messages in bytes; 0 means
	// DefaultMaxMessageSize.
	MaxMessageSize int
}

func (o Options) maxSize() int {
	if o.MaxMessageSize <= 0 {
		return DefaultMaxMessageSize
	}
	return o.MaxMessageSize
}

// NewServer returns a gRPC server that speaks msgpack, refuses RPCs without
// the token, and bounds message sizes. Register services with
// srv.RegisterService(&desc, impl).
func NewServer(o Options, extra ...grpc.ServerOption) *grpc.Server {
	a := NewAuthenticator(o.Security.Token, o.Public...)
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(o.maxSize()),
		grpc.MaxSendMsgSize(o.maxSize()),
		grpc.InTapHandle(a.TapHandle),
		grpc.ChainUnaryInterceptor(a.UnaryInterceptor, errorInterceptor),
		grpc.ChainStreamInterceptor(a.StreamInterceptor),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if o.Security.Server != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(o.Security.Server)))
	}
	return grpc.NewServer(append(opts, extra...)...)
}

// Dial returns a client connection to addr ("host:port") that sends the
// token with every RPC, encodes with msgpack and bounds message sizes. The
// connection is lazy: errors show on the first RPC.
func Dial(addr string, o Options, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	cause := new(connCause)
	var creds credentials.TransportCredentials = plainCreds{insecure.NewCredentials(), cause}
	if o.Security.Client != nil {
		creds = tlsCreds{credentials.NewTLS(o.Security.Client), cause}
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(TokenCredentials{Token: o.Security.Token}),
		grpc.WithChainUnaryInterceptor(decodeInterceptor, causeInterceptor(cause)),
		grpc.WithDefaultCallOptions(
			grpc.CallContentSubtype(CodecName),
			grpc.MaxCallRecvMsgSize(o.maxSize()),
			grpc.MaxCallSendMsgSize(o.maxSize()),
		),
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return cc, nil
}

// UnaryMethod builds a grpc.MethodDesc for method name of service (its
// full gRPC name, e.g. "troupe.Control") whose handler
// takes a *Req and returns a *Resp. It saves writing the decode/interceptor
// boilerplate of a hand-written ServiceDesc for each method.
func UnaryMethod[S any, Req any, Resp any](service, name string, call func(srv S, ctx context.Context, req *Req) (*Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			s, ok := srv.(S)
			if !ok {
				return nil, fmt.Errorf("method %s: server of type %T does not implement the service", name, srv)
			}
			if interceptor == nil {
				return call(s, ctx, req)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + service + "/" + name}
			return interceptor(ctx, req, info, func(ctx context.Context, r any) (any, error) {
				return call(s, ctx, r.(*Req))
			})
		},
	}
}
