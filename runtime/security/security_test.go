package security

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/pki"
	"troupe/runtime/transport"
)

func TestToken(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvToken, "")
	if _, err := Token("", dir); !errors.Is(err, ErrNoToken) {
		t.Fatalf("no token anywhere: %v, want ErrNoToken", err)
	}
	if err := SaveToken(dir, "from-file"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(TokenFile(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", fi, err)
	}
	if tok, _ := Token("", dir); tok != "from-file" {
		t.Errorf("token %q, want the file's", tok)
	}
	t.Setenv(EnvToken, "from-env")
	if tok, _ := Token("", dir); tok != "from-env" {
		t.Errorf("token %q, want the environment's over the file's", tok)
	}
	if tok, _ := Token("from-flag", dir); tok != "from-flag" {
		t.Errorf("token %q, want the flag's over all", tok)
	}
	a, err := NewToken()
	if err != nil || len(a) != 48 {
		t.Fatalf("NewToken: %q %v", a, err)
	}
	if b, _ := NewToken(); a == b {
		t.Error("two new tokens are equal")
	}
}

func TestFromEnvAndDataDir(t *testing.T) {
	t.Setenv(EnvInsecure, "1")
	t.Setenv(EnvCAHash, "sha256:ab")
	t.Setenv(EnvTLSCA, "ca.pem")
	if got := FromEnv(); !got.Insecure || got.CAHash != "sha256:ab" || got.CAFile != "ca.pem" {
		t.Errorf("FromEnv: %+v", got)
	}
	dir := t.TempDir()
	if got := (TLS{}).WithDataDir(dir); got.CAFile != "" {
		t.Errorf("a data dir without a CA gave %q", got.CAFile)
	}
	if _, _, err := pki.LoadOrCreateCA(pki.Dir(dir)); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(pki.Dir(dir), pki.CAFile)
	if got := (TLS{}).WithDataDir(dir); got.CAFile != want {
		t.Errorf("CA file %q, want %q", got.CAFile, want)
	}
	if got := (TLS{CAFile: "mine.pem"}).WithDataDir(dir); got.CAFile != "mine.pem" {
		t.Errorf("the data dir replaced the CA file given: %q", got.CAFile)
	}
	if got := (TLS{Insecure: true}).WithDataDir(dir); got.CAFile != "" {
		t.Errorf("an insecure client got a CA file: %q", got.CAFile)
	}
}

func TestClientSettings(t *testing.T) {
	dir := t.TempDir()
	ca, created, err := pki.LoadOrCreateCA(dir)
	if err != nil || !created {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, pki.CAFile)
	other, _, _ := pki.NewCA("other", 1)
	for _, c := range []struct {
		name string
		t    TLS
		want error
	}{
		{"insecure with a CA file", TLS{Insecure: true, CAFile: caFile}, ErrConfig},
		{"insecure with a pin", TLS{Insecure: true, CAHash: ca.Hash()}, ErrConfig},
		{"malformed pin", TLS{CAHash: "md5:00"}, ErrConfig},
		{"missing CA file", TLS{CAFile: filepath.Join(dir, "none.pem")}, ErrConfig},
		{"CA file against another pin", TLS{CAFile: caFile, CAHash: other.Hash()}, pki.ErrCAMismatch},
	} {
		if _, err := NewClient("tok", c.t); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	c, err := NewClient("tok", TLS{CAFile: caFile, CAHash: ca.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := c.Security(context.Background(), "127.0.0.1:1") // known CA: no node asked
	if err != nil || sec.Client == nil || sec.Token != "tok" || c.CA().Hash() != ca.Hash() || c.TLS().CA == nil {
		t.Fatalf("client with a CA file: %+v %v", sec, err)
	}
	plain, err := NewClient("tok", TLS{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if sec, err := plain.Security(context.Background(), "127.0.0.1:1"); err != nil || sec.TLS() || plain.CA() != nil {
		t.Fatalf("insecure client: %+v %v", sec, err)
	}
}

// serveCA serves the CA bootstrap of a node holding ca, and returns its
// address.
func serveCA(t *testing.T, token string, ca *pki.CA) string {
	t.Helper()
	id, err := pki.IssueLocal(ca, pki.Names{CommonName: "node", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	g := transport.NewServer(transport.Options{Security: id.Security(token), Public: pki.PublicMethods})
	srv := &pki.Server{Token: token}
	srv.SetCA(ca)
	g.RegisterService(&pki.ServiceDesc, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// TestClientLearnsCA: a client naming no CA learns it from the node it
// reaches, checked against its pin.
func TestClientLearnsCA(t *testing.T) {
	ca, _, _ := pki.NewCA("cluster", 1)
	addr := serveCA(t, "tok", ca)
	c, err := NewClient("tok", TLS{CAHash: ca.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	if sec, err := c.Security(context.Background(), addr); err != nil || sec.Client == nil || c.CA().Hash() != ca.Hash() {
		t.Fatalf("learning the CA: %v", err)
	}
	other, _, _ := pki.NewCA("other", 1)
	pinned, _ := NewClient("tok", TLS{CAHash: other.Hash()})
	if _, err := pinned.Security(context.Background(), addr); !errors.Is(err, pki.ErrCAMismatch) {
		t.Errorf("a node with another CA than the pin: %v, want ErrCAMismatch", err)
	}
	wrong, _ := NewClient("wrong", TLS{})
	if _, err := wrong.Security(context.Background(), addr); !errors.Is(err, pki.ErrBadProof) {
		t.Errorf("a node that does not prove the client's token: %v, want ErrBadProof", err)
	}
}

func TestResolveNodeSettings(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		n    Node
	}{
		{"insecure with certificates", Node{TLS: TLS{Insecure: true, CertFile: "c.pem"}}},
		{"insecure with a pin", Node{TLS: TLS{Insecure: true, CAHash: "sha256:00"}}},
		{"certificate without key", Node{TLS: TLS{CAFile: "ca.pem", CertFile: "c.pem"}}},
		{"head without data dir", Node{Token: "tok", Head: true}},
		{"no certificate, no join address", Node{Token: "tok", DataDir: t.TempDir()}},
		{"malformed pin", Node{Token: "tok", TLS: TLS{CAHash: "nope"}}},
	} {
		if _, err := ResolveNode(ctx, c.n); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", c.name, err)
		}
	}
	res, err := ResolveNode(ctx, Node{Token: "tok", TLS: TLS{Insecure: true}})
	if err != nil || res.Security.TLS() || res.Identity != nil || res.Security.Token != "tok" {
		t.Fatalf("insecure node: %+v %v", res, err)
	}
}

// TestResolveNodeIdentity: a head makes the CA in its data dir and keeps
// it across starts; a node joining it gets a certificate of that CA, or
// fails fast on a pin that does not match, or with ErrUnreachable when no
// one answers.
func TestResolveNodeIdentity(t *testing.T) {
	ctx := context.Background()
	headDir := t.TempDir()
	names := pki.Names{CommonName: "head", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	head, err := ResolveNode(ctx, Node{Token: "tok", Head: true, Server: true, DataDir: headDir, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	if head.Dir != pki.Dir(headDir) || !head.Security.TLS() || head.Identity.CA.Key == nil {
		t.Fatalf("head: %+v", head)
	}
	again, err := ResolveNode(ctx, Node{Token: "tok", Head: true, DataDir: headDir, Names: names, TLS: TLS{CAHash: head.Identity.CA.Hash()}})
	if err != nil || again.Identity.CA.Hash() != head.Identity.CA.Hash() {
		t.Fatalf("restarted head: %v, CA changed: %v", err, again != nil && again.Identity.CA.Hash() != head.Identity.CA.Hash())
	}
	addr := serveCA(t, "tok", head.Identity.CA)

	workerDir := t.TempDir()
	w, err := ResolveNode(ctx, Node{Token: "tok", DataDir: workerDir, Names: pki.Names{CommonName: "w"}, Join: []string{addr}, JoinTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if w.Identity.CA.Hash() != head.Identity.CA.Hash() || w.Identity.CA.Key != nil {
		t.Fatalf("worker's CA %s (key %v), want the head's %s without its key", w.Identity.CA.Hash(), w.Identity.CA.Key != nil, head.Identity.CA.Hash())
	}
	if _, err := os.Stat(filepath.Join(pki.Dir(workerDir), pki.CertFile)); err != nil {
		t.Errorf("the worker's certificate was not saved: %v", err)
	}

	other, _, _ := pki.NewCA("other", 1)
	start := time.Now()
	_, err = ResolveNode(ctx, Node{Token: "tok", Join: []string{addr}, JoinTimeout: time.Minute, TLS: TLS{CAHash: other.Hash()}})
	if !errors.Is(err, pki.ErrCAMismatch) || time.Since(start) > 10*time.Second {
		t.Errorf("pin mismatch: %v after %v, want ErrCAMismatch at once", err, time.Since(start))
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	_, err = ResolveNode(ctx, Node{Token: "tok", Join: []string{dead}, JoinTimeout: 500 * time.Millisecond})
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("no node answering: %v, want ErrUnreachable", err)
	}
}

func TestPermanent(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", pki.ErrCAMismatch), true},
		{fmt.Errorf("x: %w", pki.ErrNotClusterCA), true},
		{fmt.Errorf("x: %w", transport.ErrNotTLS), true},
		{status.Error(codes.Unauthenticated, "wrong token"), true},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{errors.New("dial: timeout"), false},
	} {
		if got := permanent(c.err); got != c.want {
			t.Errorf("permanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
