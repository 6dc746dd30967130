package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"troupe/runtime/transport"
)

func TestCACreateAndReload(t *testing.T) {
	dir := t.TempDir()
	ca, created, err := LoadOrCreateCA(dir)
	if err != nil || !created {
		t.Fatalf("create: %v created=%v", err, created)
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode %v, want 0600", fi.Mode().Perm())
	}
	again, created, err := LoadOrCreateCA(dir)
	if err != nil || created {
		t.Fatalf("reload: %v created=%v", err, created)
	}
	if again.Hash() != ca.Hash() || again.Key == nil {
		t.Errorf("reloaded CA %s (key %v), want %s with its key", again.Hash(), again.Key != nil, ca.Hash())
	}
	if _, err := ParseHash(ca.Hash()); err != nil {
		t.Errorf("ParseHash(own hash): %v", err)
	}
	for _, bad := range []string{"", "sha256:12", "md5:" + strings.Repeat("0", 64), strings.Repeat("z", 64)} {
		if _, err := ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) accepted", bad)
		}
	}
	// A CA key that is not the certificate's is refused.
	other, otherKey, err := NewCA("other", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCA(ca.PEM, otherKey); !errors.Is(err, ErrMalformed) {
		t.Errorf("CA with a foreign key: %v, want ErrMalformed", err)
	}
	_ = other
}

func TestDeriveCASameForSameToken(t *testing.T) {
	a, err := DeriveCA("tok")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DeriveCA("tok")
	c, _ := DeriveCA("other")
	if string(a.PEM) != string(b.PEM) {
		t.Error("two derivations from one token differ")
	}
	if a.Hash() == c.Hash() {
		t.Error("different tokens derive the same CA")
	}
	// It can sign node certificates that verify against it.
	key, keyPEM, _ := NewKey()
	cert, err := a.Issue(key.Public(), Names{CommonName: "n", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewIdentity(b, cert, keyPEM); err != nil {
		t.Errorf("certificate from one derivation against the other: %v", err)
	}
}

func TestWriteNewRefusesOverwrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := WriteNew(p, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteNew(p, []byte("b"), 0o600); !errors.Is(err, ErrExists) {
		t.Fatalf("second write: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "a" {
		t.Errorf("file changed to %q", b)
	}
}

func TestIdentityChecks(t *testing.T) {
	ca, _, _ := NewCA("ca", 1)
	other, _, _ := NewCA("other", 1)
	key, keyPEM, _ := NewKey()
	cert, err := ca.Issue(key.Public(), Names{CommonName: "n"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewIdentity(ca, cert, keyPEM); err != nil {
		t.Fatalf("good identity: %v", err)
	}
	if _, err := NewIdentity(other, cert, keyPEM); err == nil {
		t.Error("certificate accepted against another CA")
	}
	_, key2PEM, _ := NewKey()
	if _, err := NewIdentity(ca, cert, key2PEM); !errors.Is(err, ErrMalformed) {
		t.Errorf("foreign key: %v, want ErrMalformed", err)
	}
	// An expired certificate is refused with the date.
	certs, _ := ParseCertsPEM(cert)
	if err := CheckValid(certs[0], time.Now().Add(2*24*time.Hour)); !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "expired on") {
		t.Errorf("expired: %v", err)
	}
}

// node is a TLS gRPC server with the bootstrap service, as a node runs it.
type node struct {
	addr string
	ca   *CA
	srv  *Server
}

func startNode(t *testing.T, token string, ca *CA) *node {
	t.Helper()
	id, err := IssueLocal(ca, Names{CommonName: "node", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, "")
	if err != nil {
		t.Fatal(err)
	}
	ps := &Server{Token: token}
	ps.SetCA(ca)
	g := transport.NewServer(transport.Options{Security: transport.Security{Token: token, Server: id.ServerTLS()}, Public: PublicMethods})
	g.RegisterService(&ServiceDesc, ps)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); <-done })
	return &node{addr: ln.Addr().String(), ca: ca, srv: ps}
}

func TestBootstrap(t *testing.T) {
	ca, _, err := NewCA("cluster", 1)
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, "right", ca)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	names := Names{CommonName: "joiner", IPs: []net.IP{net.ParseIP("127.0.0.2")}}

	t.Run("right token, pinned", func(t *testing.T) {
		is, err := Bootstrap(ctx, n.addr, "right", ca.Hash(), nil, names, false)
		if err != nil {
			t.Fatal(err)
		}
		if is.Identity.Leaf.Subject.CommonName != "joiner" || !is.Identity.Leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.2")) {
			t.Errorf("issued %v %v", is.Identity.Leaf.Subject, is.Identity.Leaf.IPAddresses)
		}
		if is.CAKeyPEM != nil || is.Identity.CA.Key != nil {
			t.Error("a worker was given the CA key")
		}
		if _, err := is.Identity.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("issued certificate: %v", err)
		}
	})
	t.Run("server gets the CA key", func(t *testing.T) {
		is, err := Bootstrap(ctx, n.addr, "right", "", nil, names, true)
		if err != nil {
			t.Fatal(err)
		}
		if is.Identity.CA.Key == nil {
			t.Error("a server was not given the CA key")
		}
		dir := t.TempDir()
		if err := is.Save(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadIdentity(filepath.Join(dir, CAFile), filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)); err != nil {
			t.Errorf("reload saved identity: %v", err)
		}
	})
	t.Run("wrong token: the CA is not trusted", func(t *testing.T) {
		_, err := Bootstrap(ctx, n.addr, "wrong", "", nil, names, false)
		if !errors.Is(err, ErrBadProof) {
			t.Fatalf("err %v, want ErrBadProof", err)
		}
	})
	t.Run("wrong token with a known CA: Sign refused", func(t *testing.T) {
		_, err := Bootstrap(ctx, n.addr, "wrong", "", ca, names, false)
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("err %v, want Unauthenticated", err)
		}
	})
	t.Run("pin mismatch refused", func(t *testing.T) {
		other, _, _ := NewCA("other", 1)
		_, err := Bootstrap(ctx, n.addr, "right", other.Hash(), nil, names, false)
		if !errors.Is(err, ErrCAMismatch) {
			t.Fatalf("err %v, want ErrCAMismatch", err)
		}
		if !strings.Contains(err.Error(), ca.Hash()) || !strings.Contains(err.Error(), n.addr) {
			t.Errorf("error does not name the CA found and the address: %v", err)
		}
	})
	t.Run("node of another CA", func(t *testing.T) {
		other, _, _ := NewCA("other", 1)
		_, err := Bootstrap(ctx, n.addr, "right", "", other, names, false)
		if !errors.Is(err, ErrNotClusterCA) || !strings.Contains(err.Error(), n.addr) {
			t.Fatalf("err %v, want a certificate verification error", err)
		}
	})
}

