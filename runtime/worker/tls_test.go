package worker

import (
	"bytes"
	"context"
	"net"
	"os"
	"testing"
	"time"

	"troupe/actors"
	"troupe/internal/testnet"
	"troupe/runtime/pki"
	"troupe/runtime/transport"
	"troupe/runtime/wire"
)

type echoer struct{}

func (echoer) Echo(ctx context.Context, s string) (string, error) { return s, nil }

func init() {
	actors.MustRegister[echoer]("WEcho", func(ctx context.Context, _ struct{}) (*echoer, error) { return &echoer{}, nil })
}

// TestWorkerTLS: a worker given the node's TLS identity over the control
// channel serves its call port with TLS: a caller that trusts the cluster
// CA calls it, through a recording proxy that sees neither the token nor
// the call's argument; a plaintext caller is refused.
func TestWorkerTLS(t *testing.T) {
	ca, _, err := pki.NewCA("cluster", 1)
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.IssueLocal(ca, pki.Names{CommonName: "node", IPs: []net.IP{net.ParseIP("127.0.0.1")}}, "")
	if err != nil {
		t.Fatal(err)
	}
	const tok = "worker-tls-token-4c1d"
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), StartOptions{Binary: exe, Job: "job-tls", Host: "127.0.0.1", Stderr: os.Stderr, Security: id.Security(tok)}, Events{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.StartActor(ctx, actors.Spec{Type: "WEcho", Config: []byte{0x80}}, actors.ActorInfo{ID: "e1"}); err != nil {
		t.Fatal(err)
	}
	// Through the proxy the dial is TCP (no local socket beside its address).
	rec := testnet.NewRecorder(t, p.Addr())
	caller := transport.Security{Token: tok, Client: pki.ClientTLS(ca)}
	cl, err := wire.Dial(ctx, caller, "tcp", rec.Addr(), 0)
	if err != nil {
		t.Fatal(err)
	}
	marker := "MARKER-wire-argument-9b3e"
	h := actors.HandleOf[echoer](cl.Ref("e1", "", "WEcho", nil))
	if got, err := actors.Call(ctx, h, (*echoer).Echo, marker).Get(ctx); err != nil || got != marker {
		t.Fatalf("Echo over TLS = %q, %v", got, err)
	}
	cl.Close()
	rec.Close()
	if b := rec.Bytes(); len(b) < 500 || bytes.Contains(b, []byte(marker)) || bytes.Contains(b, []byte(tok)) {
		t.Errorf("recorded %d bytes; marker or token in the clear", len(b))
	}
	// Plaintext with the right token, over TCP: refused.
	rec2 := testnet.NewRecorder(t, p.Addr())
	t0 := time.Now()
	if cl, err := wire.Dial(ctx, transport.Security{Token: tok}, "tcp", rec2.Addr(), 0); err == nil {
		_, cerr := actors.Call(ctx, actors.HandleOf[echoer](cl.Ref("e1", "", "WEcho", nil)), (*echoer).Echo, "x").Get(ctx)
		cl.Close()
		if cerr == nil {
			t.Error("a plaintext caller called the TLS worker")
		}
	} else {
		t.Logf("plaintext dial refused after %v: %v", time.Since(t0), err)
	}
}
