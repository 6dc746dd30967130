package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/net/http2/hpack"

	"troupe/internal/testnet"
	"troupe/runtime/pki"
	"troupe/runtime/security"
	"troupe/runtime/transport"
	"troupe/scheduler"
)

// TestNoSecretsOnTheWire runs a head and a worker on loopback and a client,
// with recording proxies on the worker's way to the head (TLS bootstrap,
// join) and on the client's way to the worker (an actor whose argument is a
// marker). With TLS, neither the token nor the marker is in the recorded
// bytes; with --insecure both are (which shows the proxies record).
func TestNoSecretsOnTheWire(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		name := "tls"
		if insecure {
			name = "insecure"
		}
		t.Run(name, func(t *testing.T) {
			const tok = "the-token-0f1e2d3c4b5a69788796a5b4"
			marker := []byte("MARKER-actor-argument-5e1f7a")
			hc := testConfig(t, "head", RoleHead, tok)
			hc.TLS.Insecure = insecure
			head := startNode(t, hc)
			toHead := testnet.NewRecorder(t, head.Addr())

			wc := testConfig(t, "w1", RoleWorker, tok)
			wc.TLS.Insecure = insecure
			wc.Join = []string{toHead.Addr()}
			worker := startNode(t, wc)
			waitFor(t, "worker registered", 10*time.Second, func() bool { return nodeState(head.Status(), "w1") == "alive" })
			toWorker := testnet.NewRecorder(t, worker.Addr())

			cl, err := NewClientTLS(toWorker.Addr(), tok, security.TLS{Insecure: insecure})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := cl.CreateActors(ctx, []scheduler.ActorSpec{{ID: "a1", Class: "T", Args: marker,
				Request: scheduler.Request{Resources: scheduler.Resources{MilliCPU: 100}}}}); err != nil {
				t.Fatalf("create actor: %v", err)
			}
			if _, err := cl.Status(ctx); err != nil {
				t.Fatal(err)
			}
			if !insecure && cl.CAHash() != head.CAHash() {
				t.Errorf("client trusts CA %s, the head's is %s", cl.CAHash(), head.CAHash())
			}
			cl.Close()
			toHead.Close()
			toWorker.Close()
			for _, rec := range []struct {
				what string
				b    []byte
			}{{"worker→head", toHead.Bytes()}, {"client→worker", toWorker.Bytes()}} {
				if len(rec.b) < 200 {
					t.Fatalf("%s: only %d bytes recorded", rec.what, len(rec.b))
				}
				hasTok := containsSecret(rec.b, tok)
				if hasTok != insecure {
					t.Errorf("%s (%d bytes): token in the clear: %v", rec.what, len(rec.b), hasTok)
				}
			}
			if hasMarker := bytes.Contains(toWorker.Bytes(), marker); hasMarker != insecure {
				t.Errorf("client→worker: actor argument in the clear: %v", hasMarker)
			}
		})
	}
}

// containsSecret reports whether b shows tok: raw, or as gRPC sends it in
// a header (HPACK Huffman-coded "Bearer <tok>", which an observer decodes
// just as easily).
func containsSecret(b []byte, tok string) bool {
	return bytes.Contains(b, []byte(tok)) || bytes.Contains(b, hpack.AppendHuffmanString(nil, "Bearer "+tok))
}

