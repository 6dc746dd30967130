package transport

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// tokenKey is the metadata key that carries the cluster token.
const tokenKey = "authorization"

const bearer = "Bearer "

// TokenCredentials attaches the cluster token to every RPC
// (credentials.PerRPCCredentials).
type TokenCredentials struct {
	// Token is the cluster token; empty sends nothing, and a server with auth
	// on refuses the call.
	Token string
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c TokenCredentials) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	if c.Token == "" {
		return nil, nil
	}
	return map[string]string{tokenKey: bearer + c.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials. It is
// false so that --insecure clusters (plaintext, on a network the operator
// trusts) still check the token; by default every connection is TLS.
func (TokenCredentials) RequireTransportSecurity() bool { return false }

// Authenticator checks the token of incoming RPCs.
type Authenticator struct {
	sum    [32]byte // SHA-256 of the token: compared in constant time
	off    bool
	public map[string]bool // full method names answered without the token
}

// NewAuthenticator returns an Authenticator for token. An empty token turns
// auth off (every RPC is accepted); the node daemon never does that unless
// told to with --insecure.
// Methods listed in public (full names) are answered without the token.
func NewAuthenticator(token string, public ...string) *Authenticator {
	a := &Authenticator{sum: sha256.Sum256([]byte(token)), off: token == "", public: map[string]bool{}}
	for _, m := range public {
		a.public[m] = true
	}
	return a
}

// Check returns nil when ctx carries the token, and otherwise a status error
// with codes.Unauthenticated saying what was wrong.
func (a *Authenticator) Check(ctx context.Context) error {
	if a.off {
		return nil
	}
	if m, ok := grpc.Method(ctx); ok && a.public[m] {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return a.checkMD(md)
}

// checkMD checks the token in request metadata.
func (a *Authenticator) checkMD(md metadata.MD) error {
	if a.off {
		return nil
	}
	vals := md.Get(tokenKey)
	if len(vals) == 0 || !strings.HasPrefix(vals[0], bearer) || len(vals[0]) == len(bearer) {
		return status.Error(codes.Unauthenticated, "missing cluster token: pass --token or set TROUPE_TOKEN (the head node wrote it to <data-dir>/token)")
	}
	got := sha256.Sum256([]byte(vals[0][len(bearer):]))
	if subtle.ConstantTimeCompare(got[:], a.sum[:]) != 1 {
		return status.Error(codes.Unauthenticated, "invalid cluster token: this cluster uses a different token")
	}
	return nil
}

// TapHandle refuses a call without the token before its request body is
// read (grpc.InTapHandle), so an unauthenticated peer never reaches the
// decoder.
func (a *Authenticator) TapHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if a.public[info.FullMethodName] {
		return ctx, nil
	}
	return ctx, a.checkMD(info.Header)
}

// UnaryInterceptor refuses unary RPCs without the token.
func (a *Authenticator) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.Check(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// StreamInterceptor refuses streams without the token.
func (a *Authenticator) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.Check(ss.Context()); err != nil {
		return err
	}
	return handler(srv, ss)
}
