package transport

import (
	"context"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// tlsCreds is gRPC's TLS credentials with handshake errors that say what
// to do: the common mistakes are a plaintext (--insecure) node, and a node
// of another cluster.
type tlsCreds struct {
	credentials.TransportCredentials
}

func (c tlsCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, HandshakeError(raw.RemoteAddr().String(), err)
	}
	return conn, info, nil
}

func (c tlsCreds) Clone() credentials.TransportCredentials {
	return tlsCreds{c.TransportCredentials.Clone()}
}

// HandshakeError explains a failed TLS handshake with the node at addr.
func HandshakeError(addr string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("TLS handshake with %s: the node does not speak TLS (started with --insecure?): connect with --insecure, or restart the cluster without it: %w", addr, err)
	case strings.Contains(msg, "expired"):
		return fmt.Errorf("TLS handshake with %s: a certificate has expired: renew it (troupe tls cert create, or delete the node's <data-dir>/tls/node.pem to get a new one from the cluster): %w", addr, err)
	}
	return fmt.Errorf("TLS handshake with %s: %w", addr, err)
}

// plainHint adds a hint to the errors of a plaintext connection that the
// node closed before speaking gRPC, which is what a TLS node does with a
// plaintext client.
func plainHint(plain bool) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || !plain || status.Code(err) != codes.Unavailable {
			return err
		}
		msg := status.Convert(err).Message()
		if strings.Contains(msg, "server preface") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF") {
			return status.Errorf(codes.Unavailable, "%s closed a plaintext connection: the cluster uses TLS (the default); drop --insecure: %s", strings.TrimPrefix(cc.Target(), "passthrough:///"), msg)
		}
		return err
	}
}
