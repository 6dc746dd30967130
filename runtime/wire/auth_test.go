package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"troupe/actors"
	"troupe/runtime/transport"
	"troupe/runtime/transport/transporttest"
)

// countingHost counts lookups: every call frame a server handles looks its
// actor up first.
type countingHost struct {
	*host
	lookups atomic.Int64
}

func (h *countingHost) Lookup(id string) (Target, bool) {
	h.lookups.Add(1)
	return h.host.Lookup(id)
}

// TestPortsRefuseUnauthenticated: a worker's call port, on TCP and on its
// Unix socket, runs nothing for a peer without the token or with a wrong
// one: raw call frames, a client without a token and a client with a
// wrong one are all refused, no actor is looked up or called, and the
// actor's state is what it was.
func TestPortsRefuseUnauthenticated(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	h := &countingHost{host: &host{byID: map[string]*actors.Instance{}}}
	h.spawn(t, "a", spec(5))
	srv := NewServer(h, 0, testSec)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ul, err := ListenLocal(l)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	go srv.Serve(ul)
	defer srv.Close()
	addr := l.Addr().String()
	path, err := transport.LocalPath(localKind, addr)
	if err != nil {
		t.Fatal(err)
	}
	call := appendFrame(nil, &frame{kind: kindCall, callID: 1, actor: "a", method: "Add", data: []byte{1}})
	ctx := context.Background()
	for _, network := range []string{"tcp", "unix"} {
		target := addr
		if network == "unix" {
			target = path
		}
		// Raw frames, as an attacker with a plain socket sends them.
		nc, err := net.Dial(network, target)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(call)
		// Closed (reset, as the frames were not read) with nothing sent.
		if b, err := io.ReadAll(nc); len(b) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: raw call frames got %q, %v; want the connection closed with nothing sent", network, b, err)
		}
		nc.Close()
		// A client without a token, and one with a wrong token.
		for _, sec := range []transport.Security{{}, {Token: "wrong"}} {
			if _, err := sec.Dial(ctx, nil, network, target); !errors.Is(err, transport.ErrUnauthenticated) {
				t.Errorf("%s with token %q: %v, want ErrUnauthenticated", network, sec.Token, err)
			}
		}
	}
	// Dial falls back to nothing else when the local socket refuses.
	if _, err := Dial(ctx, transport.Security{Token: "wrong"}, "tcp", addr, 0); !errors.Is(err, transport.ErrUnauthenticated) {
		t.Errorf("wire.Dial with a wrong token: %v, want ErrUnauthenticated", err)
	}
	if n := h.lookups.Load(); n != 0 {
		t.Fatalf("unauthenticated peers reached %d actor lookups", n)
	}
	// The actor was never called: its first authenticated call sees the
	// initial state.
	for _, network := range []string{"tcp"} {
		cl, err := Dial(ctx, testSec, network, addr, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if v, err := actors.Call(ctx, handle(cl, "a"), (*echo).Add, 1).Get(ctx); err != nil || v != 6 {
			t.Fatalf("authenticated Add = %d, %v; want 6 (the state untouched before)", v, err)
		}
	}
	if n := h.lookups.Load(); n != 1 {
		t.Errorf("%d lookups after one authenticated call", n)
	}
}

// TestDialOptions: Dial takes the Unix socket beside a TCP address served
// on this host unless NoUnix, and its client and the server poll their
// reads as their Security says (a negative Spin: not at all).
func TestDialOptions(t *testing.T) {
	if !localOS {
		t.Skip("no Unix shortcut on this OS")
	}
	t.Setenv("TMPDIR", t.TempDir())
	h := &host{byID: map[string]*actors.Instance{}}
	h.spawn(t, "a", spec(0))
	noSpin := testSec
	noSpin.Spin = -1
	srv := NewServer(h, 0, noSpin)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ul, err := ListenLocal(l)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	go srv.Serve(ul)
	defer srv.Close()
	ctx := context.Background()
	for _, c := range []struct {
		opts []DialOption
		sec  transport.Security
		want string
	}{{nil, testSec, "unix"}, {[]DialOption{NoUnix()}, noSpin, "tcp"}} {
		cl, err := Dial(ctx, c.sec, "tcp", l.Addr().String(), 0, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := cl.c.nc.RemoteAddr().Network(); got != c.want {
			t.Errorf("Dial with %d options went over %s, want %s", len(c.opts), got, c.want)
		}
		if cl.c.spin != c.sec.ReadSpin() {
			t.Errorf("client polls for %v, want %v", cl.c.spin, c.sec.ReadSpin())
		}
		if _, err := actors.Call(ctx, handle(cl, "a"), (*echo).Add, 1).Get(ctx); err != nil {
			t.Fatal(err)
		}
		srv.mu.Lock()
		if len(srv.conns) == 0 {
			t.Error("the server has no connection after a call")
		}
		for sc := range srv.conns {
			if sc.c.spin != 0 {
				t.Errorf("a connection of a server with Spin -1 polls for %v", sc.c.spin)
			}
		}
		srv.mu.Unlock()
		cl.Close()
	}
}

// recordingProxy forwards connections from its listener to target and
// records every byte in both directions.
type recordingProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	bytes  bytes.Buffer
	wg     sync.WaitGroup
}