func TestPlaintextAndTLSMismatch(t *testing.T) {
	ca, _, _ := NewCA("cluster", 1)
	n := startNode(t, "tok", ca)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A plaintext client against the TLS node.
	cc, err := transport.Dial(n.addr, transport.Options{Security: transport.Security{Token: "tok"}})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	err = cc.Invoke(ctx, "/"+ServiceName+"/CA", &CARequest{Nonce: make([]byte, nonceLen)}, new(CAResponse))
	if !errors.Is(err, transport.ErrTLSRequired) || !strings.Contains(err.Error(), "drop --insecure") || !strings.Contains(err.Error(), n.addr) {
		t.Errorf("plaintext client: %v, want the address and a hint", err)
	}
	// A TLS client against a plaintext node.
	g := transport.NewServer(transport.Options{Security: transport.Security{Token: "tok"}, Public: PublicMethods})
	ps := &Server{Token: "tok"}
	ps.SetCA(ca)
	g.RegisterService(&ServiceDesc, ps)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	defer func() { g.Stop(); <-done }()
	_, err = FetchCA(ctx, ln.Addr().String(), "tok", "")
	if !errors.Is(err, transport.ErrNotTLS) {
		t.Errorf("TLS client against plaintext: %v", err)
	}
}

func TestExportImport(t *testing.T) {
	ca, _, _ := NewCA("cluster", 1)
	id, err := IssueLocal(ca, Names{CommonName: "node", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, "")
	if err != nil {
		t.Fatal(err)
	}
	caPEM, certPEM, keyPEM, ok, err := Export(id.Security("tok"))
	if err != nil || !ok {
		t.Fatalf("export: %v %v", ok, err)
	}
	sec, err := Import("tok", caPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if sec.Token != "tok" || sec.Server == nil || sec.Client == nil || sec.Server.Certificates[0].Leaf.Subject.CommonName != "node" {
		t.Errorf("imported %+v", sec)
	}
	if _, _, _, ok, _ := Export(transport.Security{Token: "tok"}); ok {
		t.Error("exported TLS from a plaintext Security")
	}
	other, _, _ := NewCA("other", 1)
	if _, err := Import("tok", other.PEM, certPEM, keyPEM); err == nil {
		t.Error("imported a certificate against another CA")
	}
}

// TestExpiredCertificates: a node whose certificate has expired is refused
// by a client with an error that says so and what to do; loading an
// expired certificate fails with ErrExpired and its date.
func TestExpiredCertificates(t *testing.T) {
	ca, _, _ := NewCA("cluster", 1)
	key, keyPEM, _ := NewKey()
	cert, err := ca.Issue(key.Public(), Names{CommonName: "old", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, 0) // valid until now
	if err != nil {
		t.Fatal(err)
	}
	// NotAfter is the issue time truncated to the second: wait until past it.
	for !time.Now().After(mustLeaf(t, cert).NotAfter) {
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := NewIdentity(ca, cert, keyPEM); !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "expired on") {
		t.Errorf("load expired: %v, want ErrExpired with the date", err)
	}
	leaf := mustLeaf(t, cert)
	tc := tls.Certificate{Certificate: [][]byte{leaf.Raw, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}
	g := transport.NewServer(transport.Options{Security: transport.Security{Token: "tok",
		Server: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{tc}}}})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(ln) }()
	defer func() { g.Stop(); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, _ := transport.Dial(ln.Addr().String(), transport.Options{Security: transport.Security{Token: "tok", Client: ClientTLS(ca)}})
	defer cc.Close()
	err = cc.Invoke(ctx, "/"+ServiceName+"/CA", &CARequest{Nonce: make([]byte, nonceLen)}, new(CAResponse))
	if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "has expired: renew it") || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("expired node certificate: %v", err)
	}
}

func mustLeaf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	c, err := ParseCertsPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c[0]
}