// TestRaftStreamTLS: raft connections are TLS with the token handshake
// inside: bytes sent over them are not in the recorded traffic, a peer
// without a cluster certificate is refused, and a plaintext peer too.
func TestRaftStreamTLS(t *testing.T) {
	ca, _, err := pki.NewCA("cluster", 1)
	if err != nil {
		t.Fatal(err)
	}
	ident := func() transport.Security {
		id, err := pki.IssueLocal(ca, pki.Names{CommonName: "n", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, "")
		if err != nil {
			t.Fatal(err)
		}
		return transport.Security{Token: "tok", Server: id.ServerTLS(), Client: id.ClientTLS()}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newAuthStreamLayer(ln, ln.Addr(), ident(), testLogger(t))
	defer srv.Close()
	rec := testnet.NewRecorder(t, ln.Addr().String())
	marker := []byte("MARKER-raft-entry-77d1")
	got := make(chan []byte, 1)
	go func() {
		c, err := srv.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b := make([]byte, len(marker))
		io.ReadFull(c, b)
		got <- b
	}()
	dialer := newAuthStreamLayer(nopListener{}, ln.Addr(), ident(), testLogger(t))
	c, err := dialer.Dial(raft.ServerAddress(rec.Addr()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(marker)
	if b := <-got; !bytes.Equal(b, marker) {
		t.Fatalf("server read %q", b)
	}
	c.Close()
	rec.Close()
	if b := rec.Bytes(); len(b) < 500 || bytes.Contains(b, marker) || bytes.Contains(b, []byte("tok")) {
		t.Errorf("raft traffic (%d bytes) shows the marker or token", len(b))
	}

	// A client with the token but no certificate of the cluster: refused.
	other, _, _ := pki.NewCA("other", 1)
	oid, _ := pki.IssueLocal(other, pki.Names{CommonName: "x"}, "")
	stranger := newAuthStreamLayer(nopListener{}, ln.Addr(), transport.Security{Token: "tok", Client: oid.ClientTLS()}, testLogger(t))
	if c, err := stranger.Dial(raftAddr(ln), 3*time.Second); err == nil {
		c.Close()
		t.Error("a peer of another CA dialed raft")
	}
	// Plaintext: refused, and the dialer says why.
	plain := newAuthStreamLayer(nopListener{}, ln.Addr(), transport.Security{Token: "tok"}, testLogger(t))
	if c, err := plain.Dial(raftAddr(ln), 3*time.Second); err == nil {
		c.Close()
		t.Error("a plaintext peer dialed raft")
	}
}

func raftAddr(ln net.Listener) raft.ServerAddress { return raft.ServerAddress(ln.Addr().String()) }

// nopListener stands in for the listener of a stream layer that only dials.
type nopListener struct{}

func (nopListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (nopListener) Close() error              { return nil }
func (nopListener) Addr() net.Addr            { return &net.TCPAddr{} }

// TestTLSRestartKeepsIdentity: a worker with a data dir keeps its
// certificate across restarts (no new bootstrap), and a head reloads its
// CA (same hash).
func TestTLSRestartKeepsIdentity(t *testing.T) {
	const tok = "restart-token"
	hc := testConfig(t, "head", RoleHead, tok)
	head := startNode(t, hc)
	hash := head.CAHash()
	wc := testConfig(t, "w1", RoleWorker, tok)
	wc.Join = []string{head.Addr()}
	wc.TLS.CAHash = hash
	w := startNode(t, wc)
	cert1, err := os.ReadFile(filepath.Join(w.TLSDir(), pki.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	w.Shutdown()
	w2 := startNode(t, wc)
	cert2, _ := os.ReadFile(filepath.Join(w2.TLSDir(), pki.CertFile))
	if !bytes.Equal(cert1, cert2) {
		t.Error("restarted worker got a new certificate instead of keeping its own")
	}
	w2.Shutdown()
	// A saved CA that is not the pinned one: refused at start.
	wc.TLS.CAHash = "sha256:" + string(bytes.Repeat([]byte("0"), 64))
	if _, err := Start(context.Background(), wc); !errors.Is(err, pki.ErrCAMismatch) {
		t.Errorf("restart pinned to another CA: %v, want ErrCAMismatch", err)
	}
	head.Shutdown()
	h2 := startNode(t, hc)
	if h2.CAHash() != hash {
		t.Errorf("restarted head's CA %s, want %s", h2.CAHash(), hash)
	}
}

// TestTLSSettingErrors: the security package's refusals are the node's
// too (ErrConfig, ErrJoin), with their text.
func TestTLSSettingErrors(t *testing.T) {
	c := testConfig(t, "head", RoleHead, "tok")
	c.TLS = security.TLS{Insecure: true, CAFile: "ca.pem"}
	if _, err := Start(context.Background(), c); !errors.Is(err, ErrConfig) || !errors.Is(err, security.ErrConfig) {
		t.Errorf("--insecure with --tls-ca: %v, want ErrConfig", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	w := testConfig(t, "w1", RoleWorker, "tok")
	w.Join, w.JoinTimeout = []string{dead}, 300*time.Millisecond
	if _, err := Start(context.Background(), w); !errors.Is(err, ErrJoin) || !errors.Is(err, security.ErrUnreachable) {
		t.Errorf("no node to get a certificate from: %v, want ErrJoin", err)
	}
}