func startRecordingProxy(t *testing.T, target string) *recordingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordingProxy{l: l, target: target}
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Go(func() { io.Copy(io.MultiWriter(s, p), c); s.Close() })
			p.wg.Go(func() { io.Copy(io.MultiWriter(c, p), s); c.Close() })
		}
	})
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

func (p *recordingProxy) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes.Write(b)
}

func (p *recordingProxy) recorded() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.bytes.Bytes())
}

// TestRecordedBytes: through a recording proxy, the token never appears
// in the bytes of a call connection (it is proved, not sent); with TLS the
// call's argument and result do not either, while in plaintext they do
// (the test can see them).
func TestRecordedBytes(t *testing.T) {
	pki, err := transporttest.New()
	if err != nil {
		t.Fatal(err)
	}
	const token = "token-6b1d9e0c2f"
	marker := []byte("marker-argument-5c8e77a1")
	for _, withTLS := range []bool{false, true} {
		sec := transport.Security{Token: token}
		if withTLS {
			sec.Server, sec.Client = pki.Server(), pki.Client()
		}
		h := &host{byID: map[string]*actors.Instance{}}
		h.spawn(t, "a", spec(0))
		srv := NewServer(h, 0, sec)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(l)
		p := startRecordingProxy(t, l.Addr().String())
		ctx := context.Background()
		cl, err := Dial(ctx, sec, "tcp", p.l.Addr().String(), 0, NoUnix())
		if err != nil {
			t.Fatal(err)
		}
		got, err := actors.Call(ctx, handle(cl, "a"), (*echo).Bytes, marker).Get(ctx)
		if err != nil || !bytes.Equal(got, marker) {
			t.Fatalf("call through the proxy: %q %v", got, err)
		}
		cl.Close()
		srv.Close()
		rec := p.recorded()
		if len(rec) == 0 {
			t.Fatal("the proxy recorded nothing")
		}
		if bytes.Contains(rec, []byte(token)) {
			t.Errorf("TLS %v: the token crossed the wire", withTLS)
		}
		if seen := bytes.Contains(rec, marker); seen == withTLS {
			t.Errorf("TLS %v: argument seen in the recorded bytes: %v", withTLS, seen)
		}
	}
}

// TestErrNoticesAnIdleTLSPeerThatLeft: over TLS, where a closing peer's
// close_notify record (and the session tickets sent after the handshake)
// sit in the socket, Err still notices a worker that went away, and a
// probe of a live connection loses no input.
func TestErrNoticesAnIdleTLSPeerThatLeft(t *testing.T) {
	pki, err := transporttest.New()
	if err != nil {
		t.Fatal(err)
	}
	sec := transport.Security{Token: "tok", Server: pki.Server(), Client: pki.Client()}
	ctx := context.Background()
	h := &host{byID: map[string]*actors.Instance{}}
	h.spawn(t, "a", spec(0))
	srv := NewServer(h, 0, sec)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	cl, err := Dial(ctx, sec, "tcp", l.Addr().String(), 0, NoUnix())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cl.probeAfter = 0
	for i := 1; i <= 3; i++ {
		if v, err := actors.Call(ctx, handle(cl, "a"), (*echo).Add, 1).Get(ctx); err != nil || v != i {
			t.Fatalf("call %d: %d %v", i, v, err)
		}
		if err := cl.Err(); err != nil { // probes: the tickets are read, nothing is lost
			t.Fatalf("open connection: %v", err)
		}
	}
	srv.Close()
	deadline := time.Now().Add(10 * time.Second)
	for err = cl.Err(); err == nil && time.Now().Before(deadline); err = cl.Err() {
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Err after the TLS peer closed: %v", err)
	}
}
